#include "sim/engine.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "sim/event_queue.h"
#include "sim/time.h"

namespace ssdtrain::sim {
namespace {

// One conformance suite for every EventQueue implementation.
template <typename Q>
class EventQueueTest : public ::testing::Test {};
using Queues = ::testing::Types<HeapEventQueue, MapEventQueue>;
TYPED_TEST_SUITE(EventQueueTest, Queues);

TYPED_TEST(EventQueueTest, PopsInTimeOrder) {
  TypeParam q;
  q.Push(Event{Time::Ns(30), 0, {}});
  q.Push(Event{Time::Ns(10), 1, {}});
  q.Push(Event{Time::Ns(20), 2, {}});
  EXPECT_EQ(q.Pop().time, Time::Ns(10));
  EXPECT_EQ(q.Pop().time, Time::Ns(20));
  EXPECT_EQ(q.Pop().time, Time::Ns(30));
  EXPECT_TRUE(q.Empty());
}

TYPED_TEST(EventQueueTest, TiesBreakByInsertionOrder) {
  TypeParam q;
  for (uint64_t s = 0; s < 100; ++s) q.Push(Event{Time::Ns(5), s, {}});
  for (uint64_t s = 0; s < 100; ++s) EXPECT_EQ(q.Pop().sequence, s);
}

TYPED_TEST(EventQueueTest, EngineRunsEqualTimesInScheduleOrder) {
  Engine engine(std::make_unique<TypeParam>());
  std::vector<int> order;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(engine.Schedule(Time::Ns(7), [&order, i] { order.push_back(i); }).ok());
  }
  engine.Run();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(engine.Now(), Time::Ns(7));
}

TEST(Engine, ScheduleRejectsNegativeDelay) {
  Engine engine;
  const Status s = engine.Schedule(Time::Ns(-1), [] {});
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(engine.pending(), 0u);
}

TEST(Engine, ScheduleAtRejectsThePast) {
  Engine engine;
  ASSERT_TRUE(engine.Schedule(Time::Ns(10), [] {}).ok());
  engine.Run();
  EXPECT_FALSE(engine.ScheduleAt(Time::Ns(9), [] {}).ok());
  EXPECT_TRUE(engine.ScheduleAt(Time::Ns(10), [] {}).ok());
}

TEST(Engine, ActionsScheduleLaterEventsAndObserversSeeEach) {
  Engine engine;
  std::vector<int64_t> seen;
  engine.AddObserver([&seen](Time t, uint64_t) { seen.push_back(t.ns()); });
  ASSERT_TRUE(engine
                  .Schedule(Time::Ns(5),
                            [&engine] { ASSERT_TRUE(engine.Schedule(Time::Ns(3), [] {}).ok()); })
                  .ok());
  engine.Run();
  // 5, then 5 + 3 = 8.
  EXPECT_EQ(seen, (std::vector<int64_t>{5, 8}));
  EXPECT_EQ(engine.events_processed(), 2u);
}

TEST(Time, TransferTimeRoundsUp) {
  // 1 byte at 3 B/s is 333,333,333.3 ns: rounded up to 333,333,334.
  EXPECT_EQ(TransferTime(Bytes{1}, BytesPerSec{3}).ns(), 333'333'334);
  // 1 GiB at 1 GiB/s is exactly one second.
  EXPECT_EQ(TransferTime(Bytes{1 << 30}, BytesPerSec{1 << 30}).ns(), 1'000'000'000);
  // Round trip: what moves in the rounded-up time covers the bytes.
  EXPECT_GE(BytesMoved(BytesPerSec{3}, TransferTime(Bytes{1}, BytesPerSec{3})).value, 1);
}

}  // namespace
}  // namespace ssdtrain::sim

#include "sim/fluid.h"

#include <gtest/gtest.h>

#include "sim/engine.h"

namespace ssdtrain::sim {
namespace {

constexpr BytesPerSec k32GBps{32'000'000'000};

TEST(FluidNetwork, TwoEqualTransfersShareTheLinkHalfAndHalf) {
  // Two 16 GB flows on a 32 GB/s link get 16 GB/s each: both end at 1 s
  // (alone, one would take 0.5 s).
  Engine engine;
  FluidNetwork net(engine);
  const auto link = net.AddResource("pcie");
  int64_t a_end = 0, b_end = 0;
  const auto a = net.Start(Bytes{16'000'000'000}, {{link, k32GBps}}, Time(),
                           [&] { a_end = engine.Now().ns(); });
  net.Start(Bytes{16'000'000'000}, {{link, k32GBps}}, Time(), [&] { b_end = engine.Now().ns(); });
  engine.Step();  // a begins
  engine.Step();  // b begins
  EXPECT_EQ(net.CurrentRate(a).value, 16'000'000'000);
  engine.Run();
  EXPECT_EQ(a_end, 1'000'000'000);
  EXPECT_EQ(b_end, 1'000'000'000);
}

TEST(FluidNetwork, RatesAreReDividedWhenAFlowStartsAndEnds) {
  // A: 32 GB from t=0; B: 8 GB from t=0.5 s. A alone moves 16 GB by 0.5 s;
  // then both at 16 GB/s: B's 8 GB take 0.5 s (ends 1.0 s), A moves 8 GB more;
  // A's last 8 GB alone at 32 GB/s take 0.25 s: A ends at 1.25 s.
  Engine engine;
  FluidNetwork net(engine);
  const auto link = net.AddResource("pcie");
  int64_t a_end = 0, b_end = 0;
  net.Start(Bytes{32'000'000'000}, {{link, k32GBps}}, Time(), [&] { a_end = engine.Now().ns(); });
  ASSERT_TRUE(engine
                  .Schedule(Time::Ms(500),
                            [&] {
                              net.Start(Bytes{8'000'000'000}, {{link, k32GBps}}, Time(),
                                        [&] { b_end = engine.Now().ns(); });
                            })
                  .ok());
  engine.Run();
  EXPECT_EQ(b_end, 1'000'000'000);
  EXPECT_EQ(a_end, 1'250'000'000);
  EXPECT_EQ(net.BusyTime(link).ns(), 1'250'000'000);
}

TEST(FluidNetwork, QueuedFlowsTakeTheResourceOneAfterAnother) {
  // An SSD at 4 GB/s, two 4 GB reads queued on it: the first has the drive to
  // itself and ends at 1 s, the second then ends at 2 s (shared, both would end
  // at 2 s). A write in the other queue splits the drive with the read queue's
  // head; a PCIe link the waiting read also needs is not held by it.
  Engine engine;
  FluidNetwork net(engine);
  const auto ssd = net.AddResource("ssd");
  const auto pcie = net.AddResource("pcie");
  constexpr BytesPerSec k4GBps{4'000'000'000};
  int64_t first = 0, second = 0, write = 0, other = 0;
  const auto a = net.Start(Bytes{4'000'000'000}, {{ssd, k4GBps, 0}, {pcie, k32GBps}}, Time(),
                           [&] { first = engine.Now().ns(); });
  const auto b = net.Start(Bytes{4'000'000'000}, {{ssd, k4GBps, 0}, {pcie, k32GBps}}, Time(),
                           [&] { second = engine.Now().ns(); });
  const auto c = net.Start(Bytes{16'000'000'000}, {{pcie, k32GBps}}, Time(),
                           [&] { other = engine.Now().ns(); });
  engine.Step();
  engine.Step();
  engine.Step();
  EXPECT_EQ(net.CurrentRate(a).value, 4'000'000'000);
  EXPECT_EQ(net.CurrentRate(b).value, 0);
  EXPECT_EQ(net.CurrentRate(c).value, 16'000'000'000);  // PCIe split with a only
  engine.Run();
  EXPECT_EQ(first, 1'000'000'000);
  EXPECT_EQ(second, 2'000'000'000);
  EXPECT_EQ(net.BusyTime(ssd).ns(), 2'000'000'000);

  // Now a 2 GB write (queue 1) next to a 2 GB read (queue 0): each gets half.
  Engine engine2;
  FluidNetwork net2(engine2);
  const auto ssd2 = net2.AddResource("ssd");
  int64_t read = 0;
  net2.Start(Bytes{2'000'000'000}, {{ssd2, k4GBps, 0}}, Time(), [&] { read = engine2.Now().ns(); });
  net2.Start(Bytes{2'000'000'000}, {{ssd2, k4GBps, 1}}, Time(),
             [&] { write = engine2.Now().ns(); });
  engine2.Run();
  EXPECT_EQ(read, 1'000'000'000);
  EXPECT_EQ(write, 1'000'000'000);
  (void)other;
}

TEST(FluidNetwork, FlowMovesAtItsSlowestResourceShare) {
  // PCIe 32 GB/s and an SSD writing at 4 GB/s: one 4 GB write takes 1 s.
  Engine engine;
  FluidNetwork net(engine);
  const auto pcie = net.AddResource("pcie");
  const auto ssd = net.AddResource("ssd");
  int64_t end = 0;
  net.Start(Bytes{4'000'000'000}, {{pcie, k32GBps}, {ssd, BytesPerSec{4'000'000'000}}}, Time(),
            [&] { end = engine.Now().ns(); });
  engine.Run();
  EXPECT_EQ(end, 1'000'000'000);
}

TEST(FluidNetwork, AdmissionCapQueuesFifoAndQueuedFlowsCanBeCancelled) {
  // Cap 1: the second 1 GB flow starts after the first (1 GB/s each): ends at
  // 2 s; the third is cancelled while queued and never runs.
  Engine engine;
  FluidNetwork net(engine);
  const auto ssd = net.AddResource("ssd", 1);
  const BytesPerSec rate{1'000'000'000};
  int64_t first = 0, second = 0;
  bool third_ran = false;
  net.Start(Bytes{1'000'000'000}, {{ssd, rate}}, Time(), [&] { first = engine.Now().ns(); });
  net.Start(Bytes{1'000'000'000}, {{ssd, rate}}, Time(), [&] { second = engine.Now().ns(); });
  const auto third = net.Start(Bytes{1}, {{ssd, rate}}, Time(), [&] { third_ran = true; });
  EXPECT_TRUE(net.Cancel(third));
  engine.Run();
  EXPECT_EQ(first, 1'000'000'000);
  EXPECT_EQ(second, 2'000'000'000);
  EXPECT_FALSE(third_ran);
}

// A flow waiting for a full resource holds back later flows on that resource
// only. PCIe admits one flow; A (PCIe + SSD) moves, B (PCIe + SSD) waits for
// PCIe, C (SSD only) is admitted at once beside A: 16 GB each on the 32 GB/s
// SSD share it, so A and C end at 1 s; then B alone, 0.5 s more.
TEST(FluidNetwork, AWaitingFlowBlocksOnlyTheResourceThatIsFull) {
  Engine engine;
  FluidNetwork net(engine);
  const auto pcie = net.AddResource("pcie", 1);
  const auto ssd = net.AddResource("ssd");
  int64_t a_end = 0, b_end = 0, c_end = 0;
  net.Start(Bytes{16'000'000'000}, {{pcie, k32GBps}, {ssd, k32GBps}}, Time(),
            [&] { a_end = engine.Now().ns(); });
  const auto b = net.Start(Bytes{16'000'000'000}, {{pcie, k32GBps}, {ssd, k32GBps}}, Time(),
                           [&] { b_end = engine.Now().ns(); });
  const auto c = net.Start(Bytes{16'000'000'000}, {{ssd, k32GBps}}, Time(),
                           [&] { c_end = engine.Now().ns(); });
  EXPECT_FALSE(net.Admitted(b));
  EXPECT_TRUE(net.Admitted(c));
  engine.Run();
  EXPECT_EQ(a_end, 1'000'000'000);
  EXPECT_EQ(c_end, 1'000'000'000);
  EXPECT_EQ(b_end, 1'500'000'000);
}

TEST(FluidNetwork, LatencyDelaysTheFirstByte) {
  // 10 µs latency + 1 MB at 1 GB/s (1 ms) = 1.01 ms.
  Engine engine;
  FluidNetwork net(engine);
  const auto ssd = net.AddResource("ssd");
  int64_t end = 0;
  net.Start(Bytes{1'000'000}, {{ssd, BytesPerSec{1'000'000'000}}}, Time::Us(10),
            [&] { end = engine.Now().ns(); });
  engine.Run();
  EXPECT_EQ(end, 1'010'000);
}

TEST(FluidNetwork, InvalidFlowIsAnErrorInEveryBuildAndNeverRuns) {
  // Each of these used to be an assert only: in a Release build a negative
  // latency made the engine refuse the flow's first event, the flow stayed
  // admitted forever and nothing reported it. Now Start rejects it and
  // status() keeps the first rejection. A valid flow beside them still ends
  // at 1 MB / 1 GB/s = 1 ms.
  Engine engine;
  FluidNetwork net(engine);
  const auto ssd = net.AddResource("ssd");
  const BytesPerSec rate{1'000'000'000};
  int64_t valid_end = 0;
  int invalid_ran = 0;
  net.Start(Bytes{1'000'000}, {{ssd, rate}}, Time(), [&] { valid_end = engine.Now().ns(); });
  EXPECT_TRUE(net.status().ok());
  const auto negative_latency =
      net.Start(Bytes{1'000}, {{ssd, rate}}, Time::Ns(-5), [&] { ++invalid_ran; });
  EXPECT_EQ(net.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(net.status().message().find("flow 1: negative latency -5 ns"), std::string::npos)
      << net.status().message();
  net.Start(Bytes{-1}, {{ssd, rate}}, Time(), [&] { ++invalid_ran; });
  net.Start(Bytes{1'000}, {{ssd, BytesPerSec{0}}}, Time(), [&] { ++invalid_ran; });
  net.Start(Bytes{1'000}, {{7, rate}}, Time(), [&] { ++invalid_ran; });
  // The first error is the one kept; a rejected flow cannot be cancelled or admitted.
  EXPECT_NE(net.status().message().find("flow 1:"), std::string::npos);
  EXPECT_FALSE(net.Cancel(negative_latency));
  engine.Run();
  EXPECT_FALSE(net.Admitted(negative_latency));
  EXPECT_EQ(invalid_ran, 0);
  EXPECT_EQ(valid_end, 1'000'000);
}

TEST(FluidNetwork, EachKindOfInvalidFlowNamesWhatIsWrong) {
  const BytesPerSec rate{1'000'000'000};
  struct Case {
    Bytes bytes;
    FluidNetwork::ResourceId resource;
    BytesPerSec rate;
    const char* expected;
  };
  const Case cases[] = {
      {Bytes{-1}, 0, rate, "flow 0: negative size -1"},
      {Bytes{1}, 0, BytesPerSec{0}, "flow 0: rate 0 B/s on ssd (must be > 0)"},
      {Bytes{1}, 3, rate, "flow 0: no resource 3 (1 exist)"},
  };
  for (const Case& c : cases) {
    Engine engine;
    FluidNetwork net(engine);
    net.AddResource("ssd");
    net.Start(c.bytes, {{c.resource, c.rate}}, Time(), [] {});
    engine.Run();
    EXPECT_EQ(net.status().code(), Status::Code::kInvalidArgument) << c.expected;
    EXPECT_NE(net.status().message().find(c.expected), std::string::npos) << net.status().message();
  }
}

}  // namespace
}  // namespace ssdtrain::sim

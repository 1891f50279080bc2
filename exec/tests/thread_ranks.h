// Ranks in one process for the replay's tests: n threads joined by an
// in-process StepSync that keeps the protocol of exec/step_sync.h (the MPI
// one is app/mpi_sync.cc, run under mpirun by the CLI tests).
#pragma once

#include <barrier>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "exec/step_sync.h"

namespace ssdtrain::exec::testing {

// n threads' StepSync: Agree meets at a barrier of all, AllReduceSum at one
// of the rank's stage (groups of dp consecutive ranks), as MPI's collectives
// would; a rank that skipped one would leave the others waiting (the test
// would hang, not pass). Pipeline messages go through a queue per pair of
// ranks (sends complete at once, as MPI's eager ones); an abort wakes every
// blocked Receive.
class ThreadRanks {
 public:
  explicit ThreadRanks(int n, int dp = 0)
      : n_(n),
        dp_(dp == 0 ? n : dp),
        barrier_(n),
        statuses_(static_cast<size_t>(n)),
        buffers_(static_cast<size_t>(n)),
        queues_(static_cast<size_t>(n * n)),
        aborts_(static_cast<size_t>(n)) {
    for (int g = 0; g < n / dp_; ++g) groups_.push_back(std::make_unique<std::barrier<>>(dp_));
  }

  class Rank final : public StepSync {
   public:
    Rank(ThreadRanks& all, int rank) : all_(all), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return all_.n_; }
    Status Agree(const Status& local) override {
      all_.statuses_[static_cast<size_t>(rank_)] = local;
      all_.barrier_.arrive_and_wait();
      Status out = Status::Ok();
      for (int r = 0; r < all_.n_; ++r) {
        const Status& st = all_.statuses_[static_cast<size_t>(r)];
        if (st.ok()) continue;
        out = local.ok()
                  ? Status::Unavailable("rank " + std::to_string(r) + " failed: " + st.message())
                  : local;
        break;
      }
      all_.barrier_.arrive_and_wait();  // nobody overwrites a status still being read
      ++agreements;
      return out;
    }
    Status AllReduceSum(void* host, int64_t count, traces::DType dtype) override {
      if (dtype != traces::DType::kFp32) return Status::Unavailable("test ranks sum fp32 only");
      const int first = rank_ / all_.dp_ * all_.dp_;
      std::barrier<>& group = *all_.groups_[static_cast<size_t>(rank_ / all_.dp_)];
      all_.buffers_[static_cast<size_t>(rank_)] = static_cast<float*>(host);
      group.arrive_and_wait();
      if (rank_ == first) {
        float* sum = all_.buffers_[static_cast<size_t>(first)];
        for (int r = first + 1; r < first + all_.dp_; ++r) {
          for (int64_t i = 0; i < count; ++i) sum[i] += all_.buffers_[static_cast<size_t>(r)][i];
        }
        for (int r = first + 1; r < first + all_.dp_; ++r) {
          std::memcpy(all_.buffers_[static_cast<size_t>(r)], sum, static_cast<size_t>(count) * 4);
        }
      }
      group.arrive_and_wait();
      ++allreduces;
      return Status::Ok();
    }
    // Sums at once, at the stage's barrier: every rank posts the same buckets
    // in the same order, so they meet there as MPI's nonblocking ones would.
    // The routed experts' groups are not formed here (the MPI ranks' tests
    // run them).
    Status AllReduceSumAsync(void* host, int64_t count, traces::DType dtype,
                             SumGroup group) override {
      if (group != SumGroup::kDenseGradients) {
        return Status::FailedPrecondition("test ranks form no expert-data-parallel groups");
      }
      ++posted_;
      return AllReduceSum(host, count, dtype);
    }
    int SumGroupSize(SumGroup) const override { return all_.dp_; }
    Status ProgressAllReduces(int64_t* completed) override {
      *completed = posted_;
      return Status::Ok();
    }
    Status WaitAllReduces() override {
      posted_ = 0;
      return Status::Ok();
    }
    Status SendAsync(int to, const PipelineTag& tag, const void* host, int64_t bytes) override {
      Message m{tag, std::vector<uint8_t>(static_cast<const uint8_t*>(host),
                                          static_cast<const uint8_t*>(host) + bytes)};
      if (flip_byte_of_send == sends++) m.bytes[0] ^= 1;
      {
        std::lock_guard lock(all_.mu_);
        all_.queues_[static_cast<size_t>(rank_ * all_.n_ + to)].push_back(std::move(m));
      }
      all_.cv_.notify_all();
      return Status::Ok();
    }
    Status Receive(int from, void* host, int64_t capacity, PipelineTag* tag,
                   int64_t* bytes) override {
      std::unique_lock lock(all_.mu_);
      std::deque<Message>& q = all_.queues_[static_cast<size_t>(from * all_.n_ + rank_)];
      while (true) {
        for (int r = 0; r < all_.n_; ++r) {
          const auto& a = all_.aborts_[static_cast<size_t>(r)];
          if (r != rank_ && a)
            return Status::Unavailable("rank " + std::to_string(r) + " failed: " + *a);
        }
        if (!q.empty()) break;
        all_.cv_.wait(lock);
      }
      Message m = std::move(q.front());
      q.pop_front();
      if (static_cast<int64_t>(m.bytes.size()) > capacity) return Status::Internal("too large");
      std::memcpy(host, m.bytes.data(), m.bytes.size());
      *tag = m.tag;
      *bytes = static_cast<int64_t>(m.bytes.size());
      ++receives;
      lock.unlock();
      if (on_receive) on_receive();
      return Status::Ok();
    }
    Status WaitSends() override { return Status::Ok(); }
    void Abort(const Status& status) override {
      {
        std::lock_guard lock(all_.mu_);
        auto& a = all_.aborts_[static_cast<size_t>(rank_)];
        if (!a) a = status.message();
      }
      all_.cv_.notify_all();
      ++aborts;
    }
    int agreements = 0, allreduces = 0, sends = 0, receives = 0, aborts = 0;
    int flip_byte_of_send = -1;  // the send (0 = the first) whose first byte flips on the way
    // Called on this rank's thread after each message it received; set before the ranks start.
    std::function<void()> on_receive;

   private:
    ThreadRanks& all_;
    int rank_;
    int64_t posted_ = 0;  // since the last WaitAllReduces
  };

 private:
  struct Message {
    PipelineTag tag;
    std::vector<uint8_t> bytes;
  };
  int n_, dp_;
  std::barrier<> barrier_;
  std::vector<std::unique_ptr<std::barrier<>>> groups_;  // one per stage
  std::vector<Status> statuses_;
  std::vector<float*> buffers_;
  std::mutex mu_;  // guards queues_ and aborts_
  std::condition_variable cv_;
  std::vector<std::deque<Message>> queues_;         // [from * n + to]
  std::vector<std::optional<std::string>> aborts_;  // by rank: its abort's message
};

}  // namespace ssdtrain::exec::testing

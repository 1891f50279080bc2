#include "app/interconnect_calibration.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace ssdtrain::app {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One-way times (round trip / 2) of `bytes` between ranks 0 and 1; rank 1
// answers each message with one of the same size. `*counter` numbers the
// messages (their tags) across calls. Ranks 0 and 1 only.
Result<std::vector<double>> PingPong(RankSync& ranks, int64_t bytes, int runs, int64_t* counter) {
  std::vector<char> buffer(static_cast<size_t>(bytes), 1);
  std::vector<double> oneway;
  const int peer = 1 - ranks.rank();
  for (int i = 0; i < runs; ++i) {
    const exec::PipelineTag tag{(*counter)++, false, 0};
    exec::PipelineTag got;
    int64_t got_bytes = 0;
    const int64_t t0 = NowNs();
    if (ranks.rank() == 0) {
      SSDTRAIN_RETURN_IF_ERROR(ranks.SendAsync(peer, tag, buffer.data(), bytes));
      SSDTRAIN_RETURN_IF_ERROR(ranks.Receive(peer, buffer.data(), bytes, &got, &got_bytes));
    } else {
      SSDTRAIN_RETURN_IF_ERROR(ranks.Receive(peer, buffer.data(), bytes, &got, &got_bytes));
      SSDTRAIN_RETURN_IF_ERROR(ranks.SendAsync(peer, tag, buffer.data(), bytes));
    }
    oneway.push_back(static_cast<double>(NowNs() - t0) / 2.0);
    if (got != tag || got_bytes != bytes) {
      return Status::Internal("interconnect ping-pong: received " + got.Describe() + " of " +
                              std::to_string(got_bytes) + " bytes, expected " + tag.Describe() +
                              " of " + std::to_string(bytes));
    }
  }
  return oneway;
}

}  // namespace

InterconnectFigures SolveInterconnect(int ranks, int64_t bytes, double small_oneway_ns,
                                      double large_oneway_ns, double allreduce_ns) {
  InterconnectFigures f;
  f.ranks = ranks;
  f.latency_us = small_oneway_ns / 1e3;
  const double s = static_cast<double>(bytes);
  // bytes per ns are GB/s.
  const double send_ns = large_oneway_ns - small_oneway_ns;
  f.pp_GBps = s / (send_ns > 0 ? send_ns : large_oneway_ns);
  const double n = ranks;
  const double ring_ns = allreduce_ns - 2.0 * (n - 1.0) * small_oneway_ns;
  f.dp_GBps = 2.0 * (n - 1.0) / n * s / (ring_ns > 0 ? ring_ns : allreduce_ns);
  return f;
}

Result<InterconnectFigures> MeasureInterconnect(RankSync& ranks, const InterconnectMeasurement& m) {
  constexpr int64_t kSmallBytes = 8;
  const int runs = m.repeats + 1;  // the first is untimed (connections, first touches)
  auto timed = [&](std::vector<double> v) {
    v.erase(v.begin());
    return Median(std::move(v));
  };
  // This rank's own failure (or a peer's learnt in a wait): tell the others,
  // then the one agreement after it.
  auto failed = [&](const Status& st) {
    ranks.Abort(st);
    return ranks.Agree(st);
  };
  double small = 0, large = 0;
  if (ranks.rank() <= 1) {
    int64_t counter = 0;
    Result<std::vector<double>> s = PingPong(ranks, kSmallBytes, runs, &counter);
    Result<std::vector<double>> l =
        s.ok() ? PingPong(ranks, m.bytes, runs, &counter) : Result<std::vector<double>>(s.status());
    const Status st = l.ok() ? ranks.WaitSends() : l.status();
    if (!st.ok()) return failed(st);
    small = timed(*s);
    large = timed(*l);
  }
  // The all-reduce over all ranks, each run started together, through the
  // calls a replay's gradient buckets make (posted, then waited for). A
  // failure learnt in one of these agreements is this rank's agreement after it.
  std::vector<float> values(static_cast<size_t>(m.bytes) / sizeof(float), 1.0f);
  std::vector<double> allreduce;
  for (int i = 0; i < runs; ++i) {
    SSDTRAIN_RETURN_IF_ERROR(ranks.Agree(Status::Ok()));
    const int64_t t0 = NowNs();
    Status st = ranks.AllReduceSumAsync(values.data(), static_cast<int64_t>(values.size()),
                                        traces::DType::kFp32, exec::SumGroup::kDenseGradients);
    if (st.ok()) st = ranks.WaitAllReduces();
    if (!st.ok()) return failed(st);
    allreduce.push_back(static_cast<double>(NowNs() - t0));
  }
  SSDTRAIN_RETURN_IF_ERROR(ranks.Agree(Status::Ok()));
  if (ranks.rank() != 0) return InterconnectFigures{};
  return SolveInterconnect(ranks.size(), m.bytes, small, large, timed(allreduce));
}

}  // namespace ssdtrain::app

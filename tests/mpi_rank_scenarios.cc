// One scenario of tests/mpi_ranks_test.cc on every rank of
// `mpirun -np 2 mpi_rank_scenarios SCENARIO DIR`, over the MPI StepSync the
// CLI uses (app/mpi_sync.cc). Each rank prints one line, "rank R: ok" or
// "rank R: error: <message>", and exits 0 or 1. Faults come from the
// executor's test points (exec/detail/test_points.h), installed on rank 1.
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "app/mpi_sync.h"
#include "exec/detail/test_points.h"
#include "exec/replay.h"
#include "exec/tests/replay_test_util.h"
#include "traces/uniform_plans.h"

namespace ssdtrain {
namespace {

using exec::detail::TestPoint;

int FailGradientCopyBack(TestPoint point, int64_t) {
  return point == TestPoint::kGradientCopyBack ? 1 : 0;
}
// The last step of a replay of --steps 1 (step 0 is the warm-up).
int FailLastStepsByteCheck(TestPoint point, int64_t step) {
  return point == TestPoint::kStepBytesChecked && step == 1 ? 1 : 0;
}

// Every rank replays tiny GPT (micro-batch 1, sequence 128, every saved
// activation to the SSD) as one data-parallel replica, in its own folder of
// `dir`, with `hook` installed on rank 1; then the ranks gather their reports
// at rank 0, as `ssdtrain replay` does after a replay that succeeded.
Status ReplayAndGather(app::RankSync& ranks, const std::string& dir, exec::detail::TestHook hook) {
  SSDTRAIN_RETURN_IF_ERROR(ranks.SplitStages(ranks.size()));
  const traces::Trace trace = exec::testing::TinyGptTrace(1, 128);
  traces::Plan plan = traces::OffloadAllPlan(trace);
  plan.dp = ranks.size();
  const std::string mine = dir + "/rank-" + std::to_string(ranks.rank());
  std::filesystem::create_directories(mine);
  exec::ReplayOptions o = exec::testing::CpuOptions(mine);
  o.sync = &ranks;
  o.cpu_pin_threads = false;  // the ranks share one machine
  if (ranks.rank() == 1) exec::detail::SetTestHook(hook);
  Result<exec::ReplayResult> result = exec::Replay(trace, plan, o, "offload-all");
  exec::detail::SetTestHook(nullptr);
  SSDTRAIN_RETURN_IF_ERROR(result.status());
  return ranks.GatherAtRankZero("rank " + std::to_string(ranks.rank())).status();
}

Status GradientCopyBackFails(app::RankSync& ranks, const std::string& dir) {
  return ReplayAndGather(ranks, dir, FailGradientCopyBack);
}

Status LastStepsByteCheckFails(app::RankSync& ranks, const std::string& dir) {
  return ReplayAndGather(ranks, dir, FailLastStepsByteCheck);
}

using Scenario = Status (*)(app::RankSync& ranks, const std::string& dir);

const std::map<std::string, Scenario>& Scenarios() {
  static const std::map<std::string, Scenario> scenarios = {
      {"gradient-copy-back-fails", GradientCopyBackFails},
      {"last-steps-byte-check-fails", LastStepsByteCheckFails},
  };
  return scenarios;
}

int Main(int argc, char** argv) {
  const auto it = argc == 3 ? Scenarios().find(argv[1]) : Scenarios().end();
  if (it == Scenarios().end()) {
    std::fprintf(stderr, "usage: mpirun -np 2 mpi_rank_scenarios SCENARIO DIR\n");
    return 2;
  }
  auto ranks = app::StartRanks();
  if (!ranks.ok()) {
    std::printf("rank ?: error: %s\n", ranks.status().message().c_str());
    return 1;
  }
  const Status st = it->second(**ranks, argv[2]);
  if (st.ok()) {
    std::printf("rank %d: ok\n", (*ranks)->rank());
  } else {
    std::printf("rank %d: error: %s\n", (*ranks)->rank(), st.message().c_str());
  }
  std::fflush(stdout);
  return st.ok() ? 0 : 1;
}

}  // namespace
}  // namespace ssdtrain

int main(int argc, char** argv) { return ssdtrain::Main(argc, argv); }

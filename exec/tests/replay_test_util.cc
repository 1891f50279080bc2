#include "exec/tests/replay_test_util.h"

#include <memory>
#include <set>
#include <stdexcept>
#include <thread>

#include "cmake/build_paths.h"
#include "exec/fault_backend.h"
#include "exec/tests/thread_ranks.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "traces/uniform_plans.h"

namespace ssdtrain::exec::testing {

namespace {

// The config at `path` with `o` applied, stage `stage`'s trace; throws on error.
traces::Trace Build(const std::string& path, const models::ConfigOverrides& o, int64_t stage) {
  auto config = models::LoadModelConfig(path);
  if (!config.ok()) throw std::runtime_error(config.status().ToString());
  auto applied = models::ApplyOverrides(*config, o, path);
  if (!applied.ok()) throw std::runtime_error(applied.status().ToString());
  auto trace = models::BuildTrace(*applied, stage);
  if (!trace.ok()) throw std::runtime_error(trace.status().ToString());
  return std::move(*trace);
}

}  // namespace

traces::Trace TinyGptTrace(int64_t micro_batch, int64_t seq_len, int64_t pp, int64_t stage,
                           int64_t tp, bool sequence_parallel) {
  const std::string path = std::string(ConfiguredSourceDir()) + "/configs/models/tiny-gpt.json";
  models::ConfigOverrides o;
  if (micro_batch > 0) o.micro_batch = micro_batch;
  if (seq_len > 0) o.seq_len = seq_len;
  if (pp > 1) o.pp = pp;
  if (tp > 1) o.tp = tp;
  if (sequence_parallel) o.sequence_parallel = true;
  return Build(path, o, stage);
}

traces::Trace TinyGptTraceWith(const models::ConfigOverrides& overrides, int64_t stage) {
  return Build(std::string(ConfiguredSourceDir()) + "/configs/models/tiny-gpt.json", overrides,
               stage);
}

traces::Trace TinyMoeTrace(int64_t micro_batch, int64_t seq_len, int64_t ep) {
  models::ConfigOverrides o;
  o.micro_batch = micro_batch;
  o.seq_len = seq_len;
  o.dp = ep;
  o.ep = ep;
  return Build(std::string(ConfiguredSourceDir()) + "/configs/models/tiny-moe.json", o, 0);
}

ReplayOptions CpuOptions(const std::string& dir) {
  ReplayOptions o;
  o.dirs = {dir};
  o.backend = BackendChoice::kCpu;
  o.steps = 1;
  o.device_memory_bytes = int64_t{1} << 30;
  o.staging_bytes = int64_t{64} << 20;
  return o;
}

std::vector<Result<ReplayResult>> ReplayOnThreadRanks(const traces::Trace& trace,
                                                      const traces::Plan& plan, int dp,
                                                      const std::vector<std::string>& dirs,
                                                      int failing_rank) {
  const int n = static_cast<int>(dirs.size());
  ThreadRanks all(n, dp);
  std::vector<std::unique_ptr<ThreadRanks::Rank>> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(std::make_unique<ThreadRanks::Rank>(all, r));
  std::vector<Result<ReplayResult>> results(static_cast<size_t>(n), Status::Internal("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      ReplayOptions o = CpuOptions(dirs[static_cast<size_t>(r)]);
      o.sync = ranks[static_cast<size_t>(r)].get();
      o.verify = true;
      o.cpu_pin_threads = false;  // the ranks share one machine
      if (r == failing_rank) {
        o.make_io_backend = []() -> std::unique_ptr<IoBackend> {
          FaultOptions f;
          f.rules.push_back({IoOp::kWrite, 0, FaultKind::kEio, 1});
          auto inner = MakeIoBackend(BackendKind::kPosix, 32, nullptr);
          return std::make_unique<FaultBackend>(std::move(*inner), f);
        };
      }
      results[static_cast<size_t>(r)] = Replay(trace, plan, o, "offload-all");
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

traces::Plan HostPlan(const traces::Trace& trace, bool every_other) {
  traces::Plan plan = traces::OffloadAllPlan(trace);
  plan.policy = every_other ? "offload-mixed" : "offload-host";
  for (size_t i = 0; i < plan.placements.size(); ++i) {
    if (every_other && i % 2 == 1) continue;
    plan.placements[i].action = traces::TensorAction::kOffloadHost;
    plan.placements[i].file.clear();
  }
  return plan;
}

int64_t OffloadedStorageBytes(const traces::Trace& trace, const traces::Plan& plan) {
  std::set<traces::TensorId> storages;
  int64_t bytes = 0;
  for (const traces::Placement& p : plan.placements) {
    if (p.action != traces::TensorAction::kOffloadSsd &&
        p.action != traces::TensorAction::kOffloadHost) {
      continue;
    }
    const traces::TensorId s = trace.StorageOf(p.tensor);
    if (storages.insert(s).second) bytes += trace.tensor(s).bytes;
  }
  return bytes;
}

}  // namespace ssdtrain::exec::testing

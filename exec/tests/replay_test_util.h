// Shared by the replay tests: the tiny GPT's trace and replay options for a
// temporary offload directory.
#pragma once

#include <string>
#include <vector>

#include "exec/replay.h"
#include "models/model_config.h"
#include "traces/plan.h"
#include "traces/trace.h"

namespace ssdtrain::exec::testing {

// configs/models/tiny-gpt.json (h=256, 4 layers, s=256, b=4, fp32), with
// `micro_batch` and `seq_len` overrides when positive (smaller = faster tests);
// with pp > 1, stage `stage`'s trace.
traces::Trace TinyGptTrace(int64_t micro_batch = 0, int64_t seq_len = 0, int64_t pp = 1,
                           int64_t stage = 0, int64_t tp = 1, bool sequence_parallel = false);

// configs/models/tiny-gpt.json with `overrides` (a layout's cp, dp, ZeRO
// stage; attention), stage `stage`'s trace.
traces::Trace TinyGptTraceWith(const models::ConfigOverrides& overrides, int64_t stage = 0);

// configs/models/tiny-moe.json (8 experts, top-2) at micro-batch `micro_batch`
// and sequence `seq_len`, one rank's trace at dp = ep = `ep` (E/ep experts).
traces::Trace TinyMoeTrace(int64_t micro_batch, int64_t seq_len, int64_t ep);

// CPU backend, one measured step after the warm-up, files under `dir`.
ReplayOptions CpuOptions(const std::string& dir);

// Replays `plan` of `trace` verified on dirs.size() thread ranks
// (exec/tests/thread_ranks.h, data-parallel groups of `dp`), rank r in
// dirs[r], rank `failing_rank`'s first offload write failing with EIO (-1:
// none); each rank's result.
std::vector<Result<ReplayResult>> ReplayOnThreadRanks(const traces::Trace& trace,
                                                      const traces::Plan& plan, int dp,
                                                      const std::vector<std::string>& dirs,
                                                      int failing_rank = -1);

// traces::OffloadAllPlan with every placement (or, with `every_other`, every
// other one) sent to host memory instead of the SSD.
traces::Plan HostPlan(const traces::Trace& trace, bool every_other);

// Unique bytes of the storages a plan offloads, to the SSD or to host memory
// (what one step must copy out, counting a tensor and its views once).
int64_t OffloadedStorageBytes(const traces::Trace& trace, const traces::Plan& plan);

}  // namespace ssdtrain::exec::testing

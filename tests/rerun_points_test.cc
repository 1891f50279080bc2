// A checkpointed region's re-run (traces/storage_plan.h, "Recompute"): a
// recompute placement's prefetch_before is where backward rebuilds it, and
// recompute-full sets it for a whole block at the block's first backward read
// of a recomputed tensor (sim::SetRerunPoints), as Megatron's
// CheckpointFunction re-runs the layer's forward before its backward. The
// rule's checks, the order of the rebuilds, the simulator and the executor
// (CPU backend, verified) running it alike to the byte, each op once (also
// one whose outputs the re-run reads apart), and what it costs against
// rebuilding each tensor at its own first use.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "exec/replay.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "sim/policy.h"
#include "sim/simulate.h"
#include "tests/fast_io_cpu.h"
#include "tests/micro_gpt.h"
#include "tests/micro_trace.h"
#include "tests/recompute_runs.h"
#include "tests/verified_replay.h"
#include "traces/storage_plan.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;

traces::Trace MicroGpt() { return testing::BuildMicroTrace(testing::MicroGptConfig()); }

traces::Plan RecomputeFull(const traces::Trace& t) {
  auto plan = sim::MakeFixedPlan("recompute-full", t, testing::FastIoCpu(), sim::BasePlan(t));
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  return plan.ok() ? *plan : traces::Plan{};
}

// The same plan with every tensor rebuilt at its own first backward use.
traces::Plan Lazy(traces::Plan plan) {
  for (traces::Placement& p : plan.placements) p.prefetch_before = traces::kNoOp;
  return plan;
}

// Each block's recompute placements share one point: the block's first
// backward op that reads one of them; rebuild_at lists them there in their
// producers' order.
TEST(RerunPoints, RecomputeFullRebuildsEachBlockAtItsFirstBackwardRead) {
  const traces::Trace t = MicroGpt();
  const traces::Plan plan = RecomputeFull(t);
  std::map<int, traces::OpId> point;  // layer -> rebuild op
  std::map<int, std::vector<traces::TensorId>> placed;
  for (const traces::Placement& p : plan.placements) {
    if (p.action != traces::TensorAction::kRecompute) continue;
    const int layer = t.tensor(p.tensor).layer;
    ASSERT_NE(p.prefetch_before, traces::kNoOp) << t.tensor(p.tensor).name;
    const auto [it, first] = point.emplace(layer, p.prefetch_before);
    EXPECT_EQ(it->second, p.prefetch_before) << t.tensor(p.tensor).name;
    placed[layer].push_back(t.StorageOf(p.tensor));
  }
  ASSERT_EQ(point.size(), 2u);  // both blocks
  for (const auto& [layer, at] : point) {
    // No backward op before it reads a recomputed tensor of the block.
    for (const traces::Op& op : t.ops) {
      if (op.id >= at || op.phase != traces::Phase::kBackward) continue;
      for (traces::TensorId in : op.inputs) {
        const auto& mine = placed[layer];
        EXPECT_EQ(std::count(mine.begin(), mine.end(), t.StorageOf(in)), 0)
            << op.name << " reads " << t.tensor(in).name << " before the re-run";
      }
    }
    EXPECT_EQ(t.op(at).layer, layer);
  }
  auto sp = traces::ResolvePlan(t, plan, "plan");
  ASSERT_TRUE(sp.ok()) << sp.status().message();
  for (const auto& [layer, at] : point) {
    std::vector<traces::OpId> producers;
    for (int i : sp->rebuild_at[static_cast<size_t>(at)]) {
      producers.push_back(sp->storages[static_cast<size_t>(i)].producer);
    }
    EXPECT_EQ(producers.size(), placed[layer].size());
    EXPECT_TRUE(std::is_sorted(producers.begin(), producers.end()));
  }
}

// The rule's checks name the placement: a forward op, or an op after the
// tensor's first backward use, is refused.
TEST(RerunPoints, APointOutsideTheBackwardBeforeTheFirstUseIsRefused) {
  const traces::Trace t = MicroGpt();
  traces::Plan plan = RecomputeFull(t);
  ASSERT_FALSE(plan.placements.empty());
  size_t k = 0;
  while (plan.placements[k].action != traces::TensorAction::kRecompute) ++k;
  auto sp = traces::ResolvePlan(t, Lazy(plan), "plan");
  ASSERT_TRUE(sp.ok());
  const traces::StorageInfo& s = sp->of(plan.placements[k].tensor);
  const std::string at = "plan: placements[" + std::to_string(k) + "].prefetch_before: op ";

  traces::Plan forward = plan;
  forward.placements[k].prefetch_before = s.producer;
  auto refused = traces::ResolvePlan(t, forward, "plan");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            at + std::to_string(s.producer) +
                " is not a backward op; a recomputed tensor's prefetch_before is where backward "
                "rebuilds it");

  traces::Plan late = plan;
  late.placements[k].prefetch_before = s.first_backward_use + 1;
  refused = traces::ResolvePlan(t, late, "plan");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            at + std::to_string(s.first_backward_use + 1) + " must come after tensor " +
                std::to_string(plan.placements[k].tensor) + "'s last forward use (op " +
                std::to_string(s.last_forward_use) +
                ") and at or before its first backward use (op " +
                std::to_string(s.first_backward_use) + ")");
}

using RerunReplay = testing::VerifiedReplayTest;

// The simulator and the executor run the re-run alike: each block's recompute
// ops once, all before the op that starts the re-run, the peaks equal to the
// byte; against rebuilding each tensor at its first use the same recompute
// ops and more memory (the MLP's and the attention's recomputed tensors at
// once), which the static peaks count too.
TEST_F(RerunReplay, SimulationAndReplayRunTheRegionToTheByte) {
  const traces::Trace t = MicroGpt();
  const traces::Plan plan = RecomputeFull(t);
  const sim::HardwareOptions hw = testing::FastIoCpu();
  sim::SimulateOptions so;
  so.record_timeline = true;
  auto predicted = sim::Simulate(t, plan, hw, so);
  ASSERT_TRUE(predicted.ok()) << predicted.status().message();
  auto run = exec::Replay(t, plan, Verified(), "recompute-full");
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_TRUE(run->verified);
  const std::map<std::string, int> simulated = testing::SimulatedRecomputes(predicted->timeline);
  EXPECT_EQ(simulated, testing::ReplayedRecomputes(run->timeline));
  EXPECT_GE(simulated.size(), 2u);
  for (const auto& [op, runs] : simulated) EXPECT_EQ(runs, 1) << op;
  EXPECT_EQ(run->metrics.peak_activation_bytes, predicted->metrics.peak_activation_bytes);
  EXPECT_EQ(run->metrics.peak_gpu_bytes, predicted->metrics.peak_gpu_bytes);

  // Every recompute of block 1 ends before its re-run op starts.
  traces::OpId at = traces::kNoOp;
  for (const traces::Placement& p : plan.placements) {
    if (p.action == traces::TensorAction::kRecompute && t.tensor(p.tensor).layer == 1) {
      at = p.prefetch_before;
    }
  }
  ASSERT_NE(at, traces::kNoOp);
  int64_t at_start = -1, last_recompute_end = -1;
  for (const traces::Span& span : predicted->timeline.spans) {
    if (span.name == t.op(at).name) at_start = span.start_ns;
    if (span.name.starts_with("recompute:L1.")) {
      last_recompute_end = std::max(last_recompute_end, span.end_ns);
    }
  }
  ASSERT_GE(at_start, 0);
  ASSERT_GE(last_recompute_end, 0);
  EXPECT_LE(last_recompute_end, at_start);

  auto lazy = sim::Simulate(t, Lazy(plan), hw, so);
  ASSERT_TRUE(lazy.ok()) << lazy.status().message();
  EXPECT_EQ(testing::SimulatedRecomputes(lazy->timeline), simulated);
  EXPECT_GT(predicted->metrics.peak_activation_bytes, lazy->metrics.peak_activation_bytes);
  auto region_sp = traces::ResolvePlan(t, plan, "plan");
  auto lazy_sp = traces::ResolvePlan(t, Lazy(plan), "plan");
  ASSERT_TRUE(region_sp.ok() && lazy_sp.ok());
  EXPECT_GT(traces::ComputeStaticPeaks(t, *region_sp).activation_bytes,
            traces::ComputeStaticPeaks(t, *lazy_sp).activation_bytes);
  EXPECT_TRUE(fs::is_empty(dir_)) << "offload files left behind";
}

// An op with two outputs the re-run reads at different points runs once:
// FP8's quantize (the FP8 copy the forward GEMM reads, the transposed one
// saved for the weight gradient) and a parallel block's attention
// dropout-add (its output the MLP's residual reads, its mask saved). The
// run keeps the output a later op of the re-run reads (StoragePlan::
// rerun_keep) where it once went to scratch and the producer ran again; the
// simulator and the executor alike, to the byte.
TEST_F(RerunReplay, AnOpWhoseOutputsTheReRunReadsApartRunsOnce) {
  nlohmann::json fp8 = testing::MicroGptConfig();
  fp8["name"] = "micro-fp8";
  fp8["family"] = "llama";
  fp8["hidden"] = 256;
  fp8["heads"] = 4;
  fp8["seq_len"] = 128;
  fp8["attention"] = "flash";
  fp8["dtype"] = "bf16";
  fp8["fp8"] = "delayed";
  nlohmann::json parallel = testing::MicroGptConfig();
  parallel["name"] = "micro-parallel";
  parallel["family"] = "phi";
  parallel["parallel_block"] = true;
  parallel["hidden"] = 256;  // its dropout masks large enough to be recomputed
  parallel["heads"] = 4;
  parallel["seq_len"] = 256;
  for (const nlohmann::json& config : {fp8, parallel}) {
    SCOPED_TRACE(config.at("name").get<std::string>());
    const traces::Trace t = testing::BuildMicroTrace(config);
    const traces::Plan plan = RecomputeFull(t);
    auto sp = traces::ResolvePlan(t, plan, "plan");
    ASSERT_TRUE(sp.ok()) << sp.status().message();
    size_t keeps = 0;
    for (size_t op = 0; op < t.ops.size(); ++op) keeps += sp->rerun_keep[op].size();
    EXPECT_GT(keeps, 0u);
    const sim::HardwareOptions hw = testing::FastIoCpu();
    sim::SimulateOptions so;
    so.record_timeline = true;
    auto predicted = sim::Simulate(t, plan, hw, so);
    ASSERT_TRUE(predicted.ok()) << predicted.status().message();
    auto run = exec::Replay(t, plan, Verified(), "recompute-full");
    ASSERT_TRUE(run.ok()) << run.status().message();
    EXPECT_TRUE(run->verified);
    const std::map<std::string, int> simulated = testing::SimulatedRecomputes(predicted->timeline);
    EXPECT_EQ(simulated, testing::ReplayedRecomputes(run->timeline));
    for (const auto& [op, runs] : simulated) EXPECT_EQ(runs, 1) << op;
    const char* twice =
        config.at("name") == "micro-fp8" ? "L1.qkv.in.quantize" : "L1.attn_out.dropout_add";
    EXPECT_EQ(simulated.count(twice), 1u) << twice;
    EXPECT_EQ(run->metrics.peak_activation_bytes, predicted->metrics.peak_activation_bytes);
    EXPECT_EQ(run->metrics.peak_gpu_bytes, predicted->metrics.peak_gpu_bytes);
  }
  EXPECT_TRUE(fs::is_empty(dir_)) << "offload files left behind";
}

// A row-parallel layer without sequence parallelism all-reduces its GEMM's
// output in place (its output a view of the GEMM's: traces::StorageInfo::
// writers). A re-run that rebuilds that output runs the all-reduce after the
// GEMM, once, as Megatron's checkpointed layer runs its forward again;
// before, it ran the GEMM alone (the all-reduce's time left out of a full
// recompute at tp > 1). The simulator and the executor alike, to the byte.
TEST_F(RerunReplay, AnInPlaceAllReduceRunsAgainAfterItsGemm) {
  nlohmann::json config = testing::MicroGptConfig();
  config["name"] = "micro-tp2";
  config["tp"] = 2;
  config["hidden"] = 256;  // its block's activations large enough to be recomputed
  config["heads"] = 4;
  config["seq_len"] = 128;
  const traces::Trace t = testing::BuildMicroTrace(config);
  const traces::Plan plan = RecomputeFull(t);
  auto sp = traces::ResolvePlan(t, plan, "plan");
  ASSERT_TRUE(sp.ok()) << sp.status().message();
  int writers = 0;
  for (const char* layer : {"L0", "L1"}) {
    for (const char* linear : {"proj", "fc2"}) {
      const std::string name = std::string(layer) + "." + linear;
      const auto gemm = std::find_if(t.ops.begin(), t.ops.end(),
                                     [&](const traces::Op& op) { return op.name == name; });
      ASSERT_NE(gemm, t.ops.end()) << name;
      const traces::StorageInfo& out = sp->of(gemm->outputs.at(0));
      ASSERT_EQ(out.writers.size(), 1u) << name;
      EXPECT_EQ(t.op(out.writers[0]).name, name + ".out_reduced.all_reduce");
      ++writers;
    }
  }
  EXPECT_EQ(writers, 4);
  const sim::HardwareOptions hw = testing::FastIoCpu();
  sim::SimulateOptions so;
  so.record_timeline = true;
  auto predicted = sim::Simulate(t, plan, hw, so);
  ASSERT_TRUE(predicted.ok()) << predicted.status().message();
  const std::map<std::string, int> simulated = testing::SimulatedRecomputes(predicted->timeline);
  for (const auto& [op, runs] : simulated) EXPECT_EQ(runs, 1) << op;
  for (const char* layer : {"L0", "L1"}) {
    for (const char* linear : {"proj", "fc2"}) {
      const std::string name = std::string(layer) + "." + linear;
      EXPECT_EQ(simulated.count(name + ".out_reduced.all_reduce"), 1u) << name;
    }
  }
  // Each all-reduce's re-run starts once its GEMM's has ended.
  std::map<std::string, int64_t> end_of, start_of;
  for (const traces::Span& span : predicted->timeline.spans) {
    if (!span.name.starts_with("recompute:")) continue;
    end_of[span.name.substr(10)] = span.end_ns;
    start_of[span.name.substr(10)] = span.start_ns;
  }
  EXPECT_GE(start_of.at("L1.fc2.out_reduced.all_reduce"), end_of.at("L1.fc2"));
  auto run = exec::Replay(t, plan, Verified(), "recompute-full");
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_TRUE(run->verified);
  EXPECT_EQ(simulated, testing::ReplayedRecomputes(run->timeline));
  EXPECT_EQ(run->metrics.peak_activation_bytes, predicted->metrics.peak_activation_bytes);
  EXPECT_EQ(run->metrics.peak_gpu_bytes, predicted->metrics.peak_gpu_bytes);
  EXPECT_TRUE(fs::is_empty(dir_)) << "offload files left behind";
}

// Saved activations rebuilt where backward first needs them, nothing held
// (optimal's lazy recomputes), under ZeRO-3: a re-run reaches back into the
// blocks before, whose forward weight gathers (cast, all-gather, copy-out:
// each op several weights) their backward has not gathered again yet, and
// re-runs at later ops need more of the same ops' outputs. Twenty plans, each
// recomputing a random half of the saved activations: each op runs at most
// once, as a re-run keeps every output a later re-run op reads, of its own
// re-run or of one at a later op (StoragePlan::rerun_keep,
// StorageInfo::rerun_until); before, each of these plans ran some op 2 to 30
// times (each sibling output went to scratch and its producer ran again for
// it). The simulator and the executor alike, to the byte.
TEST_F(RerunReplay, LazyReRunsRunEachOpOnce) {
  nlohmann::json config = testing::MicroGptConfig();
  config["zero_stage"] = 3;
  const traces::Trace t = testing::BuildMicroTrace(config);
  std::vector<traces::TensorId> saved;
  for (const traces::Tensor& x : t.tensors) {
    if (x.kind == traces::TensorKind::kActivation && x.saved_for_backward &&
        x.producer != traces::kNoOp && t.StorageOf(x.id) == x.id) {
      saved.push_back(x.id);
    }
  }
  ASSERT_GE(saved.size(), 20u);
  std::mt19937 random(7);
  int kept_across = 0;  // plans where one re-run keeps an output for a later one
  for (int k = 0; k < 20; ++k) {
    SCOPED_TRACE("plan " + std::to_string(k));
    traces::Plan plan = sim::BasePlan(t);
    plan.placements.clear();
    for (traces::TensorId id : saved) {
      if (random() % 2 == 0) continue;
      traces::Placement p;
      p.tensor = id;
      p.action = traces::TensorAction::kRecompute;
      plan.placements.push_back(p);
    }
    auto sp = traces::ResolvePlan(t, plan, "plan");
    ASSERT_TRUE(sp.ok()) << sp.status().message();
    bool across = false;
    for (size_t op = 0; op < t.ops.size(); ++op) {
      for (int i : sp->rerun_keep[op]) {
        const traces::OpId until = sp->storages[static_cast<size_t>(i)].rerun_until;
        ASSERT_GE(until, static_cast<traces::OpId>(op));
        across = across || until > static_cast<traces::OpId>(op);
      }
    }
    kept_across += across;
    const sim::HardwareOptions hw = testing::FastIoCpu();
    sim::SimulateOptions so;
    so.record_timeline = true;
    auto predicted = sim::Simulate(t, plan, hw, so);
    ASSERT_TRUE(predicted.ok()) << predicted.status().message();
    ASSERT_EQ(predicted->stage_peaks.size(), 1u);
    EXPECT_EQ(predicted->stage_peaks[0].max_op_reruns, 1);
    auto run = exec::Replay(t, plan, Verified(), "lazy");
    ASSERT_TRUE(run.ok()) << run.status().message();
    EXPECT_TRUE(run->verified);
    EXPECT_EQ(testing::SimulatedRecomputes(predicted->timeline),
              testing::ReplayedRecomputes(run->timeline));
    EXPECT_EQ(run->metrics.peak_activation_bytes, predicted->metrics.peak_activation_bytes);
    EXPECT_EQ(run->metrics.peak_gpu_bytes, predicted->metrics.peak_gpu_bytes);
  }
  EXPECT_GE(kept_across, 10);
  EXPECT_TRUE(fs::is_empty(dir_)) << "offload files left behind";
}

}  // namespace
}  // namespace ssdtrain

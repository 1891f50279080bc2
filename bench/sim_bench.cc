// Simulator speed (issue 3): the event engine must process at least 5 million
// events per second on one core, and `ssdtrain plan` for GPT-175B on 1024 GPUs
// (every micro-batch size, pipeline depth, tensor-parallel degree and policy,
// optimal included) must finish in under 2 seconds.
//
//   build/bench/sim_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "app/model_provider.h"
#include "cmake/build_paths.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "sim/engine.h"
#include "sim/event_queue.h"
#include "sim/hardware.h"
#include "sim/planner.h"
#include "sim/policy.h"
#include "sim/simulate.h"

namespace {

using namespace ssdtrain;

// `chains` independent event chains, each rescheduling itself with a delay
// that varies per chain, so the heap holds `chains` events at all times.
template <typename Queue>
void BM_EngineEvents(benchmark::State& state) {
  const int64_t chains = state.range(0);
  constexpr int64_t kEventsPerRun = 1'000'000;
  int64_t total = 0;
  for (auto _ : state) {
    sim::Engine engine(std::make_unique<Queue>());
    int64_t remaining = kEventsPerRun;
    std::function<void(int64_t)> fire = [&](int64_t chain) {
      if (--remaining < chains) return;
      (void)engine.Schedule(sim::Time::Ns(1 + (chain * 7919) % 1000),
                            [&fire, chain] { fire(chain); });
    };
    for (int64_t c = 0; c < chains; ++c) {
      (void)engine.Schedule(sim::Time::Ns(c), [&fire, c] { fire(c); });
    }
    engine.Run();
    total += static_cast<int64_t>(engine.events_processed());
  }
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(total), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EngineEvents<sim::HeapEventQueue>)->Arg(16)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EngineEvents<sim::MapEventQueue>)->Arg(1024)->Unit(benchmark::kMillisecond);

models::ModelConfig LoadModel(const std::string& name) {
  Result<models::ModelConfig> c = models::LoadModelConfig(
      std::string(ssdtrain::ConfiguredSourceDir()) + "/configs/models/" + name + ".json");
  if (!c.ok()) throw std::runtime_error(c.status().ToString());
  return *c;
}

sim::HardwareOptions LoadHw(const std::string& name) {
  Result<sim::HardwareOptions> hw = sim::LoadHardware(std::string(ssdtrain::ConfiguredSourceDir()) +
                                                      "/configs/hardware/" + name + ".json");
  if (!hw.ok()) throw std::runtime_error(hw.status().ToString());
  return *hw;
}

// One whole-step simulation of a paper model under SSD offload (the planner's
// inner loop), with the engine's event count as a rate.
void BM_SimulatePaperGptOffload(benchmark::State& state) {
  const models::ModelConfig config = LoadModel("ssdtrain-gpt-h8192-l4");
  const sim::HardwareOptions hw = LoadHw("a100-pcie-ssdtrain-paper");
  Result<traces::Trace> trace = models::BuildTrace(config, 0);
  if (!trace.ok()) throw std::runtime_error(trace.status().ToString());
  Result<traces::Plan> plan = sim::MakeFixedPlan("ssdtrain", *trace, hw, sim::BasePlan(*trace));
  if (!plan.ok()) throw std::runtime_error(plan.status().ToString());
  sim::SimulateOptions so;
  so.record_timeline = false;
  for (auto _ : state) {
    Result<sim::Prediction> p = sim::Simulate(*trace, *plan, hw, so);
    if (!p.ok()) {
      state.SkipWithError(p.status().ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(p->metrics.step_time_ns);
  }
}
BENCHMARK(BM_SimulatePaperGptOffload)->Unit(benchmark::kMicrosecond);

// What `ssdtrain plan --model gpt-175b.json --hardware h100-sxm-8x-gen5-nvme.json
// --gpus 1024` does, tracing included (a fresh trace cache every iteration).
// The planner's search at scale: `auto` (every policy, per-stage plans) on
// `gpus` GPUs of the preset, counting layouts and simulations.
// `require_fit` false: the search is timed whether or not a plan fits (its
// answer is then "nothing fits", a counter).
void PlanSearch(benchmark::State& state, const models::ModelConfig& base,
                const sim::HardwareOptions& hw, int64_t gpus, int64_t global_batch,
                bool require_fit = true) {
  bool fits = false;
  int64_t simulations = 0, simulated_layouts = 0, layouts = 0;
  for (auto _ : state) {
    sim::TraceProvider provider = app::ModelTraceProvider(base, base.name);
    sim::PlannerOptions po;
    po.gpus = gpus;
    po.global_batch = global_batch;
    app::SetModelOptions(base, &po);
    Result<sim::PlannerResult> r = sim::SearchPlan(provider, hw, po);
    if (!r.ok() || (require_fit && !r->fits)) {
      state.SkipWithError(r.ok() ? "no plan fits" : r.status().ToString().c_str());
      return;
    }
    fits = r->fits;
    simulations = r->simulations;
    simulated_layouts = r->simulated_layouts;
    layouts = r->layouts;
    benchmark::DoNotOptimize(r->prediction.metrics.step_time_ns);
  }
  state.counters["layouts"] = static_cast<double>(layouts);
  state.counters["simulated_layouts"] = static_cast<double>(simulated_layouts);
  state.counters["simulations"] = static_cast<double>(simulations);
  state.counters["fits"] = fits ? 1 : 0;
}

void BM_PlanGpt175bOn1024Gpus(benchmark::State& state) {
  PlanSearch(state, LoadModel("gpt-175b"), LoadHw("h100-sxm-8x-gen5-nvme"), 1024, 0);
}
BENCHMARK(BM_PlanGpt175bOn1024Gpus)->Unit(benchmark::kMillisecond);

// Megatron-LM's 1T model (hidden 25600, 128 layers, 160 heads; Narayanan et al.
// SC21 Table 1) on 16384 GPUs at a global batch of 4096 sequences.
void BM_PlanGpt1tOn16384Gpus(benchmark::State& state) {
  models::ModelConfig m = LoadModel("gpt-175b");
  m.name = "gpt-1t";
  m.hidden = 25600;
  m.layers = 128;
  m.heads = 160;
  PlanSearch(state, m, LoadHw("h100-sxm-8x-gen5-nvme"), 16384, 4096);
}
BENCHMARK(BM_PlanGpt1tOn16384Gpus)->Unit(benchmark::kMillisecond);

// Llama 3.1 405B (configs/models/llama-3.1-405b.json) on 16384 H100s at its
// pre-training's global batch, 2048 sequences of 8192 tokens (16 M tokens; the
// Llama 3 paper, Table 4), every layout dimension the planner searches today
// (tp, pp, v, dp, ZeRO 0-3, micro-batch, policy). Issue 44's target: under 2 s
// on the 2-core VM, with cp searched too. With 16384 = 2^14 GPUs, pp is a
// power of two; those dividing 126 layers are 1 and 2, the others (4 to 16)
// split unevenly as traces::DefaultUnevenSplit does (since 8eb5cf5, as Meta's
// run did), and tp is at most a node's 8. `fits` says whether a plan fits.
void BM_PlanLlama405bOn16384Gpus(benchmark::State& state) {
  PlanSearch(state, LoadModel("llama-3.1-405b"), LoadHw("h100-sxm-8x-gen5-nvme"), 16384, 2048,
             /*require_fit=*/false);
}
BENCHMARK(BM_PlanLlama405bOn16384Gpus)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

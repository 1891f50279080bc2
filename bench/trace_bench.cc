// Tracing and parsing speed: GPT-175B (96 blocks) must trace, and its trace
// read back, well under a second each on one core.
//
//   build/bench/trace_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "cmake/build_paths.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "traces/io.h"

namespace {

using namespace ssdtrain;

models::ModelConfig Gpt175b() {
  Result<models::ModelConfig> c = models::LoadModelConfig(
      std::string(ssdtrain::ConfiguredSourceDir()) + "/configs/models/gpt-175b.json");
  if (!c.ok()) throw std::runtime_error(c.status().ToString());
  // The whole model in one trace: all 96 blocks (the config's pp would split them into stages).
  c->pp = 1;
  return *c;
}

void BM_TraceGpt175b(benchmark::State& state) {
  const models::ModelConfig config = Gpt175b();
  size_t ops = 0;
  for (auto _ : state) {
    Result<traces::Trace> t = models::BuildTrace(config, 0);
    if (!t.ok()) {
      state.SkipWithError(t.status().ToString().c_str());
      return;
    }
    ops = t->ops.size();
    benchmark::DoNotOptimize(t->ops.data());
  }
  state.counters["ops"] = static_cast<double>(ops);
}
BENCHMARK(BM_TraceGpt175b)->Unit(benchmark::kMillisecond);

// Reads (parses and validates) the GPT-175B trace from a file: arg 0 JSON, 1 CBOR.
void BM_ReadGpt175bTrace(benchmark::State& state) {
  const bool cbor = state.range(0) == 1;
  Result<traces::Trace> t = models::BuildTrace(Gpt175b(), 0);
  if (!t.ok()) {
    state.SkipWithError(t.status().ToString().c_str());
    return;
  }
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("ssdtrain-bench-" + std::to_string(::getpid()) + (cbor ? ".cbor" : ".json")))
          .string();
  if (Status s = traces::WriteTrace(*t, path); !s.ok()) {
    state.SkipWithError(s.ToString().c_str());
    return;
  }
  for (auto _ : state) {
    Result<traces::Trace> back = traces::ReadTrace(path);
    if (!back.ok()) {
      state.SkipWithError(back.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(back->ops.data());
  }
  state.counters["file_MB"] = static_cast<double>(std::filesystem::file_size(path)) / 1e6;
  std::filesystem::remove(path);
}
BENCHMARK(BM_ReadGpt175bTrace)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

// An outside program on an installed ssdtrain: plans and simulates the tiny
// GPT from the installed configs, then writes and reads back a tensor on the
// real disk through the offload engine.
//   consumer SCRATCH_DIR
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "exec/offload_engine.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "sim/hardware.h"
#include "sim/policy.h"
#include "sim/simulate.h"

int ssdtrain_installed_headers();  // all_headers.cc

namespace {

int Fail(const std::string& what, const ssdtrain::Status& s) {
  std::fprintf(stderr, "consumer: %s: %s\n", what.c_str(), s.message().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ssdtrain;
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer SCRATCH_DIR\n");
    return 2;
  }
  const std::string configs = SSDTRAIN_CONFIGS_DIR;
  auto config = models::LoadModelConfig(configs + "/models/tiny-gpt.json");
  if (!config.ok()) return Fail("model", config.status());
  auto trace = models::BuildTrace(*config);
  if (!trace.ok()) return Fail("trace", trace.status());
  auto hw = sim::LoadHardware(configs + "/hardware/cpu-local.json");
  if (!hw.ok()) return Fail("hardware", hw.status());
  auto plan = sim::MakeFixedPlan("offload-ssd", *trace, *hw, sim::BasePlan(*trace));
  if (!plan.ok()) return Fail("plan", plan.status());
  auto prediction = sim::Simulate(*trace, *plan, *hw);
  if (!prediction.ok()) return Fail("simulate", prediction.status());
  const traces::StepMetrics& m = prediction->metrics;
  std::printf("headers: %d\n", ssdtrain_installed_headers());
  std::printf("ops: %zu\n", trace->ops.size());
  std::printf("step_time_ns: %lld\n", static_cast<long long>(m.step_time_ns));
  std::printf("ssd_bytes_written: %lld\n", static_cast<long long>(m.ssd_bytes_written));

  exec::OffloadOptions options;
  options.dirs = {argv[1]};
  options.staging_bytes = int64_t{8} << 20;
  auto engine = exec::OffloadEngine::Create(options);
  if (!engine.ok()) return Fail("offload engine", engine.status());
  const int64_t bytes = (int64_t{3} << 20) + 1000;  // three blocks and a tail
  std::vector<char> out(static_cast<size_t>(bytes)), in(static_cast<size_t>(bytes));
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(i * 7 + (i >> 12));
  const exec::TensorKey key{.tensor = 1};
  if (auto s = (*engine)->Write(key, out.data(), bytes); !s.ok()) return Fail("write", s);
  if (auto s = (*engine)->Read(key, in.data(), bytes); !s.ok()) return Fail("read", s);
  if (std::memcmp(out.data(), in.data(), out.size()) != 0) {
    std::fprintf(stderr, "consumer: the bytes read back differ from those written\n");
    return 1;
  }
  std::printf("round trip: %lld bytes on %s\n", static_cast<long long>(bytes),
              (*engine)->BackendName().c_str());
  return 0;
}

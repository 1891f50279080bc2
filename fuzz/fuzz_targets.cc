#include "fuzz/fuzz_targets.h"

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "cmake/build_paths.h"
#include "models/build_trace.h"
#include "models/hf_config.h"
#include "models/model_config.h"
#include "sim/hardware.h"
#include "traces/chakra.h"
#include "traces/io.h"
#include "traces/plan.h"
#include "traces/pytorch_et.h"

namespace ssdtrain::fuzz {
namespace {

using nlohmann::json;

// The name messages give the input (a fuzz input has no file).
constexpr const char* kSource = "fuzz-input";

[[noreturn]] void Fail(const char* target, const std::string& what) {
  std::fprintf(stderr, "fuzz target %s: %s\n", target, what.c_str());
  std::abort();
}

std::string_view Bytes(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// What was accepted is written and read back: the reader must accept its own
// writer's output and give the same document (also through CBOR).
template <typename T, typename FromJson>
void CheckRoundTrip(const char* target, const T& value, FromJson from_json) {
  const json written = ToJson(value);
  Result<T> again = from_json(written, "round-trip");
  if (!again.ok()) Fail(target, "rejects its own output: " + again.status().ToString());
  if (ToJson(*again) != written) Fail(target, "read(write(x)) differs from x");
  const std::vector<uint8_t> cbor_bytes = json::to_cbor(written);
  Result<json> cbor = traces::ParseJson(Bytes(cbor_bytes.data(), cbor_bytes.size()),
                                        /*cbor=*/true, "round-trip.cbor");
  if (!cbor.ok()) Fail(target, "CBOR of its output does not read: " + cbor.status().ToString());
  if (*cbor != written) Fail(target, "the CBOR round trip changes the document");
}

void Trace(const char* target, const uint8_t* data, size_t size, bool cbor) {
  Result<json> j = traces::ParseJson(Bytes(data, size), cbor, kSource);
  if (!j.ok()) return;
  Result<traces::Trace> trace = traces::TraceFromJson(*j, kSource);  // validates
  if (!trace.ok()) return;
  CheckRoundTrip<traces::Trace>(target, *trace, traces::TraceFromJson);
}

// The trace the seed plans were made for: tiny-gpt, stage 0 (as `ssdtrain trace`).
const traces::Trace& PlanFixtureTrace() {
  static const traces::Trace* trace = [] {
    const std::string path = std::string(ConfiguredSourceDir()) + "/configs/models/tiny-gpt.json";
    Result<models::ModelConfig> config = models::LoadModelConfig(path);
    if (!config.ok()) Fail("plan", "fixture: " + config.status().ToString());
    Result<traces::Trace> built = models::BuildTrace(*config);
    if (!built.ok()) Fail("plan", "fixture: " + built.status().ToString());
    return new traces::Trace(std::move(built).value());
  }();
  return *trace;
}

}  // namespace

void TraceJson(const uint8_t* data, size_t size) { Trace("trace_json", data, size, false); }

void TraceCbor(const uint8_t* data, size_t size) { Trace("trace_cbor", data, size, true); }

void TraceChakra(const uint8_t* data, size_t size) {
  Result<traces::Trace> trace = traces::TraceFromChakra(Bytes(data, size), kSource);
  if (!trace.ok()) return;
  Result<traces::Trace> again = traces::TraceFromChakra(traces::ToChakra(*trace), "round-trip");
  if (!again.ok()) Fail("trace_chakra", "rejects its own output: " + again.status().ToString());
  if (traces::ToJson(*again) != traces::ToJson(*trace)) {
    Fail("trace_chakra", "read(write(x)) differs from x");
  }
}

// A PyTorch execution trace: any file it takes imports as a valid trace (the
// importer validates its own result), which ssdtrain's format writes and reads back.
void TracePytorchEt(const uint8_t* data, size_t size) {
  Result<json> j = traces::ParseJson(Bytes(data, size), false, kSource);
  if (!j.ok()) return;
  Result<traces::PytorchEtImport> imported = traces::TraceFromPytorchEt(*j, kSource);
  if (!imported.ok()) return;
  Result<traces::Trace> again =
      traces::TraceFromJson(traces::ToJson(imported->trace), "round-trip");
  if (!again.ok())
    Fail("trace_pytorch_et", "its import is not a valid trace: " + again.status().ToString());
}

void Plan(const uint8_t* data, size_t size) {
  const traces::Trace& trace = PlanFixtureTrace();
  Result<json> j = traces::ParseJson(Bytes(data, size), false, kSource);
  if (!j.ok()) return;
  Result<traces::Plan> plan = traces::PlanFromJson(*j, kSource);
  if (!plan.ok()) return;
  CheckRoundTrip<traces::Plan>("plan", *plan, traces::PlanFromJson);
  (void)traces::ValidatePlan(*plan, trace, kSource);  // either verdict is fine; no crash
}

void ModelConfig(const uint8_t* data, size_t size) {
  Result<json> j = traces::ParseJson(Bytes(data, size), false, kSource);
  if (!j.ok()) return;
  Result<models::ModelConfig> config = models::ModelConfigFromJson(*j, kSource);  // validates
  if (!config.ok()) return;
  CheckRoundTrip<models::ModelConfig>("model_config", *config, models::ModelConfigFromJson);
}

void HfConfig(const uint8_t* data, size_t size) {
  Result<json> j = traces::ParseJson(Bytes(data, size), false, kSource);
  if (!j.ok()) return;
  models::HfReport report;
  Result<models::ModelConfig> config =
      models::ModelConfigFromHfJson(*j, kSource, "fuzz", &report);  // validates
  if (!config.ok()) return;
  if (report.model_type.empty() || report.read.empty()) {
    Fail("hf_config", "accepted a config without reporting what it read");
  }
  // What was mapped is an ordinary model config: it survives our own format.
  CheckRoundTrip<models::ModelConfig>("hf_config", *config, models::ModelConfigFromJson);
}

void HardwareConfig(const uint8_t* data, size_t size) {
  Result<json> j = traces::ParseJson(Bytes(data, size), false, kSource);
  if (!j.ok()) return;
  Result<sim::HardwareOptions> hw = sim::HardwareFromJson(*j, kSource);  // validates
  if (!hw.ok()) return;
  CheckRoundTrip<sim::HardwareOptions>("hardware_config", *hw, sim::HardwareFromJson);
}

const std::vector<Target>& Targets() {
  static const std::vector<Target> targets = {
      {"trace_json", TraceJson},
      {"trace_cbor", TraceCbor},
      {"plan", Plan},
      {"trace_chakra", TraceChakra},
      {"trace_pytorch_et", TracePytorchEt},
      {"model_config", ModelConfig},
      {"hardware_config", HardwareConfig},
      {"hf_config", HfConfig},
  };
  return targets;
}

}  // namespace ssdtrain::fuzz

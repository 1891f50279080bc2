#include "sim/tests/model_traces.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "cmake/build_paths.h"
#include "models/build_trace.h"

namespace ssdtrain::sim::testing {

HardwareOptions LoadPreset(const std::string& name) {
  Result<HardwareOptions> hw =
      LoadHardware(std::string(ConfiguredSourceDir()) + "/configs/hardware/" + name + ".json");
  EXPECT_TRUE(hw.ok()) << hw.status().ToString();
  return hw.ok() ? *hw : HardwareOptions{};
}

traces::Trace BuildModel(const models::ModelConfig& c) {
  Result<traces::Trace> t = models::BuildTrace(c);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : traces::Trace{};
}

const traces::Op& OpNamed(const traces::Trace& t, const std::string& name) {
  const auto it = std::find_if(t.ops.begin(), t.ops.end(),
                               [&](const traces::Op& op) { return op.name == name; });
  EXPECT_NE(it, t.ops.end()) << name;
  return it != t.ops.end() ? *it : t.ops.front();
}

}  // namespace ssdtrain::sim::testing

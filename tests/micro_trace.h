// A trace built from a small model config (tests/micro_gpt.h's, or a variant),
// for the tests that simulate and replay it; a config or build error fails the
// test and yields an empty trace.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "models/build_trace.h"
#include "models/model_config.h"

namespace ssdtrain::testing {

inline traces::Trace BuildMicroTrace(const nlohmann::json& config) {
  auto c = models::ModelConfigFromJson(config, config.value("name", std::string("micro")));
  EXPECT_TRUE(c.ok()) << c.status().message();
  if (!c.ok()) return {};
  auto trace = models::BuildTrace(*c, 0);
  EXPECT_TRUE(trace.ok()) << trace.status().message();
  return trace.ok() ? *trace : traces::Trace{};
}

}  // namespace ssdtrain::testing

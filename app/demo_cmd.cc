// ssdtrain demo: the main job on the embedded default model.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "app/command.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "traces/summary.h"

namespace ssdtrain::app {
namespace {

constexpr const char* kDefaultModel = SSDTRAIN_SOURCE_DIR "/configs/models/tiny-gpt.json";

struct DemoOptions {
  std::string model = kDefaultModel;
};

int Run(const DemoOptions& o) {
  Result<models::ModelConfig> config = models::LoadModelConfig(o.model);
  if (!config.ok()) return ReportError("demo", config.status());
  Result<traces::Trace> trace = models::BuildTrace(*config, 0);
  if (!trace.ok()) return ReportError("demo", trace.status());
  const traces::TraceSummary s = traces::Summarize(*trace);
  std::cout << fmt::format(
      "{}: {} ops, {} tensors, {:.1f} MB saved for backward, {:.2f} GFLOP forward\n",
      trace->header.model, trace->ops.size(), trace->tensors.size(),
      static_cast<double>(s.total.saved_bytes) / 1e6,
      static_cast<double>(s.total.forward_flops) / 1e9);
  return 0;
}

}  // namespace

Verb AddDemoCommand(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  CLI::App* cmd = app.add_subcommand("demo", "Run the main job on the default small model");
  cmd->add_option("--model", o->model, "Model config JSON")->capture_default_str();
  return Verb{cmd, [o] { return Run(*o); }};
}

}  // namespace ssdtrain::app

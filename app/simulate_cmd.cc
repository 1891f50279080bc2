// ssdtrain simulate: trace + plan + hardware -> predicted step metrics and timeline.
#include <iostream>

#include "app/command.h"
#include "app/outputs.h"
#include "sim/hardware.h"
#include "sim/simulate.h"
#include "traces/io.h"
#include "traces/plan.h"
#include "traces/report.h"
#include "traces/timeline.h"

namespace ssdtrain::app {
namespace {

struct SimulateCmdOptions {
  std::string trace, plan, hardware, output, timeline;
};

int RunSimulate(const SimulateCmdOptions& o) {
  Outputs outputs;  // checked first, written together at the end
  outputs.Add("-o", o.output);
  outputs.Add("--timeline", o.timeline);
  if (Status s = outputs.Check(); !s.ok()) return ReportError("simulate", s);
  Result<traces::Trace> trace = ReadUserTrace("simulate", o.trace);
  if (!trace.ok()) return ReportError("simulate", trace.status());
  Result<traces::Plan> plan = traces::ReadPlan(o.plan);
  if (!plan.ok()) return ReportError("simulate", plan.status());
  Status valid = traces::ValidatePlan(*plan, *trace, o.plan);
  if (!valid.ok()) return ReportError("simulate", valid);
  Result<sim::HardwareOptions> hw = sim::LoadHardware(o.hardware);
  if (!hw.ok()) return ReportError("simulate", hw.status());
  for (const std::string& note : hw->notes) std::cerr << "simulate: note: " << note << "\n";
  // The kernel prices ops and changes none, so the plan still matches; say
  // whose kernel the numbers are on where the two differ.
  if (plan->attention_kernel != trace->header.attention_kernel) {
    auto named = [](const std::string& k) { return k.empty() ? std::string("none") : k; };
    std::cerr << "simulate: note: the plan " << o.plan << " was priced on attention kernel "
              << named(plan->attention_kernel) << ", the trace " << o.trace << " names "
              << named(trace->header.attention_kernel)
              << " (header.attention_kernel): simulating on the trace's\n";
  }
  sim::SimulateOptions so;
  so.record_timeline = !o.timeline.empty();
  so.unrolled_interleaved_peaks = true;
  so.caching_allocator = true;  // one micro-batch on one stage: what PyTorch would reserve
  Result<sim::Prediction> p = sim::Simulate(*trace, *plan, *hw, so);
  if (!p.ok()) return ReportError("simulate", p.status());
  outputs.Set("-o", traces::ToJson(sim::PredictionReport(*p, *trace, *plan, *hw)));
  if (!o.timeline.empty()) {
    outputs.Set("--timeline", traces::ToChromeTrace(p->timeline, "ssdtrain simulate"));
  }
  if (Status w = outputs.Commit(); !w.ok()) return ReportError("simulate", w);
  const traces::StepMetrics& m = p->metrics;
  std::cout << "step " << static_cast<double>(m.step_time_ns) / 1e6 << " ms, " << m.tokens_per_s
            << " tokens/s, peak GPU " << static_cast<double>(m.peak_gpu_bytes) / (1 << 30)
            << " GiB, activations " << static_cast<double>(m.peak_activation_bytes) / (1 << 30)
            << " GiB, exposed I/O " << static_cast<double>(m.exposed_io_ns) / 1e6 << " ms\n";
  return 0;
}

}  // namespace

Verb AddSimulateCommand(CLI::App& app) {
  auto o = std::make_shared<SimulateCmdOptions>();
  CLI::App* cmd = app.add_subcommand("simulate", "Simulate a plan on a hardware model");
  cmd->add_option("--trace", o->trace,
                  "trace file (.json, .cbor, a .et Chakra trace ssdtrain export wrote, or a "
                  "PyTorch execution trace)")
      ->required();
  cmd->add_option("--plan", o->plan, "plan file")->required();
  cmd->add_option("--hardware", o->hardware, "hardware config (configs/hardware/*.json)")
      ->required();
  cmd->add_option("-o,--output", o->output,
                  "prediction to write: an ssdtrain-report step report (kind prediction)")
      ->required();
  cmd->add_option("--timeline", o->timeline, "Chrome/Perfetto trace of the simulated step");
  return Verb{cmd, [o] { return RunSimulate(*o); }};
}

}  // namespace ssdtrain::app

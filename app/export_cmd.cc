// ssdtrain export --chakra: a trace, or a plan's predicted step, as a Chakra
// execution trace (traces/chakra.h) for ASTRA-sim and the Chakra tools.
#include <iostream>

#include "app/command.h"
#include "app/outputs.h"
#include "sim/hardware.h"
#include "sim/simulate.h"
#include "traces/chakra.h"
#include "traces/io.h"
#include "traces/plan.h"
#include "traces/storage_plan.h"

namespace ssdtrain::app {
namespace {

struct ExportOptions {
  bool chakra = false;
  std::string trace, plan, hardware, output;
};

int RunExport(const ExportOptions& o) {
  if (!o.chakra) {
    return ReportError(
        "export", Status::InvalidArgument("--chakra: the one export format; give it to write a "
                                          "Chakra execution trace"));
  }
  if (o.plan.empty() != o.hardware.empty()) {
    return ReportError(
        "export", Status::InvalidArgument("--plan and --hardware go together: the plan's step is "
                                          "simulated on the hardware for its times"));
  }
  Outputs outputs;
  outputs.Add("-o", o.output);
  if (Status s = outputs.Check(); !s.ok()) return ReportError("export", s);
  Result<traces::Trace> trace = ReadUserTrace("export", o.trace);
  if (!trace.ok()) return ReportError("export", trace.status());
  traces::ChakraOptions co;
  traces::Plan plan;
  traces::StoragePlan storage_plan;
  sim::Prediction prediction;
  if (!o.plan.empty()) {
    Result<traces::Plan> p = traces::ReadPlan(o.plan);
    if (!p.ok()) return ReportError("export", p.status());
    if (Status v = traces::ValidatePlan(*p, *trace, o.plan); !v.ok())
      return ReportError("export", v);
    plan = std::move(*p);
    Result<sim::HardwareOptions> hw = sim::LoadHardware(o.hardware);
    if (!hw.ok()) return ReportError("export", hw.status());
    sim::SimulateOptions so;
    so.record_timeline = true;
    Result<sim::Prediction> predicted = sim::Simulate(*trace, plan, *hw, so);
    if (!predicted.ok()) return ReportError("export", predicted.status());
    prediction = std::move(*predicted);
    Result<traces::StoragePlan> resolved = traces::ResolvePlan(*trace, plan, o.plan);
    if (!resolved.ok()) return ReportError("export", resolved.status());
    storage_plan = std::move(*resolved);
    co.plan = &storage_plan;
    co.timeline = &prediction.timeline;
  }
  outputs.SetText("-o", traces::ToChakra(*trace, co));
  if (Status w = outputs.Commit(); !w.ok()) return ReportError("export", w);
  const traces::ChakraCounts c = traces::CountChakra(*trace, co);
  std::cout << "wrote " << o.output << ": Chakra ET " << traces::kChakraSchemaVersion << ", "
            << c.nodes << " nodes (" << c.op_nodes << " ops, " << c.mem_nodes
            << " SSD writes and reads), " << c.data_deps << " data and " << c.ctrl_deps
            << " control dependencies\n";
  return 0;
}

}  // namespace

Verb AddExportCommand(CLI::App& app) {
  auto o = std::make_shared<ExportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "export", "Write a trace, or a plan's predicted step, in another tool's format");
  cmd->add_flag("--chakra", o->chakra,
                "a Chakra execution trace (MLCommons; ASTRA-sim reads it): one node per op, "
                "and with --plan one per SSD write and read, with the simulated times");
  cmd->add_option("--trace", o->trace,
                  "trace file (.json, .cbor, a .et Chakra trace ssdtrain export wrote, or a "
                  "PyTorch execution trace)")
      ->required();
  cmd->add_option("--plan", o->plan, "plan for the trace: its SSD transfers become nodes");
  cmd->add_option("--hardware", o->hardware,
                  "hardware config the plan's step is simulated on (with --plan)");
  cmd->add_option("-o,--output", o->output, "file to write (Chakra ET: .et)")->required();
  return Verb{cmd, [o] { return RunExport(*o); }};
}

}  // namespace ssdtrain::app

// ssdtrain compare: a prediction against a measured run.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <sstream>

#include "analysis/compare.h"
#include "app/cli_errors.h"
#include "app/command.h"
#include "app/outputs.h"
#include "app/sizes.h"
#include "traces/report.h"

namespace ssdtrain::app {
namespace {

struct CompareOptions {
  std::string predicted;
  std::string measured;
  std::string csv;
  int64_t worst = 10;
};

int Run(const CompareOptions& o) {
  if (o.predicted.empty()) {
    return ReportError("compare", Status::InvalidArgument("--prediction is required"));
  }
  Outputs outputs;
  outputs.Add("--csv", o.csv);
  if (Status s = outputs.Check(); !s.ok()) return ReportError("compare", s);
  Result<traces::StepReport> p = traces::ReadStepReport(o.predicted);
  if (!p.ok()) return ReportError("compare", p.status());
  Result<traces::StepReport> m = traces::ReadStepReport(o.measured);
  if (!m.ok()) return ReportError("compare", m.status());
  // Predicted and measured must describe the same layout: a whole step of
  // pp stages and m micro-batches against one micro-batch of stage 0 is not
  // an error of the model, it is two different things.
  if (!p->layout || !m->layout) {
    return ReportError(
        "compare",
        Status::InvalidArgument(fmt::format(
            "{}: layout: missing (a report from before layouts were recorded); write it again "
            "with this ssdtrain so that the two can be checked to describe the same layout",
            !p->layout ? o.predicted : o.measured)));
  }
  if (const std::string diff = traces::LayoutMismatch(*p->layout, *m->layout); !diff.empty()) {
    return ReportError(
        "compare",
        Status::InvalidArgument(fmt::format(
            "{} vs {}: layout differs ({}; predicted vs measured): they describe different "
            "steps; simulate the plan the run replayed, or replay the predicted layout",
            o.predicted, o.measured, diff)));
  }
  Result<analysis::Comparison> c = analysis::Compare(*p, *m, static_cast<size_t>(o.worst));
  if (!c.ok()) {
    return ReportError("compare",
                       c.status().WithPrefix(fmt::format("{} vs {}", o.predicted, o.measured)));
  }
  if (!o.csv.empty()) {
    std::ostringstream csv;
    analysis::WriteCsv(*c, csv);
    outputs.SetText("--csv", csv.str());
  }
  if (Status s = outputs.Commit(); !s.ok()) return ReportError("compare", s);
  analysis::PrintComparison(*c, std::cout);
  return 0;
}

}  // namespace

Verb AddCompareCommand(CLI::App& app) {
  auto o = std::make_shared<CompareOptions>();
  CLI::App* cmd =
      app.add_subcommand("compare", "Compare a simulated prediction with a measured run");
  cmd->add_option("--prediction", o->predicted,
                  "Prediction file: `ssdtrain plan --prediction` or `ssdtrain simulate -o`");
  // The same file is plan's --prediction; the old name stays an alias.
  AddAlias(cmd, "--predicted", "--prediction", o->predicted);
  cmd->add_option("--measured", o->measured, "run.json from `ssdtrain replay`")->required();
  cmd->add_option("--csv", o->csv, "Also write the table as CSV");
  cmd->add_option("--worst", o->worst, "How many ops with the largest error to list")
      ->capture_default_str()
      ->check(IntAtLeast(0));
  return Verb{cmd, [o] { return Run(*o); }};
}

}  // namespace ssdtrain::app

// ssdtrain compare: a prediction against a measured run.
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <memory>

#include "analysis/compare.h"
#include "app/command.h"

namespace ssdtrain::app {
namespace {

struct CompareOptions {
  std::string predicted;
  std::string measured;
  std::string csv;
  size_t worst = 10;
};

int Run(const CompareOptions& o) {
  Result<traces::StepReport> p = traces::ReadStepReport(o.predicted);
  if (!p.ok()) return ReportError("compare", p.status());
  Result<traces::StepReport> m = traces::ReadStepReport(o.measured);
  if (!m.ok()) return ReportError("compare", m.status());
  Result<analysis::Comparison> c = analysis::Compare(*p, *m, o.worst);
  if (!c.ok()) {
    return ReportError("compare",
                       c.status().WithPrefix(fmt::format("{} vs {}", o.predicted, o.measured)));
  }
  analysis::PrintComparison(*c, std::cout);
  if (!o.csv.empty()) {
    std::ofstream out(o.csv);
    analysis::WriteCsv(*c, out);
    out.flush();
    if (!out) return ReportError("compare", Status::IoError(o.csv + ": cannot write"));
  }
  return 0;
}

}  // namespace

Verb AddCompareCommand(CLI::App& app) {
  auto o = std::make_shared<CompareOptions>();
  CLI::App* cmd =
      app.add_subcommand("compare", "Compare a simulated prediction with a measured run");
  cmd->add_option("--predicted", o->predicted, "prediction.json from `ssdtrain simulate`")
      ->required();
  cmd->add_option("--measured", o->measured, "run.json from `ssdtrain replay`")->required();
  cmd->add_option("--csv", o->csv, "Also write the table as CSV");
  cmd->add_option("--worst", o->worst, "How many ops with the largest error to list")
      ->capture_default_str();
  return Verb{cmd, [o] { return Run(*o); }};
}

}  // namespace ssdtrain::app

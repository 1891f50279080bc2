// The demo end to end (app/demo.h): its outputs checked, the trace, the
// calibration, the plans, the rounds of replays, a second calibration where
// keep measured far off, then the table.
#include <fmt/format.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "app/demo.h"
#include "app/outputs.h"
#include "exec/offload_dir.h"
#include "exec/signal_cleanup.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "sim/optimal_policy.h"
#include "sim/policy.h"
#include "sim/simulate.h"
#include "traces/io.h"

namespace ssdtrain::app::demo {
namespace {

namespace fs = std::filesystem;

// |a - b| relative to the smaller: how far apart two measurements of one plan are.
double Drift(int64_t a, int64_t b) {
  const int64_t lo = std::min(a, b);
  return lo > 0 ? static_cast<double>(std::max(a, b) - lo) / static_cast<double>(lo) : 0.0;
}

std::string Stamp() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", std::localtime(&now));
  return buf;
}

// An offload directory that is removed when the demo ends, also on error.
class ScratchDir {
 public:
  static Result<std::unique_ptr<ScratchDir>> Make(const std::string& given,
                                                  bool allow_buffered_io) {
    if (!given.empty()) {
      SSDTRAIN_RETURN_IF_ERROR(exec::CheckOffloadDir(given, allow_buffered_io));
      return std::make_unique<ScratchDir>(given, false);
    }
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/var/tmp") + "/ssdtrain-demo-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      return Status::IoError(pattern + ": cannot create a temporary offload directory (set --dir)");
    }
    auto dir = std::make_unique<ScratchDir>(pattern, true);
    // $TMPDIR may be a tmpfs: said now, not when the first replay opens it.
    SSDTRAIN_RETURN_IF_ERROR(exec::CheckOffloadDir(pattern, allow_buffered_io));
    // Ctrl-C or SIGTERM removes it too, after the engine's run directory in it.
    auto guard = exec::ScopedSignalCleanup::Make(fs::absolute(pattern).string());
    if (!guard.ok()) return guard.status();
    dir->guard_.emplace(std::move(*guard));
    return dir;
  }
  ScratchDir(std::string path, bool owned) : path_(std::move(path)), owned_(owned) {}
  ~ScratchDir() {
    std::error_code ec;
    if (owned_) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool owned_;
  std::optional<exec::ScopedSignalCleanup> guard_;
};

}  // namespace

void Demo::RemoveReport() const {
  std::error_code ec;
  if (made_report_) {
    fs::remove_all(report_, ec);
    return;
  }
  for (const std::string& name : files_) fs::remove(report_ / name, ec);
}

Status Demo::CheckOutputs() {
  report_ =
      o_.report.empty() ? fs::absolute("ssdtrain-report-" + Stamp()) : fs::absolute(o_.report);
  Outputs outputs;
  outputs.Add("--summary", o_.summary);
  SSDTRAIN_RETURN_IF_ERROR(outputs.Check());
  std::error_code ec;
  if (fs::exists(report_, ec)) {
    if (!fs::is_directory(report_, ec)) {
      return Status::InvalidArgument("--report " + report_.string() + ": is not a folder");
    }
    if (::access(report_.c_str(), W_OK | X_OK) != 0) {
      return Status::IoError("--report " + report_.string() + ": is not writable");
    }
  } else {
    Outputs folder;  // its parent must exist and be writable, as for a file
    folder.Add("--report", report_.string());
    SSDTRAIN_RETURN_IF_ERROR(folder.Check());
  }
  return Status::Ok();
}

Status Demo::RunAll() {
  SSDTRAIN_RETURN_IF_ERROR(CheckOutputs());
  SSDTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<ScratchDir> scratch,
                            ScratchDir::Make(o_.dir, o_.allow_buffered_io));
  dir_ = scratch->path();
  std::error_code ec;
  made_report_ = fs::create_directory(report_, ec);
  if (ec)
    return Status::IoError(report_.string() + ": cannot create the report folder (" + ec.message() +
                           ")");
  SSDTRAIN_RETURN_IF_ERROR(TraceAndCalibrate());
  SSDTRAIN_ASSIGN_OR_RETURN(Plans plans, MakePlans());
  const std::vector<const traces::Plan*> order = {&plans.keep, &plans.recompute, &plans.adaptive,
                                                  &plans.best};
  SSDTRAIN_ASSIGN_OR_RETURN(std::vector<Row> rows, MeasureRows(order));
  SSDTRAIN_ASSIGN_OR_RETURN(const bool keep_steady, KeepSteady(plans.keep, rows));
  // Keep's prediction is the calibrated op times summed, so keep far off its
  // prediction while keep itself held steady means the calibration caught the
  // machine at another speed (a cache from another day; a build that had just
  // finished). Measure it once more, now, and predict again; the plans stay.
  if (!o_.keep_calibration && std::abs(KeepError(rows)) > kRecalibrateAt && keep_steady) {
    SSDTRAIN_RETURN_IF_ERROR(Recalibrate(order, rows));
  }
  PrintTable(rows, plans.budget);
  if (!o_.summary.empty()) SSDTRAIN_RETURN_IF_ERROR(WriteSummary(rows, plans.budget));
  if (o_.plots) Plots(rows);
  std::cout << "\nreport folder: " << report_.string() << "\n";
  return Status::Ok();
}

Status Demo::TraceAndCalibrate() {
  SSDTRAIN_ASSIGN_OR_RETURN(models::ModelConfig config, models::LoadModelConfig(o_.model));
  SSDTRAIN_ASSIGN_OR_RETURN(trace_, models::BuildTrace(config, 0));
  SSDTRAIN_RETURN_IF_ERROR(traces::WriteTrace(trace_, File("trace.json")));
  Progress(fmt::format("traced {}: {} ops, {} tensors", trace_.header.model, trace_.ops.size(),
                       trace_.tensors.size()));
  SSDTRAIN_ASSIGN_OR_RETURN(hw_, Calibration(/*measure=*/o_.recalibrate));
  ApplySsdCap();
  return traces::WriteJsonFile(sim::ToJson(hw_), File("hardware.json"));
}

Result<Demo::Plans> Demo::MakePlans() {
  // Keep and full recompute, then the planner under a budget keep does not fit.
  const traces::Plan base = sim::BasePlan(trace_);
  Plans out;
  SSDTRAIN_ASSIGN_OR_RETURN(out.keep, sim::MakeFixedPlan("keep", trace_, hw_, base));
  SSDTRAIN_ASSIGN_OR_RETURN(out.recompute, sim::MakeFixedPlan("recompute-full", trace_, hw_, base));
  SSDTRAIN_ASSIGN_OR_RETURN(out.adaptive, sim::MakeFixedPlan("ssdtrain", trace_, hw_, base));
  SSDTRAIN_ASSIGN_OR_RETURN(sim::Prediction keep_pred, sim::Simulate(trace_, out.keep, hw_));
  out.budget = keep_pred.metrics.peak_gpu_bytes -
               static_cast<int64_t>(kBudgetActivationCut *
                                    static_cast<double>(keep_pred.metrics.peak_activation_bytes));
  Progress(fmt::format("planning under a {:.1f} MiB budget (keep-everything peaks at {:.1f} MiB)",
                       out.budget / 1048576.0, keep_pred.metrics.peak_gpu_bytes / 1048576.0));
  SSDTRAIN_ASSIGN_OR_RETURN(sim::OptimalResult best,
                            sim::MakeOptimalPlan(trace_, hw_, base, out.budget));
  Progress(fmt::format("planner: {} simulations, started from {}", best.simulations,
                       best.best_fixed_policy));
  if (!best.fits) {
    // Nothing fits: replay the planner's lowest-peak plan under the budget
    // it is predicted to need, and say so (the budget is a promise).
    best.plan.memory_budget_bytes = best.prediction.metrics.peak_gpu_bytes;
    Progress(fmt::format(
        "planner: no plan fits {:.2f} MiB; its best needs {:.2f} MiB, which becomes its budget",
        out.budget / 1048576.0, best.plan.memory_budget_bytes / 1048576.0));
  }
  // Eviction points where the prediction has each write landed: the replay
  // then holds the predicted memory whatever the SSD does (sim/policy.h).
  SSDTRAIN_ASSIGN_OR_RETURN(out.adaptive,
                            sim::PlaceEvictions(trace_, std::move(out.adaptive), hw_));
  SSDTRAIN_ASSIGN_OR_RETURN(out.best, sim::PlaceEvictions(trace_, std::move(best.plan), hw_));
  return out;
}

Result<std::vector<Row>> Demo::MeasureRows(const std::vector<const traces::Plan*>& plans) {
  std::vector<Row> rows;
  for (const traces::Plan* plan : plans) {
    SSDTRAIN_ASSIGN_OR_RETURN(Row row, StartRow(*plan));
    rows.push_back(std::move(row));
  }
  // Round by round, every plan once a round: a slow minute touches them all.
  std::vector<std::vector<exec::ReplayResult>> runs(plans.size());
  for (int round = 0; round < o_.rounds; ++round) {
    for (size_t i = 0; i < plans.size(); ++i) {
      SSDTRAIN_ASSIGN_OR_RETURN(exec::ReplayResult run, TimedReplay(*plans[i], round));
      rows[i].round_ns.push_back(run.metrics.step_time_ns);
      runs[i].push_back(std::move(run));
    }
  }
  for (size_t i = 0; i < plans.size(); ++i) {
    SSDTRAIN_RETURN_IF_ERROR(FinishRow(*plans[i], MedianRun(runs[i]), &rows[i]));
  }
  return rows;
}

Result<bool> Demo::KeepSteady(const traces::Plan& keep, const std::vector<Row>& rows) {
  // How far the machine's own speed moved while the table was measured:
  // keep's rounds, or with one round keep once more, last. Errors of that
  // size are noise, not the simulator.
  if (o_.keep_calibration) {
    return false;  // neither the drift replay nor a second calibration (--keep-calibration)
  }
  if (o_.rounds > 1) {
    std::vector<int64_t> r = rows.front().round_ns;
    const auto [lo, hi] = std::minmax_element(r.begin(), r.end());
    keep_drift_ = Drift(*lo, *hi);
    // Steady: with three or more rounds, all but the one farthest from the
    // median agree (one slow minute does not make the machine unsteady).
    if (r.size() >= 3) {
      const int64_t median = rows.front().measured.metrics.step_time_ns;
      r.erase(std::max_element(r.begin(), r.end(), [&](int64_t a, int64_t b) {
        return std::abs(a - median) < std::abs(b - median);
      }));
    }
    const auto [lo2, hi2] = std::minmax_element(r.begin(), r.end());
    return Drift(*lo2, *hi2) < kRecalibrateAt;
  }
  SSDTRAIN_ASSIGN_OR_RETURN(exec::ReplayResult keep_again, TimedReplay(keep, 1));
  keep_again_ns_ = keep_again.metrics.step_time_ns;
  keep_drift_ = Drift(rows.front().measured.metrics.step_time_ns, keep_again_ns_);
  return keep_drift_ < kRecalibrateAt;
}

Status Demo::Recalibrate(const std::vector<const traces::Plan*>& plans, std::vector<Row>& rows) {
  Progress(
      fmt::format("keep measured {:+.1f}% off its prediction from {}: calibrating again and "
                  "predicting again",
                  100 * KeepError(rows), calibration_source_));
  recalibrated_from_ = calibration_source_;
  device_.reset();  // calibration makes its own (on CUDA, both would not fit)
  SSDTRAIN_ASSIGN_OR_RETURN(hw_, Calibration(/*measure=*/true));
  ApplySsdCap();
  SSDTRAIN_RETURN_IF_ERROR(traces::WriteJsonFile(sim::ToJson(hw_), File("hardware.json")));
  for (size_t i = 0; i < rows.size(); ++i) {
    SSDTRAIN_RETURN_IF_ERROR(Predict(*plans[i], &rows[i]));
    SSDTRAIN_RETURN_IF_ERROR(WriteComparison(rows[i]));
  }
  return Status::Ok();
}

std::string Demo::File(const std::string& name) const {
  if (std::find(files_.begin(), files_.end(), name) == files_.end()) files_.push_back(name);
  return (report_ / name).string();
}

}  // namespace ssdtrain::app::demo

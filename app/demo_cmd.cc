// ssdtrain demo: the main job end to end on the default small model —
// calibrate this machine (cached), plan under a memory budget that forces
// offloading, replay keep-everything, full recomputation, the paper's adaptive
// SSD offload and the chosen plan with verification, compare each with its
// prediction, and print one table.
#include <fmt/format.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "analysis/compare.h"
#include "app/calibration.h"
#include "app/cli_errors.h"
#include "app/command.h"
#include "app/outputs.h"
#include "app/reports.h"
#include "exec/calibrate.h"
#include "exec/offload_dir.h"
#include "exec/replay.h"
#include "exec/signal_cleanup.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "sim/hardware.h"
#include "sim/optimal_policy.h"
#include "sim/policy.h"
#include "sim/simulate.h"
#include "traces/io.h"

namespace ssdtrain::app {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDefaultModel = SSDTRAIN_SOURCE_DIR "/configs/models/tiny-gpt.json";
constexpr const char* kBaseHardware = SSDTRAIN_SOURCE_DIR "/configs/hardware/cpu-local.json";
constexpr const char* kPlotScript = SSDTRAIN_SOURCE_DIR "/analysis/plots.py";
// The budget the planner gets: keep-everything's peak minus this share of its
// activation peak — below what full recomputation alone reaches (it keeps each
// block's input, about a quarter), so that the plan has to offload.
constexpr double kBudgetActivationCut = 0.75;
// Bumped when calibration measures or records something new, so that a cache
// written by an older build is not used (2: issue_ahead_ops, op times pooled
// over four steps; 3: allocation alignment and the replay's workspace).
constexpr int kCalibrationCacheVersion = 3;
// Keep's |error| beyond which the demo calibrates once more (when keep itself
// was steady: its measurements, all but one outlier round, closer than this).
constexpr double kRecalibrateAt = 0.10;

struct DemoOptions {
  std::string model = kDefaultModel;
  std::string dir;     // offload directory; empty: a fresh one under $TMPDIR or /var/tmp
  std::string report;  // report folder; empty: ./ssdtrain-report-<time>
  std::string backend = "auto";
  int steps = 2;
  // Each policy is replayed this many times, in rounds (keep, recompute, ...,
  // keep, recompute, ...), and the replay with the median step time is the
  // measurement: a slow minute of a shared machine then lands on one round of
  // every policy instead of on all rounds of one.
  int rounds = 3;
  bool recalibrate = false;
  double ssd_bandwidth_GBps = 0;  // cap on the SSD path, replayed and simulated; 0: none
  std::string summary;            // also write the table as JSON here
  bool plots = true;
  bool verify = true;              // each policy's --verify replay before the timed rounds
  bool allow_buffered_io = false;  // where --dir refuses O_DIRECT: the page cache, not an error
};

struct Row {
  std::string policy;
  traces::StepReport predicted;
  traces::StepReport measured;    // the round with the median step time
  std::vector<int64_t> round_ns;  // each round's step time, in order
  std::optional<bool> verified;   // empty: not checked (--no-verify)
  int64_t budget_bytes = 0;       // the plan's memory budget; 0: none
};

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

fs::path CacheDir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0')
    return fs::path(x) / "ssdtrain";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0')
    return fs::path(h) / ".cache" / "ssdtrain";
  return fs::temp_directory_path() / "ssdtrain-cache";
}

exec::BackendChoice Backend(const std::string& s) {
  return s == "cpu"    ? exec::BackendChoice::kCpu
         : s == "cuda" ? exec::BackendChoice::kCuda
                       : exec::BackendChoice::kAuto;
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

class Demo {
 public:
  explicit Demo(const DemoOptions& o) : o_(o), start_(std::chrono::steady_clock::now()) {}

  int Run() {
    Status s = RunAll();
    if (!s.ok()) {
      RemoveReport();
      return ReportError("demo", s);
    }
    return 0;
  }

 private:
  void Progress(const std::string& line) const {
    const double sec =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::cerr << fmt::format("demo [{:6.1f} s] {}\n", sec, line);
  }

  // A failed demo leaves no output: the files it wrote, and the report folder
  // if it made it.
  void RemoveReport() const {
    std::error_code ec;
    if (made_report_) {
      fs::remove_all(report_, ec);
      return;
    }
    for (const std::string& name : files_) fs::remove(report_ / name, ec);
  }

  // Every output and the offload directory checked before any work; then the
  // report folder made (its parent folder exists: checked).
  Status CheckOutputs() {
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

  Status RunAll() {
    SSDTRAIN_RETURN_IF_ERROR(CheckOutputs());
    SSDTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<ScratchDir> scratch,
                              ScratchDir::Make(o_.dir, o_.allow_buffered_io));
    dir_ = scratch->path();
    std::error_code ec;
    made_report_ = fs::create_directory(report_, ec);
    if (ec)
      return Status::IoError(report_.string() + ": cannot create the report folder (" +
                             ec.message() + ")");

    SSDTRAIN_ASSIGN_OR_RETURN(models::ModelConfig config, models::LoadModelConfig(o_.model));
    SSDTRAIN_ASSIGN_OR_RETURN(trace_, models::BuildTrace(config, 0));
    SSDTRAIN_RETURN_IF_ERROR(traces::WriteTrace(trace_, File("trace.json")));
    Progress(fmt::format("traced {}: {} ops, {} tensors", trace_.header.model, trace_.ops.size(),
                         trace_.tensors.size()));

    SSDTRAIN_ASSIGN_OR_RETURN(hw_, Calibration(/*measure=*/o_.recalibrate));
    ApplySsdCap();
    SSDTRAIN_RETURN_IF_ERROR(traces::WriteJsonFile(sim::ToJson(hw_), File("hardware.json")));

    // Plans: keep and full recompute, then the planner under a budget keep does not fit.
    const traces::Plan base = sim::BasePlan(trace_);
    SSDTRAIN_ASSIGN_OR_RETURN(traces::Plan keep, sim::MakeFixedPlan("keep", trace_, hw_, base));
    SSDTRAIN_ASSIGN_OR_RETURN(traces::Plan recompute,
                              sim::MakeFixedPlan("recompute-full", trace_, hw_, base));
    SSDTRAIN_ASSIGN_OR_RETURN(traces::Plan adaptive,
                              sim::MakeFixedPlan("ssdtrain", trace_, hw_, base));
    SSDTRAIN_ASSIGN_OR_RETURN(sim::Prediction keep_pred, sim::Simulate(trace_, keep, hw_));
    const int64_t budget =
        keep_pred.metrics.peak_gpu_bytes -
        static_cast<int64_t>(kBudgetActivationCut *
                             static_cast<double>(keep_pred.metrics.peak_activation_bytes));
    Progress(fmt::format("planning under a {:.1f} MiB budget (keep-everything peaks at {:.1f} MiB)",
                         budget / 1048576.0, keep_pred.metrics.peak_gpu_bytes / 1048576.0));
    SSDTRAIN_ASSIGN_OR_RETURN(sim::OptimalResult best,
                              sim::MakeOptimalPlan(trace_, hw_, base, budget));
    Progress(fmt::format("planner: {} simulations, started from {}", best.simulations,
                         best.best_fixed_policy));
    if (!best.fits) {
      // Nothing fits: replay the planner's lowest-peak plan under the budget
      // it is predicted to need, and say so (the budget is a promise).
      best.plan.memory_budget_bytes = best.prediction.metrics.peak_gpu_bytes;
      Progress(fmt::format(
          "planner: no plan fits {:.2f} MiB; its best needs {:.2f} MiB, which becomes its budget",
          budget / 1048576.0, best.plan.memory_budget_bytes / 1048576.0));
    }

    // Eviction points where the prediction has each write landed: the replay
    // then holds the predicted memory whatever the SSD does (sim/policy.h).
    SSDTRAIN_ASSIGN_OR_RETURN(adaptive, sim::PlaceEvictions(trace_, std::move(adaptive), hw_));
    SSDTRAIN_ASSIGN_OR_RETURN(best.plan, sim::PlaceEvictions(trace_, std::move(best.plan), hw_));

    std::vector<Row> rows;
    const std::vector<const traces::Plan*> plans = {&keep, &recompute, &adaptive, &best.plan};
    for (const traces::Plan* plan : plans) {
      SSDTRAIN_ASSIGN_OR_RETURN(Row row, StartRow(*plan));
      rows.push_back(std::move(row));
    }
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
    runs.clear();
    // How far the machine's own speed moved while the table was measured:
    // keep's rounds, or with one round keep once more, last. Errors of that
    // size are noise, not the simulator.
    bool keep_steady = false;
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
      keep_steady = Drift(*lo2, *hi2) < kRecalibrateAt;
    } else {
      SSDTRAIN_ASSIGN_OR_RETURN(exec::ReplayResult keep_again, TimedReplay(keep, 1));
      keep_again_ns_ = keep_again.metrics.step_time_ns;
      keep_drift_ = Drift(rows.front().measured.metrics.step_time_ns, keep_again_ns_);
      keep_steady = keep_drift_ < kRecalibrateAt;
    }
    // Keep's prediction is the calibrated op times summed, so keep far off its
    // prediction while keep itself held steady means the calibration caught the
    // machine at another speed (a cache from another day; a build that had just
    // finished). Measure it once more, now, and predict again; the plans stay.
    if (std::abs(KeepError(rows)) > kRecalibrateAt && keep_steady) {
      Progress(fmt::format(
          "keep measured {:+.1f}% off its prediction from {}: calibrating again and predicting "
          "again",
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
    }
    PrintTable(rows, budget);
    if (!o_.summary.empty()) SSDTRAIN_RETURN_IF_ERROR(WriteSummary(rows, budget));
    if (o_.plots) Plots(rows);
    std::cout << "\nreport folder: " << report_.string() << "\n";
    return Status::Ok();
  }

  // The path of a file in the report folder, remembered (RemoveReport).
  std::string File(const std::string& name) const {
    if (std::find(files_.begin(), files_.end(), name) == files_.end()) files_.push_back(name);
    return (report_ / name).string();
  }

  void ApplySsdCap() {
    if (o_.ssd_bandwidth_GBps <= 0) return;
    // The replay's SSD path is one link of this rate that reads and writes
    // share (exec/engine_bandwidth_cap.cc); the simulator is given the same
    // drive, whose read and write queues share its rate the same way.
    hw_.storage.drive.write_GBps = std::min(hw_.storage.drive.write_GBps, o_.ssd_bandwidth_GBps);
    hw_.storage.drive.read_GBps = std::min(hw_.storage.drive.read_GBps, o_.ssd_bandwidth_GBps);
    if (recalibrated_from_.empty()) {
      Progress(fmt::format("SSD path capped at {:.3f} GB/s", o_.ssd_bandwidth_GBps));
    }
  }

  static double KeepError(const std::vector<Row>& rows) {
    return analysis::RelativeError(static_cast<double>(rows.front().predicted.metrics.step_time_ns),
                                   static_cast<double>(rows.front().measured.metrics.step_time_ns));
  }

  // The cached calibration for this backend and model, or (`measure`, or no
  // usable cache) a new one, cached for next time.
  Result<sim::HardwareOptions> Calibration(bool measure) {
    const fs::path cache =
        CacheDir() / fmt::format("calibration-v{}-{}-{}.json", kCalibrationCacheVersion, o_.backend,
                                 trace_.header.model);
    if (!measure && fs::exists(cache)) {
      Result<sim::HardwareOptions> hw = sim::LoadHardware(cache.string());
      if (hw.ok()) {
        Progress("calibration: using " + cache.string() + " (--recalibrate to measure again)");
        calibration_source_ = "the cached calibration " + cache.string();
        return hw;
      }
      Progress("calibration cache unreadable (" + hw.status().message() + "); measuring again");
    }
    SSDTRAIN_ASSIGN_OR_RETURN(sim::HardwareOptions base, sim::LoadHardware(kBaseHardware));
    exec::CalibrationOptions co;
    co.dir = dir_;
    co.backend = Backend(o_.backend);
    co.traces = {trace_};
    co.allow_buffered_io = o_.allow_buffered_io;
    co.progress = [this](const std::string& line) { Progress("calibrate: " + line); };
    SSDTRAIN_ASSIGN_OR_RETURN(exec::Calibration c, exec::Calibrate(co));
    sim::HardwareOptions hw = ApplyCalibration(
        base, c, CalibrationSettings{dir_, kBaseHardware, co.block_size, co.queue_depth});
    std::error_code ec;
    fs::create_directories(cache.parent_path(), ec);
    Status saved = traces::WriteJsonFile(sim::ToJson(hw), cache.string());
    if (!saved.ok()) Progress("could not cache the calibration: " + saved.message());
    calibration_source_ = "the calibration of this run";
    return hw;
  }

  // A row with its plan and prediction written, verified unless --no-verify.
  Result<Row> StartRow(const traces::Plan& plan) {
    Row row;
    row.policy = plan.policy;
    row.budget_bytes = plan.memory_budget_bytes;
    SSDTRAIN_RETURN_IF_ERROR(traces::WritePlan(plan, File("plan-" + plan.policy + ".json")));
    SSDTRAIN_RETURN_IF_ERROR(Predict(plan, &row));
    // Verification fills and checks every tensor, which costs time: one verified
    // replay proves the bytes, the unverified ones after it are the measurement.
    if (o_.verify) {
      SSDTRAIN_ASSIGN_OR_RETURN(exec::ReplayOptions ro, ReplayOptions());
      ro.steps = 1;
      ro.verify = true;
      Progress(fmt::format("replaying {} with --verify", plan.policy));
      SSDTRAIN_ASSIGN_OR_RETURN(exec::ReplayResult checked,
                                exec::Replay(trace_, plan, ro, "plan-" + plan.policy));
      row.verified = checked.verified;
    }
    return row;
  }

  // The replay whose step time is the median of the rounds (the lower middle
  // one for an even count).
  static const exec::ReplayResult& MedianRun(const std::vector<exec::ReplayResult>& runs) {
    std::vector<size_t> order(runs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return runs[a].metrics.step_time_ns < runs[b].metrics.step_time_ns;
    });
    return runs[order[(order.size() - 1) / 2]];
  }

  // The row's measurement from `run`, and its files.
  Status FinishRow(const traces::Plan& plan, const exec::ReplayResult& run, Row* row) const {
    row->measured = RunReport(run, trace_, plan);
    row->measured.verified = row->verified;
    if (o_.rounds > 1) row->measured.extra["round_step_times_ns"] = row->round_ns;
    SSDTRAIN_RETURN_IF_ERROR(
        traces::WriteStepReport(row->measured, File("measured-" + plan.policy + ".json")));
    SSDTRAIN_RETURN_IF_ERROR(
        traces::WriteJsonFile(traces::ToChromeTrace(run.timeline, "measured " + plan.policy),
                              File("timeline-measured-" + plan.policy + ".json")));
    return WriteComparison(*row);
  }

  // The row's prediction under hw_, and its files.
  Status Predict(const traces::Plan& plan, Row* row) const {
    SSDTRAIN_ASSIGN_OR_RETURN(sim::Prediction pred, sim::Simulate(trace_, plan, hw_));
    row->predicted = sim::PredictionReport(pred, trace_, plan, hw_);
    SSDTRAIN_RETURN_IF_ERROR(
        traces::WriteStepReport(row->predicted, File("predicted-" + plan.policy + ".json")));
    return traces::WriteJsonFile(traces::ToChromeTrace(pred.timeline, "predicted " + plan.policy),
                                 File("timeline-predicted-" + plan.policy + ".json"));
  }

  Status WriteComparison(const Row& row) const {
    SSDTRAIN_ASSIGN_OR_RETURN(analysis::Comparison cmp,
                              analysis::Compare(row.predicted, row.measured));
    std::ofstream csv(File("compare-" + row.policy + ".csv"));
    analysis::WriteCsv(cmp, csv);
    return Status::Ok();
  }

  Result<exec::ReplayOptions> ReplayOptions() {
    if (!device_) {
      exec::DeviceOptions d;
      d.capacity_bytes = static_cast<int64_t>(hw_.gpu.memory_GiB * 1024 * 1024 * 1024);
      std::string picked;
      SSDTRAIN_ASSIGN_OR_RETURN(device_, exec::MakeDevice(Backend(o_.backend), d, &picked));
      Progress("replays run on " + picked);
    }
    exec::ReplayOptions ro;
    ro.dir = dir_;
    ro.device = device_.get();
    ro.ssd_bandwidth_GBps = o_.ssd_bandwidth_GBps;
    ro.allow_buffered_io = o_.allow_buffered_io;
    return ro;
  }

  // A measurement: o_.steps steps after a warm-up, unverified.
  Result<exec::ReplayResult> TimedReplay(const traces::Plan& plan, int round) {
    SSDTRAIN_ASSIGN_OR_RETURN(exec::ReplayOptions ro, ReplayOptions());
    ro.steps = o_.steps;
    ro.progress = [this](const std::string& line) { Progress("  " + line); };
    Progress(o_.rounds > 1
                 ? fmt::format("round {}/{}: replaying {} for {} measured steps", round + 1,
                               o_.rounds, plan.policy, o_.steps)
                 : fmt::format("replaying {} for {} measured steps", plan.policy, o_.steps));
    return exec::Replay(trace_, plan, ro, "plan-" + plan.policy);
  }

  void PrintTable(const std::vector<Row>& rows, int64_t budget) const {
    std::cout << fmt::format("\n{} on {} — planner budget {:.1f} MiB\n", trace_.header.model,
                             hw_.gpu.name, budget / 1048576.0);
    std::cout << fmt::format("{:<16} {:>21} {:>8} {:>23} {:>23} {:>11} {:>8}\n", "",
                             "step time (ms)", "", "activation peak (MiB)", "device peak (MiB)", "",
                             "");
    std::cout << fmt::format(
        "{:<16} {:>10} {:>10} {:>8} {:>11} {:>11} {:>11} {:>11} {:>11} {:>8}\n", "policy",
        "predicted", "measured", "error", "predicted", "measured", "predicted", "measured",
        "SSD (MiB)", "verified");
    for (const Row& r : rows) {
      const double err =
          analysis::RelativeError(static_cast<double>(r.predicted.metrics.step_time_ns),
                                  static_cast<double>(r.measured.metrics.step_time_ns));
      std::cout << fmt::format(
          "{:<16} {:>10.1f} {:>10.1f} {:>+7.1f}% {:>11.2f} {:>11.2f} {:>11.2f} {:>11.2f} {:>11.1f} "
          "{:>8}\n",
          r.policy, r.predicted.metrics.step_time_ns / 1e6, r.measured.metrics.step_time_ns / 1e6,
          100 * err, r.predicted.metrics.peak_activation_bytes / 1048576.0,
          r.measured.metrics.peak_activation_bytes / 1048576.0,
          r.predicted.metrics.peak_gpu_bytes / 1048576.0,
          r.measured.metrics.peak_gpu_bytes / 1048576.0,
          r.measured.metrics.ssd_bytes_written / 1048576.0,
          !r.verified   ? "skipped"
          : *r.verified ? "yes"
                        : "NO");
    }
    if (o_.rounds > 1) {
      std::string each;
      for (int64_t ns : rows.front().round_ns)
        each += fmt::format("{}{:.1f}", each.empty() ? "" : ", ", ns / 1e6);
      std::cout << fmt::format(
          "measured: the median of {} rounds (keep: {} ms, {:.1f}% apart: this machine's own drift "
          "during the run; errors of that size are noise)\n",
          o_.rounds, each, 100 * keep_drift_);
    } else {
      const int64_t keep_first = rows.front().measured.metrics.step_time_ns;
      std::cout << fmt::format(
          "keep measured again at the end: {:.1f} ms against {:.1f} ms first ({:.1f}% apart): "
          "this machine's own drift during the run; errors of that size are noise\n",
          keep_again_ns_ / 1e6, keep_first / 1e6, 100 * keep_drift_);
    }
    if (!recalibrated_from_.empty()) {
      std::cout << fmt::format(
          "predictions from a second calibration: keep had measured more than {:.0f}% off the "
          "prediction from {}\n",
          100 * kRecalibrateAt, recalibrated_from_);
    }
    if (std::any_of(rows.begin(), rows.end(), [](const Row& r) {
          return r.measured.extra.value("direct_io", true) == false;
        })) {
      std::cout << "buffered I/O (--allow-buffered-io): " << dir_
                << " refused O_DIRECT; the measured SSD path is the page cache, not the drive\n";
    }
  }

  Status WriteSummary(const std::vector<Row>& rows, int64_t budget) const {
    nlohmann::json out{{"model", trace_.header.model},
                       {"ssd_bandwidth_GBps", o_.ssd_bandwidth_GBps},
                       {"budget_bytes", budget},
                       {"rounds", o_.rounds},
                       {"keep_again_step_ns", keep_again_ns_},  // 0 with rounds > 1
                       {"drift", keep_drift_},
                       {"recalibrated", !recalibrated_from_.empty()},
                       {"report", report_.string()},
                       {"rows", nlohmann::json::array()}};
    for (const Row& r : rows) {
      out["rows"].push_back(
          {{"policy", r.policy},
           {"predicted_step_ns", r.predicted.metrics.step_time_ns},
           {"measured_step_ns", r.measured.metrics.step_time_ns},
           {"step_times_ns", r.measured.extra.value("step_times_ns", nlohmann::json::array())},
           {"round_step_times_ns", r.round_ns},
           {"error", analysis::RelativeError(static_cast<double>(r.predicted.metrics.step_time_ns),
                                             static_cast<double>(r.measured.metrics.step_time_ns))},
           {"peak_activation_bytes", r.measured.metrics.peak_activation_bytes},
           {"predicted_peak_activation_bytes", r.predicted.metrics.peak_activation_bytes},
           {"peak_device_bytes", r.measured.metrics.peak_gpu_bytes},
           {"predicted_peak_device_bytes", r.predicted.metrics.peak_gpu_bytes},
           {"budget_bytes", r.budget_bytes},
           {"ssd_bytes_written", r.measured.metrics.ssd_bytes_written},
           {"verified", r.verified ? nlohmann::json(*r.verified) : nlohmann::json(nullptr)}});
    }
    return traces::WriteJsonFile(out, o_.summary);
  }

  void Plots(const std::vector<Row>& rows) const {
    if (std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") != 0) {
      Progress(
          "plots skipped: /usr/bin/python3 with matplotlib not found (apt-get install "
          "python3-matplotlib)");
      return;
    }
    std::string memory = "", rok = "";
    for (const Row& r : rows) {
      const std::string p = r.policy;
      memory += fmt::format(" '{}={}'", p, File("timeline-measured-" + p + ".json"));
      rok += fmt::format(" '{}' '{}'", File("predicted-" + p + ".json"),
                         File("measured-" + p + ".json"));
      RunPlot(fmt::format("timelines --predicted '{}' --measured '{}' -o '{}'",
                          File("timeline-predicted-" + p + ".json"),
                          File("timeline-measured-" + p + ".json"),
                          File("timelines-" + p + ".png")));
    }
    RunPlot("memory" + memory + " -o '" + File("memory.png") + "'");
    RunPlot("rok" + rok + " -o '" + File("rok.png") + "'");
    // SSD bandwidth of the row that wrote the most.
    std::string chosen = rows.back().policy;
    int64_t most = 0;
    for (const Row& r : rows) {
      if (r.measured.metrics.ssd_bytes_written > most) {
        most = r.measured.metrics.ssd_bytes_written;
        chosen = r.policy;
      }
    }
    if (most == 0) return;
    RunPlot(fmt::format("bandwidth --timeline '{}' --write-GBps {} --read-GBps {} -o '{}'",
                        File("timeline-measured-" + chosen + ".json"), hw_.storage.drive.write_GBps,
                        hw_.storage.drive.read_GBps, File("ssd-bandwidth.png")));
  }

  void RunPlot(const std::string& args) const {
    const std::string cmd = std::string("/usr/bin/python3 '") + kPlotScript + "' " + args;
    if (std::system(cmd.c_str()) != 0) Progress("plot failed: " + cmd);
  }

  const DemoOptions o_;
  std::chrono::steady_clock::time_point start_;
  fs::path report_;
  bool made_report_ = false;                // the report folder was made by this demo
  mutable std::vector<std::string> files_;  // the names File has given, in the report folder
  std::string dir_;
  traces::Trace trace_;
  sim::HardwareOptions hw_;
  int64_t keep_again_ns_ = 0;  // keep's step time measured once more (one round only)
  double keep_drift_ = 0;
  // Every replay runs on this one device, made on the first replay: a fresh
  // CPU arena costs seconds of first-touch page zeroing on a VM.
  std::unique_ptr<exec::Device> device_;  // keep's spread over its measurements
  std::string calibration_source_;        // for messages: cached (which file) or measured now
  std::string recalibrated_from_;         // set when the first calibration was replaced
};

}  // namespace

Verb AddDemoCommand(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "demo", "The main job: calibrate, plan, replay keep / recompute / the plan, compare, report");
  cmd->add_option("--model", o->model, "Model config JSON")->capture_default_str();
  cmd->add_option("--dir", o->dir,
                  "Offload directory (default: a temporary one under $TMPDIR or /var/tmp)");
  cmd->add_option("--report", o->report, "Report folder (default: ./ssdtrain-report-<time>)");
  cmd->add_option("--backend", o->backend, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "Measured steps per replay")
      ->check(IntAtLeast(1))
      ->capture_default_str();
  cmd->add_option("--rounds", o->rounds,
                  "Replay every policy this many times, interleaved, and report the median "
                  "(evens out a noisy machine)")
      ->check(IntAtLeast(1))
      ->capture_default_str();
  cmd->add_option("--ssd-bandwidth", o->ssd_bandwidth_GBps,
                  "Cap the SSD path at this many GB/s in the replays and the simulation "
                  "(default: 0, no cap)")
      ->check(RealAtLeast(0));
  cmd->add_option("--summary", o->summary, "Also write the table as JSON to this file");
  cmd->add_flag("!--no-plots", o->plots, "Skip the plots");
  cmd->add_flag("!--no-verify", o->verify,
                "Skip each policy's --verify replay before the timed rounds (the table says "
                "\"skipped\")");
  cmd->add_flag("--allow-buffered-io", o->allow_buffered_io,
                "Where --dir is in memory (tmpfs, ramfs) or refuses O_DIRECT, go through the page "
                "cache instead "
                "of failing (every SSD figure is then the page cache's)");
  cmd->add_flag("--recalibrate", o->recalibrate,
                "Measure the machine again instead of using the cached calibration");
  return Verb{cmd, [o] { return Demo(*o).Run(); }};
}

}  // namespace ssdtrain::app

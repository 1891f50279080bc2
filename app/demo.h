// The demo's parts (app/demo_cmd.cc): its options, one row of its table, and
// the Demo that runs it, whose work is split by concept — the run end to end
// (demo_run.cc), its calibration, predictions and replays (demo_replays.cc),
// and its table, summary and plots (demo_print.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cmake/build_paths.h"
#include "exec/device.h"
#include "exec/replay.h"
#include "sim/hardware.h"
#include "traces/plan.h"
#include "traces/report.h"
#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::app::demo {

// The checkout's configs and plot script (the demo runs from a checkout).
inline std::string DefaultModel() {
  return std::string(ConfiguredSourceDir()) + "/configs/models/tiny-gpt.json";
}
inline std::string BaseHardware() {
  return std::string(ConfiguredSourceDir()) + "/configs/hardware/cpu-local.json";
}
inline std::string PlotScript() {
  return std::string(ConfiguredSourceDir()) + "/analysis/plots.py";
}
// The budget the planner gets: keep-everything's peak minus this share of its
// activation peak — below what full recomputation alone reaches (it keeps each
// block's input, about a quarter), so that the plan has to offload.
inline constexpr double kBudgetActivationCut = 0.75;
// Bumped when calibration measures or records something new, so that a cache
// written by an older build is not used (2: issue_ahead_ops, op times pooled
// over four steps; 3: allocation alignment and the replay's workspace).
inline constexpr int kCalibrationCacheVersion = 3;
// Keep's |error| beyond which the demo calibrates once more (when keep itself
// was steady: its measurements, all but one outlier round, closer than this).
inline constexpr double kRecalibrateAt = 0.10;

struct DemoOptions {
  std::string model = DefaultModel();
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
  // Predict from the first calibration whatever keep then measures: no drift
  // replay, no second calibration (scripts/accuracy.sh --gate memory: memory does
  // not depend on the calibration, and a loaded machine would calibrate again).
  bool keep_calibration = false;
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

class Demo {
 public:
  explicit Demo(const DemoOptions& o) : o_(o), start_(std::chrono::steady_clock::now()) {}

  int Run();
  void Progress(const std::string& line) const;

  // The run end to end (demo_run.cc).
  // A failed demo leaves no output: the files it wrote, and the report folder
  // if it made it.
  void RemoveReport() const;
  // Every output and the offload directory checked before any work; then the
  // report folder made (its parent folder exists: checked).
  Status CheckOutputs();
  Status RunAll();
  // RunAll's steps: the trace and the hardware (cached or measured); the
  // plans; the rounds of replays as rows; whether keep held steady over them
  // (its drift); a second calibration, and predictions again, where keep
  // measured far off while steady.
  struct Plans {
    traces::Plan keep, recompute, adaptive, best;
    int64_t budget = 0;  // the planner's: keep's peak less a share of its activations
  };
  Status TraceAndCalibrate();
  Result<Plans> MakePlans();
  Result<std::vector<Row>> MeasureRows(const std::vector<const traces::Plan*>& plans);
  Result<bool> KeepSteady(const traces::Plan& keep, const std::vector<Row>& rows);
  Status Recalibrate(const std::vector<const traces::Plan*>& plans, std::vector<Row>& rows);
  // The path of a file in the report folder, remembered (RemoveReport).
  std::string File(const std::string& name) const;

  // Calibration, predictions and replays (demo_replays.cc).
  void ApplySsdCap();
  static double KeepError(const std::vector<Row>& rows);
  // The cached calibration for this backend and model, or (`measure`, or no
  // usable cache) a new one, cached for next time.
  Result<sim::HardwareOptions> Calibration(bool measure);
  // A row with its plan and prediction written, verified unless --no-verify.
  Result<Row> StartRow(const traces::Plan& plan);
  // The replay whose step time is the median of the rounds (the lower middle
  // one for an even count).
  static const exec::ReplayResult& MedianRun(const std::vector<exec::ReplayResult>& runs);
  // The row's measurement from `run`, and its files.
  Status FinishRow(const traces::Plan& plan, const exec::ReplayResult& run, Row* row) const;
  // The row's prediction under hw_, and its files.
  Status Predict(const traces::Plan& plan, Row* row) const;
  Status WriteComparison(const Row& row) const;
  Result<exec::ReplayOptions> ReplayOptions();
  // A measurement: o_.steps steps after a warm-up, unverified.
  Result<exec::ReplayResult> TimedReplay(const traces::Plan& plan, int round);

  // The table, the summary and the plots (demo_print.cc).
  void PrintTable(const std::vector<Row>& rows, int64_t budget) const;
  Status WriteSummary(const std::vector<Row>& rows, int64_t budget) const;
  void Plots(const std::vector<Row>& rows) const;
  void RunPlot(const std::string& args) const;

  const DemoOptions o_;
  std::chrono::steady_clock::time_point start_;
  std::filesystem::path report_;
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

}  // namespace ssdtrain::app::demo

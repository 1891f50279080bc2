// The demo's calibration (cached per backend and model), predictions and
// replays, and the files each row writes (app/demo.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "analysis/compare.h"
#include "app/calibration.h"
#include "app/demo.h"
#include "app/reports.h"
#include "exec/calibrate.h"
#include "sim/simulate.h"
#include "traces/io.h"

namespace ssdtrain::app::demo {
namespace {

namespace fs = std::filesystem;

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

}  // namespace

void Demo::ApplySsdCap() {
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

double Demo::KeepError(const std::vector<Row>& rows) {
  return analysis::RelativeError(static_cast<double>(rows.front().predicted.metrics.step_time_ns),
                                 static_cast<double>(rows.front().measured.metrics.step_time_ns));
}

Result<sim::HardwareOptions> Demo::Calibration(bool measure) {
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
  SSDTRAIN_ASSIGN_OR_RETURN(sim::HardwareOptions base, sim::LoadHardware(BaseHardware()));
  exec::CalibrationOptions co;
  co.dirs = {dir_};
  co.backend = Backend(o_.backend);
  co.traces = {trace_};
  co.allow_buffered_io = o_.allow_buffered_io;
  co.progress = [this](const std::string& line) { Progress("calibrate: " + line); };
  SSDTRAIN_ASSIGN_OR_RETURN(exec::Calibration c, exec::Calibrate(co));
  sim::HardwareOptions hw = ApplyCalibration(
      base, c, CalibrationSettings{{dir_}, BaseHardware(), co.block_size, co.queue_depth});
  std::error_code ec;
  fs::create_directories(cache.parent_path(), ec);
  Status saved = traces::WriteJsonFile(sim::ToJson(hw), cache.string());
  if (!saved.ok()) Progress("could not cache the calibration: " + saved.message());
  calibration_source_ = "the calibration of this run";
  return hw;
}

Result<Row> Demo::StartRow(const traces::Plan& plan) {
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

const exec::ReplayResult& Demo::MedianRun(const std::vector<exec::ReplayResult>& runs) {
  std::vector<size_t> order(runs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return runs[a].metrics.step_time_ns < runs[b].metrics.step_time_ns;
  });
  return runs[order[(order.size() - 1) / 2]];
}

Status Demo::FinishRow(const traces::Plan& plan, const exec::ReplayResult& run, Row* row) const {
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

Status Demo::Predict(const traces::Plan& plan, Row* row) const {
  SSDTRAIN_ASSIGN_OR_RETURN(sim::Prediction pred, sim::Simulate(trace_, plan, hw_));
  row->predicted = sim::PredictionReport(pred, trace_, plan, hw_);
  SSDTRAIN_RETURN_IF_ERROR(
      traces::WriteStepReport(row->predicted, File("predicted-" + plan.policy + ".json")));
  return traces::WriteJsonFile(traces::ToChromeTrace(pred.timeline, "predicted " + plan.policy),
                               File("timeline-predicted-" + plan.policy + ".json"));
}

Status Demo::WriteComparison(const Row& row) const {
  SSDTRAIN_ASSIGN_OR_RETURN(analysis::Comparison cmp,
                            analysis::Compare(row.predicted, row.measured));
  std::ofstream csv(File("compare-" + row.policy + ".csv"));
  analysis::WriteCsv(cmp, csv);
  return Status::Ok();
}

Result<exec::ReplayOptions> Demo::ReplayOptions() {
  if (!device_) {
    exec::DeviceOptions d;
    d.capacity_bytes = static_cast<int64_t>(hw_.gpu.memory_GiB * 1024 * 1024 * 1024);
    std::string picked;
    SSDTRAIN_ASSIGN_OR_RETURN(device_, exec::MakeDevice(Backend(o_.backend), d, &picked));
    Progress("replays run on " + picked);
  }
  exec::ReplayOptions ro;
  ro.dirs = {dir_};
  ro.device = device_.get();
  ro.ssd_bandwidth_GBps = o_.ssd_bandwidth_GBps;
  ro.allow_buffered_io = o_.allow_buffered_io;
  return ro;
}

Result<exec::ReplayResult> Demo::TimedReplay(const traces::Plan& plan, int round) {
  SSDTRAIN_ASSIGN_OR_RETURN(exec::ReplayOptions ro, ReplayOptions());
  ro.steps = o_.steps;
  ro.progress = [this](const std::string& line) { Progress("  " + line); };
  Progress(o_.rounds > 1
               ? fmt::format("round {}/{}: replaying {} for {} measured steps", round + 1,
                             o_.rounds, plan.policy, o_.steps)
               : fmt::format("replaying {} for {} measured steps", plan.policy, o_.steps));
  return exec::Replay(trace_, plan, ro, "plan-" + plan.policy);
}

}  // namespace ssdtrain::app::demo

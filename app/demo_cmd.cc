// ssdtrain demo: the main job end to end on the default small model —
// calibrate this machine (cached), plan under a memory budget that forces
// offloading, replay keep-everything, full recomputation, the paper's adaptive
// SSD offload and the chosen plan with verification, compare each with its
// prediction, and print one table. Its flags here; the Demo in app/demo.h.
#include <fmt/format.h>

#include <chrono>
#include <iostream>
#include <memory>

#include "app/cli_errors.h"
#include "app/command.h"
#include "app/demo.h"

namespace ssdtrain::app {
namespace demo {

int Demo::Run() {
  Status s = RunAll();
  if (!s.ok()) {
    RemoveReport();
    return ReportError("demo", s);
  }
  return 0;
}

void Demo::Progress(const std::string& line) const {
  const double sec =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::cerr << fmt::format("demo [{:6.1f} s] {}\n", sec, line);
}

}  // namespace demo

Verb AddDemoCommand(CLI::App& app) {
  auto o = std::make_shared<demo::DemoOptions>();
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
  cmd->add_flag("--keep-calibration", o->keep_calibration,
                "Predict from the first calibration even when keep measures more than 10% off "
                "it (by default the demo then calibrates once more and predicts again)");
  return Verb{cmd, [o] { return demo::Demo(*o).Run(); }};
}

}  // namespace ssdtrain::app

// planner_sweep: the planner's invariants (tests/planner_invariants.h) over
// every model config x every GPU hardware preset x every policy x GPU counts.
// scripts/planner-sweep.sh runs it whole; it prints every violation and exits
// 1 if there is one.
//   planner_sweep [--models DIR] [--hardware DIR] [--gpus 8,64,512,4096]
//                 [--policies a,b] [--max-seconds 10 (a search's CPU time)] [--defer-grad-sync]
//                 [--fp8 RECIPE] [--verbose]
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cmake/build_paths.h"
#include "tests/planner_invariants.h"

namespace {

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');) {
    if (!part.empty()) out.push_back(part);
  }
  return out;
}

std::vector<std::string> JsonFiles(const std::string& dir, bool gpu_only) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".json") continue;
    if (gpu_only && name.starts_with("cpu")) continue;  // the CPU backend's config
    out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

int Usage(const std::string& why) {
  std::cerr << "planner_sweep: " << why
            << "\nusage: planner_sweep [--models DIR] [--hardware DIR] [--gpus 8,64,512,4096] "
               "[--policies a,b] [--max-seconds S (CPU time a search)] [--defer-grad-sync] [--fp8 "
               "RECIPE] "
               "[--verbose]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string models = std::string(ssdtrain::ConfiguredSourceDir()) + "/configs/models";
  std::string hardware = std::string(ssdtrain::ConfiguredSourceDir()) + "/configs/hardware";
  std::vector<int64_t> gpus{8, 64, 512, 4096};
  std::vector<std::string> policies = ssdtrain::testing::AllPlannerPolicies();
  double max_seconds = 10;
  bool verbose = false;
  bool defer_grad_sync = false;
  std::string fp8;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--models") {
      models = value();
    } else if (a == "--hardware") {
      hardware = value();
    } else if (a == "--gpus") {
      gpus.clear();
      for (const std::string& g : Split(value())) gpus.push_back(std::atoll(g.c_str()));
    } else if (a == "--policies") {
      policies = Split(value());
    } else if (a == "--max-seconds") {
      max_seconds = std::atof(value().c_str());
    } else if (a == "--defer-grad-sync") {
      defer_grad_sync = true;
    } else if (a == "--fp8") {
      fp8 = value();
    } else if (a == "--verbose") {
      verbose = true;
    } else {
      return Usage("unknown argument " + a);
    }
  }
  if (gpus.empty() || policies.empty()) return Usage("nothing to sweep");
  int64_t cases = 0, failed = 0;
  const bool on_terminal = isatty(STDERR_FILENO) != 0;
  for (const std::string& hw : JsonFiles(hardware, true)) {
    for (const std::string& model : JsonFiles(models, false)) {
      for (int64_t g : gpus) {
        ssdtrain::testing::SweepCase c{model, hw, g, policies, max_seconds, defer_grad_sync, fp8};
        const ssdtrain::testing::SweepOutcome o = ssdtrain::testing::CheckPlannerInvariants(c);
        ++cases;
        if (verbose) {
          for (const std::string& l : o.lines) std::cout << l << "\n";
        }
        for (const std::string& v : o.violations) std::cout << "VIOLATION: " << v << "\n";
        if (!o.violations.empty()) ++failed;
        // On a terminal one line rewritten in place; into a file (or a log
        // beside stdout) one line each, so that the next case's lines start
        // on their own.
        std::cerr << fmt::format("{}planner_sweep: {} cases, {} with violations{}",
                                 on_terminal ? "\r" : "", cases, failed, on_terminal ? "" : "\n")
                  << std::flush;
      }
    }
  }
  if (on_terminal) std::cerr << "\n";
  std::cout << fmt::format("planner_sweep: {} passed, {} failed\n", cases - failed, failed);
  return failed == 0 ? 0 : 1;
}

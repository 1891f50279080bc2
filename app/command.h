// The `ssdtrain` binary's verbs. Each verb lives in its own app/<verb>_cmd.cc,
// registers its subcommand and flags on the CLI11 app, and returns the function
// that runs it. Errors reach the user through ReportError: one line on stderr
// naming the file, field and what was expected, and a non-zero exit.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::app {

using RunFn = std::function<int()>;

struct Verb {
  CLI::App* command = nullptr;
  RunFn run;
};

Verb AddTraceCommand(CLI::App& app);
Verb AddBenchIoCommand(CLI::App& app);
Verb AddCleanCommand(CLI::App& app);
Verb AddDemoCommand(CLI::App& app);
Verb AddCompareCommand(CLI::App& app);
Verb AddCalibrateCommand(CLI::App& app);
Verb AddReplayCommand(CLI::App& app);
Verb AddPlanCommand(CLI::App& app);
Verb AddSimulateCommand(CLI::App& app);
Verb AddExportCommand(CLI::App& app);

// Prints "ssdtrain <verb>: error: <message>" to stderr and returns the exit code (1).
int ReportError(const std::string& verb, const Status& status);

// A user's --trace (traces::ReadTrace), saying on stderr what an imported
// PyTorch execution trace could not tell ("ssdtrain <verb>: <path>: assumed: ...").
Result<traces::Trace> ReadUserTrace(const std::string& verb, const std::string& path);

}  // namespace ssdtrain::app

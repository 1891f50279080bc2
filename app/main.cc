// ssdtrain: plan activation offloading to NVMe SSDs, replay the plan, compare.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "app/cli_errors.h"
#include "app/command.h"

int main(int argc, char** argv) {
  using namespace ssdtrain::app;
  CLI::App app{"ssdtrain: plan and run activation offloading to NVMe SSDs for LLM training"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ssdtrain 0.1.0");
  std::vector<Verb> verbs;
  verbs.push_back(AddTraceCommand(app));
  verbs.push_back(AddBenchIoCommand(app));
  verbs.push_back(AddCleanCommand(app));
  verbs.push_back(AddDemoCommand(app));
  verbs.push_back(AddCompareCommand(app));
  verbs.push_back(AddCalibrateCommand(app));
  verbs.push_back(AddReplayCommand(app));
  verbs.push_back(AddPlanCommand(app));
  verbs.push_back(AddSimulateCommand(app));
  verbs.push_back(AddExportCommand(app));
  std::vector<std::string> names;
  for (const Verb& verb : verbs) names.push_back(verb.command->get_name());
  // The verb comes first: no verb, or a word that is none, is named with the
  // nearest verbs before CLI11 would say "A subcommand is required".
  const std::string first = argc > 1 ? argv[1] : "";
  if (first.empty() ||
      (first[0] != '-' && std::find(names.begin(), names.end(), first) == names.end())) {
    std::cerr << "ssdtrain: error: " << UnknownVerbMessage(first, names) << "\n";
    return 1;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::string verb;
    for (const Verb& v : verbs) {
      if (v.command->parsed()) verb = v.command->get_name();
    }
    // A flag before any verb ("ssdtrain --bogus"): the verb is what is missing.
    if (verb.empty() && dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
      std::cerr << "ssdtrain: error: " << UnknownVerbMessage("", names) << "\n";
      return 1;
    }
    return ReportParseError(app, e, verb);
  }
  for (const Verb& verb : verbs) {
    if (verb.command->parsed()) {
      try {
        return verb.run();
      } catch (const std::exception& e) {
        std::cerr << "ssdtrain " << verb.command->get_name() << ": internal error: " << e.what()
                  << "\n";
        return 1;
      }
    }
  }
  return 1;
}

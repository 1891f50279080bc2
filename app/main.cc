// ssdtrain: plan activation offloading to NVMe SSDs, replay the plan, compare.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <vector>

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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
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

// ssdtrain clean: removes the offload run directories (and their files) that
// processes killed without cleanup left in the given directories. Every
// offload engine does the same for its own directories when it starts.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "app/command.h"
#include "exec/offload_engine.h"

namespace ssdtrain::app {

Verb AddCleanCommand(CLI::App& app) {
  auto dirs = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand(
      "clean", "remove offload files left by runs that were killed (SIGKILL, a crash)");
  cmd->add_option("--dir", *dirs, "offload directory (repeat for several)")->required();
  return {cmd, [dirs] {
            for (const std::string& dir : *dirs) {
              std::vector<std::string> removed;
              Status s = exec::SweepDeadRuns(dir, &removed);
              for (const std::string& path : removed)
                std::cout << "clean: removed " << path << "\n";
              if (!s.ok()) return ReportError("clean", s);
              if (removed.empty()) std::cout << "clean: nothing to remove in " << dir << "\n";
            }
            return 0;
          }};
}

}  // namespace ssdtrain::app

#include <iostream>

#include "app/command.h"
#include "traces/io.h"

namespace ssdtrain::app {

int ReportError(const std::string& verb, const Status& status) {
  std::cerr << "ssdtrain " << verb << ": error: " << status.message() << "\n";
  return 1;
}

Result<traces::Trace> ReadUserTrace(const std::string& verb, const std::string& path) {
  std::vector<std::string> assumed;
  Result<traces::Trace> trace = traces::ReadTrace(path, &assumed);
  if (trace.ok() && !assumed.empty()) {
    std::cerr << "ssdtrain " << verb << ": " << path
              << ": a PyTorch execution trace, read as a trace; assumed:\n";
    for (const std::string& line : assumed) std::cerr << "  " << line << "\n";
  }
  return trace;
}

}  // namespace ssdtrain::app

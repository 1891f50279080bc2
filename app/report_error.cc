#include <iostream>

#include "app/command.h"

namespace ssdtrain::app {

int ReportError(const std::string& verb, const Status& status) {
  std::cerr << "ssdtrain " << verb << ": error: " << status.message() << "\n";
  return 1;
}

}  // namespace ssdtrain::app

// The fixture of the `ssdtrain plan` CLI tests (plan_cli_test.cc,
// plan_layout_cli_test.cc): one class for both files, so that gtest sees one
// PlanCli test suite.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli_util.h"
#include "traces/io.h"

namespace ssdtrain::testing {

class PlanCli : public CliTest {
 protected:
  PlanCli() : CliTest("plan-cli") {}
  // A copy of a shipped config with one field changed.
  std::string Edited(const std::string& path, const std::string& name,
                     const std::function<void(nlohmann::json&)>& edit) const {
    Result<nlohmann::json> j = traces::ReadJsonFile(path);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    edit(*j);
    EXPECT_TRUE(traces::WriteJsonFile(*j, File(name)).ok());
    return File(name);
  }
};

}  // namespace ssdtrain::testing

// The CLI's errors over every verb: a parser error carries the verb's prefix
// and exits 1, a mistyped verb is named with the nearest verbs, numeric flags
// state their range, every output path and offload directory is checked
// before any work, and a failure leaves no output file (README "Bad input").
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/cli_util.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::RunSsdtrain;
using testing::SourceDir;

class CliErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ssdtrain-cli-errors-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string File(const std::string& name) const { return (dir_ / name).string(); }
  static std::string Model(const std::string& name) {
    return SourceDir() + "/configs/models/" + name + ".json";
  }
  static std::string Hardware(const std::string& name) {
    return SourceDir() + "/configs/hardware/" + name + ".json";
  }
  fs::path dir_;
};

// Exit 1 and one line that starts "ssdtrain VERB: error: " and holds `what`.
void ExpectError(const CliResult& r, const std::string& verb, const std::string& what,
                 const std::string& args) {
  EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
  const std::string prefix = verb.empty() ? "ssdtrain: error: " : "ssdtrain " + verb + ": error: ";
  EXPECT_NE(r.output.find(prefix + what), std::string::npos)
      << args << "\nexpected: " << prefix << what << "\n" << r.output;
}

// CLI11's own errors (a missing required flag, an unknown flag, a value that
// does not convert) exited 104-114 without the prefix.
TEST_F(CliErrors, ParserErrorsCarryTheVerbsPrefixAndExitOne) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"plan", "--hardware is required"},
      {"replay --dir d -o r.json --bogus", "The following argument was not expected: --bogus"},
      {"compare --predicted a --measured b --worst many", "--worst: must be an integer >= 0, got many"},
      {"calibrate -o c.json", "--dir is required"},
      {"simulate --trace t --plan p --hardware h", "--output is required"},
  };
  for (const auto& [args, what] : cases) {
    const std::string verb = args.substr(0, args.find(' '));
    ExpectError(RunSsdtrain(args), verb, what, args);
  }
  // Help and the version still exit 0.
  for (const std::string args : {"--help", "plan --help", "replay --help", "--version"}) {
    EXPECT_EQ(RunSsdtrain(args).exit_code, 0) << args;
  }
}

// `ssdtrain plna` said "A subcommand is required".
TEST_F(CliErrors, AMistypedVerbIsNamedWithTheNearestVerbs) {
  const std::pair<std::string, std::string> cases[] = {
      {"plna --model x", "unknown verb \"plna\"; did you mean plan?"},
      {"replya", "unknown verb \"replya\"; did you mean replay?"},
      {"bench", "unknown verb \"bench\"; did you mean bench-io?"},
      {"simulat", "unknown verb \"simulat\"; did you mean simulate?"},
      {"xyzzy", "unknown verb \"xyzzy\" (the verbs: trace, "},
  };
  for (const auto& [args, what] : cases) ExpectError(RunSsdtrain(args), "", what, args);
  // No verb at all: the verbs are listed.
  for (const std::string args : {"", "--bogus"}) {
    CliResult r = RunSsdtrain(args);
    ExpectError(r, "", "give a verb: trace, ", args);
    for (const char* verb : {"plan", "replay", "calibrate", "compare", "demo", "simulate",
                             "bench-io", "clean"}) {
      EXPECT_NE(r.output.find(verb), std::string::npos) << verb << "\n" << r.output;
    }
  }
}

// Each numeric flag of each verb refuses a value out of its range, saying
// the range and the value; before, --micro-batch -1 printed a 309-digit bound,
// --global-batch -8 was ignored and compare --worst -3 listed every op.
TEST_F(CliErrors, NumericFlagsOutOfRangeAreRefusedStatingTheRange) {
  const std::string plan = "plan --model " + Model("tiny-gpt") + " --hardware " +
                           Hardware("cpu-local") + " -o " + File("p.json") + " ";
  const std::string replay = "replay --policy keep --model " + Model("tiny-gpt") + " --dir " +
                             dir_.string() + " -o " + File("r.json") + " ";
  const std::string calibrate = "calibrate --dir " + dir_.string() + " -o " + File("c.json") + " ";
  const std::string trace = "trace --model " + Model("tiny-gpt") + " -o " + File("t.json") + " ";
  const std::string demo = "demo --report " + File("report") + " ";
  const std::string compare = "compare --predicted a --measured b ";
  const std::string bench = "bench-io --dir " + dir_.string() + " ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {plan + "--micro-batch -1", "--micro-batch: must be >= 1, got -1"},
      {plan + "--micro-batch 0", "--micro-batch: must be >= 1, got 0"},
      {plan + "--global-batch -8", "--global-batch: must be >= 1, got -8"},
      {plan + "--gpus 0", "--gpus: must be >= 1, got 0"},
      {plan + "--seq-len 0", "--seq-len: must be >= 1, got 0"},
      {plan + "--tp 0", "--tp: must be >= 1, got 0"},
      {plan + "--pp -2", "--pp: must be >= 1, got -2"},
      {plan + "--dp 0", "--dp: must be >= 1, got 0"},
      {plan + "--num-micro-batches 0", "--num-micro-batches: must be >= 1, got 0"},
      {plan + "--zero-stage 2", "--zero-stage: must be 0 or 1, got 2"},
      {plan + "--memory-budget -1", "--memory-budget: must be >= 0"},
      {compare + "--worst -3", "--worst: must be >= 0, got -3"},
      {replay + "--steps 0", "--steps: must be >= 1, got 0"},
      {replay + "--ssd-bandwidth -1", "--ssd-bandwidth: must be >= 0, got -1"},
      {replay + "--device-memory -4", "--device-memory: must be >= 0, got -4"},
      {replay + "--staging-memory 0", "--staging-memory: must be > 0, got 0"},
      {replay + "--cpu-threads 0", "--cpu-threads: must be >= 1, got 0"},
      {replay + "--cuda-device -1", "--cuda-device: must be >= 0, got -1"},
      {calibrate + "--micro-batch 2 --micro-batch 0", "--micro-batch: must be >= 1, got 0"},
      {calibrate + "--block-size 0", "--block-size: must be >= 1, got 0"},
      {calibrate + "--queue-depth 0", "--queue-depth: must be >= 1, got 0"},
      {calibrate + "--io-size -1", "--io-size: must be >= 1, got -1"},
      {calibrate + "--repeats 0", "--repeats: must be >= 1, got 0"},
      {calibrate + "--device-memory -1", "--device-memory: must be >= 0, got -1"},
      {calibrate + "--cuda-device -1", "--cuda-device: must be >= 0, got -1"},
      {trace + "--stage -1", "--stage: must be >= 0, got -1"},
      {trace + "--micro-batch 0", "--micro-batch: must be >= 1, got 0"},
      {trace + "--seq-len -5", "--seq-len: must be >= 1, got -5"},
      {trace + "--tp 0", "--tp: must be >= 1, got 0"},
      {trace + "--pp 0", "--pp: must be >= 1, got 0"},
      {trace + "--dp 0", "--dp: must be >= 1, got 0"},
      {trace + "--zero-stage -1", "--zero-stage: must be 0 or 1, got -1"},
      {demo + "--steps 0", "--steps: must be >= 1, got 0"},
      {demo + "--rounds -1", "--rounds: must be >= 1, got -1"},
      {demo + "--ssd-bandwidth -0.5", "--ssd-bandwidth: must be >= 0, got -0.5"},
      {bench + "--queue-depth 0", "--queue-depth: must be >= 1, got 0"},
      {bench + "--size 0", "--size: must be >= 1 byte, got 0"},
      {bench + "--block-size 0k", "--block-size: must be >= 1 byte, got 0k"},
  };
  for (const auto& [args, what] : cases) {
    const std::string verb = args.substr(0, args.find(' '));
    CliResult r = RunSsdtrain(args);
    ExpectError(r, verb, what, args);
    EXPECT_EQ(r.output.find("000000"), std::string::npos) << args << "\n" << r.output;
  }
  EXPECT_TRUE(fs::is_empty(dir_)) << "a refused command wrote a file";
}

}  // namespace
}  // namespace ssdtrain

// The CLI's errors over every verb: a parser error carries the verb's prefix
// and exits 1, a mistyped verb is named with the nearest verbs, numeric flags
// state their range, every output path and offload directory is checked
// before any work, and a failure leaves no output file (README "Bad input").
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "app/outputs.h"
#include "tests/cli_util.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::RunSsdtrain;
using testing::SourceDir;

class CliErrors : public testing::CliTest {
 protected:
  CliErrors() : CliTest("cli-errors") {}
};

// Exit 1 and one line that starts "ssdtrain VERB: error: " and holds `what`.
void ExpectError(const CliResult& r, const std::string& verb, const std::string& what,
                 const std::string& args) {
  EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
  const std::string prefix = verb.empty() ? "ssdtrain: error: " : "ssdtrain " + verb + ": error: ";
  EXPECT_NE(r.output.find(prefix + what), std::string::npos)
      << args << "\nexpected: " << prefix << what << "\n"
      << r.output;
}

// The error is the only line: nothing was searched, measured or replayed first.
void ExpectErrorBeforeWork(const CliResult& r, const std::string& verb, const std::string& what,
                           const std::string& args) {
  ExpectError(r, verb, what, args);
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << "\n" << r.output;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// CLI11's own errors (a missing required flag, an unknown flag, a value that
// does not convert) exited 104-114 without the prefix.
TEST_F(CliErrors, ParserErrorsCarryTheVerbsPrefixAndExitOne) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"plan", "--hardware is required"},
      {"replay --dir d -o r.json --bogus", "The following argument was not expected: --bogus"},
      {"compare --prediction a --measured b --worst many",
       "--worst: must be an integer >= 0, got many"},
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
    for (const char* verb :
         {"plan", "replay", "calibrate", "compare", "demo", "simulate", "bench-io", "clean"}) {
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
  const std::string compare = "compare --prediction a --measured b ";
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
      {plan + "--zero-stage 4", "--zero-stage: must be from 0 to 3, got 4"},
      {plan + "--fp8 e4m3",
       "--fp8: must be delayed, current, blockwise or mxfp8, or off, got e4m3"},
      {trace + "--fp8 hybrid",
       "--fp8: must be delayed, current, blockwise or mxfp8, or off, got hybrid"},
      {plan + "--dp-shard 0", "--dp-shard: must be >= 1, got 0"},
      {plan + "--memory-budget -1", "--memory-budget: must be >= 0"},
      {compare + "--worst -3", "--worst: must be >= 0, got -3"},
      {replay + "--steps 0", "--steps: must be >= 1, got 0"},
      {replay + "--ssd-bandwidth -1", "--ssd-bandwidth: must be >= 0, got -1"},
      {replay + "--device-memory -4", "--device-memory: must be >= 0, got -4"},
      {replay + "--staging-memory 0", "--staging-memory: must be > 0, got 0"},
      {replay + "--cpu-threads 0", "--cpu-threads: must be >= 1, got 0"},
      {replay + "--cuda-device -1", "--cuda-device: must be >= 0, got -1"},
      {calibrate + "--micro-batch 2 --micro-batch 0", "--micro-batch: must be >= 1, got 0"},
      {calibrate + "--block-size 0", "--block-size: must be >= 1 byte, got 0"},
      {calibrate + "--queue-depth 0", "--queue-depth: must be >= 1, got 0"},
      {calibrate + "--io-size -1", "--io-size: must be a size such as 4096, 64k, 4M or 1G, got -1"},
      {calibrate + "--repeats 0", "--repeats: must be >= 1, got 0"},
      {calibrate + "--device-memory -1", "--device-memory: must be >= 0, got -1"},
      {calibrate + "--cuda-device -1", "--cuda-device: must be >= 0, got -1"},
      {trace + "--stage -1", "--stage: must be >= 0, got -1"},
      {trace + "--micro-batch 0", "--micro-batch: must be >= 1, got 0"},
      {trace + "--seq-len -5", "--seq-len: must be >= 1, got -5"},
      {trace + "--tp 0", "--tp: must be >= 1, got 0"},
      {trace + "--pp 0", "--pp: must be >= 1, got 0"},
      {trace + "--dp 0", "--dp: must be >= 1, got 0"},
      {trace + "--zero-stage -1", "--zero-stage: must be from 0 to 3, got -1"},
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

// Every verb with an output checks each output path (and its offload
// directory) first: before, `replay -o /nonexist/x.json` replayed the whole
// step, `replay --timeline /nonexist/t.json` wrote the run file and then
// failed, `calibrate --dir nope` measured for seconds, `plan -o ok.json
// --prediction /nonexist/p.json` left ok.json, and `demo --dir nope` left its
// report folder.
TEST_F(CliErrors, OutputPathsAndDirectoriesAreCheckedBeforeAnyWork) {
  const std::string ok = File("ok.json");
  // A folder inside the test's own, so that nothing outside it is ever made.
  const std::string bad = File("missing") + "/out.json";
  const std::string missing = "its folder " + File("missing") + " does not exist";
  const std::string model = Model("tiny-gpt");
  const std::string replay =
      "replay --policy keep --backend cpu --steps 1 --model " + model + " --dir " + File("off");
  fs::create_directories(File("off"));
  fs::create_directories(File("existing-folder"));
  struct Case {
    std::string args, what;
  };
  const std::vector<Case> cases = {
      {"trace --model " + model + " -o " + bad, "-o " + bad + ": cannot be written: " + missing},
      {"trace --model " + model + " -o " + File("existing-folder"),
       "-o " + File("existing-folder") + ": is a folder"},
      {"plan --model " + model + " --hardware " + Hardware("cpu-local") + " -o " + ok +
           " --prediction " + bad,
       "--prediction " + bad + ": cannot be written: " + missing},
      {"plan --model " + model + " --hardware " + Hardware("cpu-local") + " -o " + ok +
           " --timeline " + bad,
       "--timeline " + bad + ": cannot be written"},
      {"plan --model " + model + " --hardware " + Hardware("cpu-local") + " -o " + ok +
           " --prediction " + ok,
       "-o and --prediction name the same file"},
      {"simulate --trace t.json --plan p.json --hardware h.json -o " + ok + " --timeline " + bad,
       "--timeline " + bad + ": cannot be written"},
      {replay + " -o " + bad, "-o " + bad + ": cannot be written"},
      {replay + " -o " + ok + " --timeline " + bad, "--timeline " + bad + ": cannot be written"},
      {"replay --policy keep --model " + model + " --dir " + File("nope") + " -o " + ok,
       "offload directory " + File("nope") + " cannot be used"},
      {"calibrate --dir " + File("off") + " -o " + bad, "-o " + bad + ": cannot be written"},
      {"calibrate --dir " + File("nope") + " -o " + ok,
       "offload directory " + File("nope") + " cannot be used"},
      {"compare --prediction p.json --measured m.json --csv " + bad,
       "--csv " + bad + ": cannot be written"},
      {"demo --report " + File("report") + " --summary " + bad,
       "--summary " + bad + ": cannot be written"},
      {"demo --report " + File("report") + " --dir " + File("nope"),
       "offload directory " + File("nope") + " cannot be used"},
      {"demo --report " + File("missing") + "/report --dir " + File("off"),
       "--report " + File("missing") + "/report: cannot be written: " + missing},
      {"bench-io --dir " + File("nope"), "offload directory " + File("nope") + " cannot be used"},
      {"clean --dir " + File("nope"), "offload directory " + File("nope") + " cannot be read"},
  };
  for (const Case& c : cases) {
    const std::string verb = c.args.substr(0, c.args.find(' '));
    ExpectErrorBeforeWork(RunSsdtrain(c.args), verb, c.what, c.args);
    EXPECT_FALSE(fs::exists(ok)) << c.args;
    EXPECT_FALSE(fs::exists(File("report"))) << c.args;
  }
  // Nothing but the folders made above.
  std::vector<std::string> left;
  for (const auto& e : fs::recursive_directory_iterator(dir_)) left.push_back(e.path().string());
  EXPECT_EQ(left.size(), 2u) << ::testing::PrintToString(left);
}

// A step that fails after the checks leaves no output either: the files are
// written together at the end (app/outputs.h), and a failed demo removes its
// report folder.
TEST_F(CliErrors, AFailingLaterStepLeavesNoOutputFile) {
  const std::string model = Model("tiny-gpt");
  const std::string hw = Hardware("cpu-local");
  ASSERT_EQ(RunSsdtrain("trace --model " + model + " -o " + File("t.json")).exit_code, 0);
  ASSERT_EQ(RunSsdtrain("plan --trace " + File("t.json") + " --hardware " + hw +
                        " --policy keep -o " + File("p.json"))
                .exit_code,
            0);
  fs::create_directories(File("off"));
  const std::vector<std::string> outputs = {"o1.json", "o2.json", "o3.json", "o.csv", "report"};
  struct Case {
    std::string args, what;
  };
  const std::vector<Case> cases = {
      {"trace --model " + model + " --stage 3 -o " + File("o1.json"), "--stage"},
      // Does not fit: the search fails after the outputs were checked.
      {"plan --model " + model + " --hardware " + hw + " --policy keep --memory-budget 0.001 -o " +
           File("o1.json") + " --prediction " + File("o2.json") + " --timeline " + File("o3.json"),
       "does not fit"},
      {"simulate --trace " + File("t.json") + " --plan " + File("p.json") + " --hardware " +
           File("missing-hw.json") + " -o " + File("o1.json") + " --timeline " + File("o2.json"),
       "missing-hw.json"},
      {"replay --policy keep --backend cpu --steps 1 --model " + model + " --dir " + File("off") +
           " --device-memory 0.01 -o " + File("o1.json") + " --timeline " + File("o2.json"),
       "raise --device-memory"},
      {"calibrate --dir " + File("off") + " --base " + File("missing-hw.json") + " -o " +
           File("o1.json"),
       "missing-hw.json"},
      // A plan is not a step report: refused after the --csv path was checked.
      {"compare --prediction " + File("p.json") + " --measured " + File("p.json") + " --csv " +
           File("o.csv"),
       "expected \"ssdtrain-report\""},
      {"demo --report " + File("report") + " --dir " + File("off") + " --model " +
           File("missing-model.json") + " --summary " + File("o1.json"),
       "missing-model.json"},
  };
  for (const Case& c : cases) {
    const std::string verb = c.args.substr(0, c.args.find(' '));
    CliResult r = RunSsdtrain(c.args);
    ExpectError(r, verb, "", c.args);
    EXPECT_NE(r.output.find(c.what), std::string::npos) << c.args << "\n" << r.output;
    for (const std::string& name : outputs) {
      EXPECT_FALSE(fs::exists(File(name))) << c.args << ": " << name;
    }
    EXPECT_TRUE(fs::is_empty(File("off"))) << c.args;
  }
}

// Outputs::Commit writes every file beside its target first: when one cannot
// be written, none is placed, and a file already at a target is left as it was.
TEST_F(CliErrors, OutputsAreWrittenAllOrNone) {
  const std::string first = File("first.json");
  std::ofstream(first) << "before\n";
  fs::create_directories(File("gone"));
  app::Outputs outputs;
  outputs.Add("-o", first);
  outputs.Add("--timeline", File("gone/second.json"));
  outputs.Add("--csv", File("third.csv"));
  ASSERT_TRUE(outputs.Check().ok());
  fs::remove(File("gone"));  // between the check and the write
  outputs.Set("-o", nlohmann::json{{"a", 1}});
  outputs.Set("--timeline", nlohmann::json{{"b", 2}});
  outputs.SetText("--csv", "x,y\n");
  Status s = outputs.Commit();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--timeline " + File("gone/second.json")), std::string::npos)
      << s.message();
  EXPECT_EQ(ReadAll(first), "before\n");
  EXPECT_FALSE(fs::exists(File("third.csv")));
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir_)) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"first.json"});

  fs::create_directories(File("gone"));
  ASSERT_TRUE(outputs.Commit().ok());
  EXPECT_EQ(nlohmann::json::parse(ReadAll(first)), (nlohmann::json{{"a", 1}}));
  EXPECT_EQ(ReadAll(File("third.csv")), "x,y\n");
}

// A dp 2 plan replayed without mpirun ran as dp 1 and said nothing until
// compare; now it is refused, naming the ranks to start, unless --single-rank.
TEST_F(CliErrors, APlanOfSeveralRanksIsRefusedWithoutMpirun) {
  const std::string model = Model("tiny-gpt");
  ASSERT_EQ(RunSsdtrain("plan --model " + model + " --hardware " + Hardware("cpu-local") +
                        " --gpus 2 --dp 2 --micro-batch 1 --seq-len 128 --num-micro-batches 1 "
                        "--policy keep -o " +
                        File("plan.json"))
                .exit_code,
            0);
  fs::create_directories(File("off"));
  const std::string replay = "replay --model " + model + " --plan " + File("plan.json") +
                             " --dir " + File("off") + " --backend cpu --steps 1 -o " +
                             File("run.json");
  CliResult r = RunSsdtrain(replay);
  ExpectErrorBeforeWork(
      r, "replay",
      File("plan.json") + ": its layout runs on tp × cp × pp × dp = 1 × 1 × 1 × 2 = 2 ranks",
      replay);
  EXPECT_NE(r.output.find("run it under `mpirun -np 2 ssdtrain replay ...`"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(File("run.json")));
  r = RunSsdtrain(replay + " --single-rank");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(File("run.json")));
}

bool OnTmpfs(const std::string& path) {
  struct statfs fs {};
  return ::statfs(path.c_str(), &fs) == 0 &&
         (static_cast<unsigned long>(fs.f_type) & 0xffffffffUL) == TMPFS_MAGIC;
}

// tmpfs takes O_DIRECT since Linux 6.6, so `--dir /dev/shm` was measured as a
// drive (direct_io: true). Every verb that opens offload files refuses it
// unless --allow-buffered-io, and then says buffered I/O.
TEST_F(CliErrors, ADirectoryInMemoryIsRefusedUnlessBufferedIoIsAllowed) {
  if (!OnTmpfs("/dev/shm")) GTEST_SKIP() << "/dev/shm is not a tmpfs here";
  const std::string shm = "/dev/shm/ssdtrain-cli-errors-" + std::to_string(::getpid());
  fs::create_directories(shm);
  const std::string model = Model("tiny-gpt");
  const std::string refusal =
      "offload directory " + shm + " is on tmpfs, which keeps its files in memory";
  const std::vector<std::string> cases = {
      "replay --policy keep --backend cpu --steps 1 --model " + model + " --dir " + shm + " -o " +
          File("run.json"),
      "calibrate --dir " + shm + " -o " + File("hw.json"),
      "bench-io --size 1M --dir " + shm,
      "demo --report " + File("report") + " --dir " + shm,
  };
  for (const std::string& args : cases) {
    const std::string verb = args.substr(0, args.find(' '));
    ExpectErrorBeforeWork(RunSsdtrain(args), verb, refusal, args);
    EXPECT_NE(RunSsdtrain(args).output.find("--allow-buffered-io"), std::string::npos) << args;
  }
  CliResult r =
      RunSsdtrain("bench-io --size 1M --block-size 64k --dir " + shm + " --allow-buffered-io");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("buffered I/O: these figures are the page cache's"), std::string::npos)
      << r.output;
  r = RunSsdtrain(cases[0] + " --allow-buffered-io");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(ReadAll(File("run.json")).find("\"direct_io\": false"), std::string::npos);
  EXPECT_TRUE(fs::is_empty(shm));
  fs::remove_all(shm);
}

}  // namespace
}  // namespace ssdtrain

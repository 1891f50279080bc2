// scripts/planner-sweep-queue.sh on a small selection with this build's
// planner_sweep: chunks run once and are skipped when done, headers name the
// binary's commit, progress and --summary count the selection only, a recorded
// violation fails the summary, and bad use exits 2 naming the option.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/cli_util.h"

namespace ssdtrain {
namespace {

using testing::CliResult;
using testing::Shell;
using testing::SourceDir;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class PlannerSweepQueue : public testing::CliTest {
 protected:
  PlannerSweepQueue() : CliTest("sweep-queue") {}
  CliResult Queue(const std::string& args) const {
    return Shell(SourceDir() + "/scripts/planner-sweep-queue.sh " + File("out") + " " + args);
  }
  static std::string Binary() { return std::string("--binary ") + SSDTRAIN_PLANNER_SWEEP; }
};

TEST_F(PlannerSweepQueue, RunsEachChunkOnceWithItsBinarysCommit) {
  const std::string selection = " --only-models tiny-gpt,small-gpt --only-presets dgx-h100";
  CliResult first =
      Queue("--gpus 64 --workers 2 --nice 0 " + Binary() + " --commit test0123" + selection);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("2 of 2 chunks done"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("chunks done: 2 of 2"), std::string::npos) << first.output;
  const std::string file = Slurp(File("out/dgx-h100.txt"));
  EXPECT_EQ(Count(file, "## tiny-gpt on 64 x dgx-h100: planner_sweep at test0123, "), 1) << file;
  EXPECT_EQ(Count(file, "## small-gpt on 64 x dgx-h100: planner_sweep at test0123, "), 1) << file;
  EXPECT_EQ(Count(file, "planner_sweep: 1 passed, 0 failed"), 2) << file;
  EXPECT_EQ(Count(file, "VIOLATION"), 0) << file;

  // Done chunks are skipped: nothing appended.
  CliResult again = Queue("--gpus 64 --nice 0 " + Binary() + " --commit test0123" + selection);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(Slurp(File("out/dgx-h100.txt")), file);

  // The summary of a part of the selection counts that part only.
  CliResult part = Queue("--summary --only-models tiny-gpt --only-presets dgx-h100");
  ASSERT_EQ(part.exit_code, 0) << part.output;
  EXPECT_NE(part.output.find("chunks done: 1 of 1\ncases: 1 passed, 0 failed\nsearches printed: 9"),
            std::string::npos)
      << part.output;
}

TEST_F(PlannerSweepQueue, SummaryFailsOnARecordedViolation) {
  std::filesystem::create_directories(File("out"));
  std::ofstream(File("out/dgx-h100.txt"))
      << "## tiny-gpt on 64 x dgx-h100: planner_sweep at abc, 2026-12-06 00:00 UTC, 1 s wall, "
         "nice 0\n"
      << "VIOLATION: tiny-gpt on 64 x dgx-h100: auto (1 tokens/s) is slower than keep (2)\n"
      << "planner_sweep: 0 passed, 1 failed\n"
      << "## small-gpt on 64 x dgx-b200: planner_sweep at abc, 2026-12-06 00:00 UTC, 1 s wall, "
         "nice 0\n"
      << "planner_sweep: 1 passed, 0 failed\n";
  CliResult r = Queue("--summary --only-models tiny-gpt,small-gpt --only-presets dgx-h100");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("chunks done: 1 of 2\ncases: 0 passed, 1 failed"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("violations: 1 (over memory 0, auto slower 1, over the time limit 0)"),
            std::string::npos)
      << r.output;
}

TEST_F(PlannerSweepQueue, RefusesBadUseNamingTheOption) {
  for (const auto& [args, message] :
       {std::pair<std::string, std::string>{"--gpus 64 " + Binary(), "--binary needs --commit REV"},
        {"--gpus 64 --commit abc", "--commit goes with --binary"},
        {"--gpus 64 " + Binary() + " --commit 'a b'", "--commit: expected a revision"},
        {"--gpus 64 --only-presets nope", "--only-presets: no GPU preset named nope"},
        {"--gpus 64 --only-models nope", "--only-models: no model config named nope"},
        {"--workers 2", "--gpus needs one GPU count"},
        {"--gpus 64 --frobnicate", "unknown argument --frobnicate"}}) {
    CliResult r = Queue(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("planner-sweep-queue: " + message), std::string::npos) << args << "\n"
                                                                                   << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(File("out/dgx-h100.txt")));
}

}  // namespace
}  // namespace ssdtrain

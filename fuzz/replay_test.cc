// Replays every committed fuzz input through its target's entry point, in every
// build (gcc Release included): the seed corpora of fuzz/corpus/<target>/ and the
// inputs that once crashed a target, fuzz/regressions/<target>/. An entry point
// aborts on a broken reader contract and the sanitizer builds report memory
// errors, so a regression fails this test.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "cmake/build_paths.h"
#include "fuzz/fuzz_targets.h"

namespace ssdtrain::fuzz {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> FilesIn(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) return files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());  // a fixed order, so a failure repeats
  return files;
}

std::string ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class FuzzReplay : public testing::TestWithParam<Target> {};

}  // namespace

// Names the target in test output (gtest would print the struct's bytes).
void PrintTo(const Target& target, std::ostream* os) { *os << target.name; }

namespace {

// Every target has a seed corpus (a missing folder would make the replay vacuous).
TEST_P(FuzzReplay, SeedCorpusIsPresent) {
  const fs::path dir = fs::path(ConfiguredSourceDir()) / "fuzz" / "corpus" / GetParam().name;
  EXPECT_FALSE(FilesIn(dir).empty()) << dir << " has no seed inputs";
}

// Each input returns normally (an entry point aborts the process on a failure).
TEST_P(FuzzReplay, EveryCommittedInputRunsCleanly) {
  const fs::path root = fs::path(ConfiguredSourceDir()) / "fuzz";
  for (const char* folder : {"corpus", "regressions"}) {
    for (const fs::path& file : FilesIn(root / folder / GetParam().name)) {
      SCOPED_TRACE(file.string());
      const std::string bytes = ReadBytes(file);
      GetParam().entry(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzReplay, testing::ValuesIn(Targets()),
                         [](const testing::TestParamInfo<Target>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace ssdtrain::fuzz

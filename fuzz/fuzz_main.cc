// One libFuzzer program per target (fuzz/CMakeLists.txt sets SSDTRAIN_FUZZ_TARGET
// to the target's name); built only with SSDTRAIN_FUZZ=ON and clang.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_targets.h"

namespace {

ssdtrain::fuzz::EntryPoint FindEntry() {
  for (const ssdtrain::fuzz::Target& t : ssdtrain::fuzz::Targets()) {
    if (t.name == SSDTRAIN_FUZZ_TARGET) return t.entry;
  }
  std::fprintf(stderr, "no fuzz target named %s\n", SSDTRAIN_FUZZ_TARGET);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ssdtrain::fuzz::EntryPoint entry = FindEntry();
  entry(data, size);
  return 0;
}

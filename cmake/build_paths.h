// Where this build was configured: the checkout it compiles and its build
// folder, for the tests, benchmarks and tools that read the checkout's configs
// or run the build's programs (and the `ssdtrain` binary's fallback for its
// configs when it is not installed, app/self_path.cc).
//
// Defined in one source CMake writes into the build folder
// (cmake/build_paths.cc.in, target ssdtrain::build_paths), not passed as -D
// flags: a flag holding the checkout's path is on the command line of every
// file of its target, so a second clone (CI's) missed the compiler cache on all
// of them. Now only that one source differs between clones.
#pragma once

namespace ssdtrain {

// The checkout's root (CMake's PROJECT_SOURCE_DIR), without a trailing slash.
const char* ConfiguredSourceDir();
// The build folder (PROJECT_BINARY_DIR), without a trailing slash.
const char* ConfiguredBinaryDir();

}  // namespace ssdtrain

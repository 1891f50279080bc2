// The CMake CUDA decision (cmake/Dependencies.cmake), on this very project
// configured in temporary folders: AUTO without cuBLAS builds without CUDA and
// says why, ON without it stops, and a CUDA build links one CUDA runtime (the
// shared one). cuBLAS is hidden with CMake's own switch,
// CMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit, which makes find_package(CUDAToolkit)
// find nothing, as on a machine whose nvcc comes without the libraries.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/cli_util.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::Shell;

bool HaveNvcc() {
  return fs::exists("/usr/local/cuda/bin/nvcc") || Shell("command -v nvcc").exit_code == 0;
}

class CmakeCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ssdtrain-cmake-cuda-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Configures the project (no tests, no benchmarks: only what the decision needs).
  CliResult Configure(const std::string& name, const std::string& flags) const {
    return Shell(std::string(SSDTRAIN_CMAKE) + " -S " + testing::SourceDir() + " -B " +
                 (dir_ / name).string() +
                 " -G Ninja -DSSDTRAIN_BUILD_TESTS=OFF -DSSDTRAIN_BUILD_BENCHMARKS=OFF " + flags);
  }
  fs::path dir_;
};

TEST_F(CmakeCuda, AutoWithoutCublasBuildsWithoutCudaAndSaysWhy) {
  const CliResult r =
      Configure("auto", "-DSSDTRAIN_CUDA=AUTO -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=TRUE");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ssdtrain: CUDA backend OFF"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(HaveNvcc() ? "but not the CUDA runtime and cuBLAS libraries"
                                     : "no CUDA compiler (nvcc) was found"),
            std::string::npos)
      << r.output;
}

TEST_F(CmakeCuda, OnWithoutCublasStopsNamingWhatIsMissing) {
  const CliResult r =
      Configure("on", "-DSSDTRAIN_CUDA=ON -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=TRUE");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("SSDTRAIN_CUDA=ON but"), std::string::npos) << r.output;
}

TEST_F(CmakeCuda, CudaBuildLinksOnlyTheSharedCudaRuntime) {
  if (!HaveNvcc()) GTEST_SKIP() << "no nvcc here";
  const CliResult r = Configure("cuda", "-DSSDTRAIN_CUDA=ON");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ssdtrain: CUDA backend ON"), std::string::npos) << r.output;
  // The link line of the ssdtrain binary: CUDA::cudart (libcudart.so), and not
  // also the static runtime CMake adds to targets with CUDA sources by default.
  std::ifstream ninja(dir_ / "cuda" / "build.ninja");
  std::stringstream text;
  text << ninja.rdbuf();
  const std::string all = text.str();
  const size_t target = all.find("build app/ssdtrain:");
  ASSERT_NE(target, std::string::npos);
  const size_t libs = all.find("LINK_LIBRARIES =", target);
  ASSERT_NE(libs, std::string::npos);
  const std::string line = all.substr(libs, all.find('\n', libs) - libs);
  EXPECT_NE(line.find("libcudart.so"), std::string::npos) << line;
  EXPECT_EQ(line.find("cudart_static"), std::string::npos) << line;
  // cuBLAS is loaded by the first CUDA device (exec/detail/cublas_api.h),
  // never linked: its initialisers would run in every process.
  EXPECT_EQ(line.find("cublas"), std::string::npos) << line;
}

}  // namespace
}  // namespace ssdtrain

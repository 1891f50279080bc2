// The run-time cuBLAS loader (exec/detail/cublas_api.h), on the toolkit's own
// library: it loads without a GPU. Built only with CUDA.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "exec/detail/cublas_api.h"

namespace ssdtrain::exec::cuda_impl {
namespace {

std::string Maps() {
  std::ifstream in("/proc/self/maps");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Each test is its own process (gtest_discover_tests), so this one sees a
// process that linked the CUDA backend and has made no device.
TEST(CublasLoader, NothingLoadsItUntilACudaDeviceIsMade) {
  EXPECT_EQ(Maps().find("libcublas"), std::string::npos);
  EXPECT_EQ(CublasIfLoaded(), nullptr);
}

TEST(CublasLoader, LoadsTheToolkitsLibraryWithEveryEntryPoint) {
  const Result<const CublasApi*> api = Cublas();
  ASSERT_TRUE(api.ok()) << api.status().message();
  const CublasApi& a = **api;
  EXPECT_NE(a.Create, nullptr);
  EXPECT_NE(a.Destroy, nullptr);
  EXPECT_NE(a.SetStream, nullptr);
  EXPECT_NE(a.SetMathMode, nullptr);
  EXPECT_NE(a.GemmStridedBatchedEx, nullptr);
  EXPECT_EQ(CublasIfLoaded(), *api);
  // A call into the library that needs no GPU.
  EXPECT_STREQ(a.GetStatusName(CUBLAS_STATUS_NOT_INITIALIZED), "CUBLAS_STATUS_NOT_INITIALIZED");
  EXPECT_NE(Maps().find(CublasSoname()), std::string::npos) << "loaded by its soname";
  // Once per process: the same table again.
  const Result<const CublasApi*> again = Cublas();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *api);
}

TEST(CublasLoader, AMissingLibraryIsUnavailableNamingIt) {
  const Result<CublasApi> api = LoadCublas("/nonexistent/libcublas.so.13");
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), Status::Code::kUnavailable);
  EXPECT_NE(api.status().message().find("/nonexistent/libcublas.so.13"), std::string::npos)
      << api.status().message();
}

TEST(CublasLoader, ALibraryWithoutCublasSymbolsNamesTheFirstMissing) {
  // The CUDA runtime: a real library, loaded already, with none of cuBLAS's.
  const std::string cudart = "libcudart.so." + std::to_string(CUDART_VERSION / 1000);
  const Result<CublasApi> api = LoadCublas(cudart);
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().message(), cudart + " has no cublasCreate_v2");
}

}  // namespace
}  // namespace ssdtrain::exec::cuda_impl

#include "exec/detail/cpu_affinity.h"

#include <gtest/gtest.h>

#include <thread>

#include "exec/cpu_device.h"

namespace ssdtrain::exec::detail {
namespace {

TEST(SplitCores, ComputeTakesTheFirstCpusAndHelpersTheRest) {
  CoreSplit s = SplitCores({0, 1, 2, 3}, 1);
  EXPECT_EQ(s.compute, (std::vector<int>{0}));
  EXPECT_EQ(s.helpers, (std::vector<int>{1, 2, 3}));
  s = SplitCores({2, 5, 7}, 2);
  EXPECT_EQ(s.compute, (std::vector<int>{2, 5}));
  EXPECT_EQ(s.helpers, (std::vector<int>{7}));
}

TEST(SplitCores, NoSplitWithoutACpuLeftForHelpers) {
  EXPECT_TRUE(SplitCores({0}, 1).compute.empty());
  EXPECT_TRUE(SplitCores({0, 1}, 2).compute.empty());
  EXPECT_TRUE(SplitCores({0, 1}, 0).compute.empty());
}

TEST(FormatCpus, RangesAndLists) {
  EXPECT_EQ(FormatCpus({0}), "0");
  EXPECT_EQ(FormatCpus({0, 1, 2, 3}), "0-3");
  EXPECT_EQ(FormatCpus({1, 3, 4, 5, 9}), "1,3-5,9");
  EXPECT_EQ(FormatCpus({}), "");
}

TEST(ScopedThreadAffinity, PinsAndRestores) {
  const std::vector<int> before = AllowedCpus();
  ASSERT_FALSE(before.empty());
  {
    ScopedThreadAffinity pin({before.back()});
    ASSERT_TRUE(pin.status().ok()) << pin.status().ToString();
    EXPECT_EQ(AllowedCpus(), (std::vector<int>{before.back()}));
    // A thread made now inherits the mask.
    std::vector<int> child;
    std::thread([&] { child = AllowedCpus(); }).join();
    EXPECT_EQ(child, (std::vector<int>{before.back()}));
  }
  EXPECT_EQ(AllowedCpus(), before);
}

TEST(ScopedThreadAffinity, RefusesACpuOutOfRange) {
  const std::vector<int> before = AllowedCpus();
  {
    ScopedThreadAffinity pin({-1});
    EXPECT_FALSE(pin.status().ok());
  }
  EXPECT_EQ(AllowedCpus(), before);
}

TEST(CpuDevice, PinsComputeApartFromCopiesWhenThereAreSpareCpus) {
  const std::vector<int> allowed = AllowedCpus();
  DeviceOptions o;
  o.capacity_bytes = int64_t{64} << 20;
  CpuDevice device(o);
  if (allowed.size() < 2) {
    EXPECT_TRUE(device.helper_cpus().empty());
    GTEST_SKIP() << "one CPU: nothing to split";
  }
  EXPECT_EQ(device.helper_cpus(), std::vector<int>(allowed.begin() + 1, allowed.end()));
  EXPECT_NE(device.Describe().find("compute on CPU " + std::to_string(allowed[0])),
            std::string::npos)
      << device.Describe();
  o.cpu_pin_threads = false;
  CpuDevice unpinned(o);
  EXPECT_TRUE(unpinned.helper_cpus().empty());
  EXPECT_EQ(unpinned.Describe().find("compute on CPU"), std::string::npos);
}

}  // namespace
}  // namespace ssdtrain::exec::detail

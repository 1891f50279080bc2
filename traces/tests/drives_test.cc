// The stripe rule and the drive sets, against bytes counted stripe by stripe,
// and the plan file's "storage" and "ssd_bytes_written_per_drive".
#include "traces/drives.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "traces/plan.h"

namespace ssdtrain::traces {
namespace {

// Walks the stripes one by one: the reference StripedBytes must agree with.
std::vector<int64_t> CountStripes(int64_t bytes, int64_t stripe, int drives, int device) {
  std::vector<int64_t> out(static_cast<size_t>(drives), 0);
  int64_t at = 0;
  for (int64_t i = 0; at < bytes; ++i, at += stripe) {
    out[static_cast<size_t>((device + i) % drives)] += std::min(stripe, bytes - at);
  }
  return out;
}

TEST(StripedBytes, EqualsTheStripesCountedOneByOne) {
  const int64_t stripe = 1 << 20;
  for (int drives : {1, 2, 3, 4, 8}) {
    for (int device = 0; device < 2 * drives; ++device) {
      for (int64_t bytes : {int64_t{1}, int64_t{4096}, stripe - 1, stripe, stripe + 1,
                            3 * stripe + 12345, 8 * stripe, 17 * stripe - 4096}) {
        const std::vector<int64_t> want = CountStripes(bytes, stripe, drives, device % drives);
        EXPECT_EQ(StripedBytesPerDrive(bytes, stripe, drives, device), want)
            << bytes << " bytes on " << drives << " drives from " << device;
        EXPECT_EQ(std::accumulate(want.begin(), want.end(), int64_t{0}), bytes);
      }
    }
  }
}

TEST(StripedBytes, OneDriveTakesEverythingAndNothingIsNegative) {
  EXPECT_EQ(StripedBytes(123456789, 4096, 1, 7, 0), 123456789);
  EXPECT_EQ(StripedBytes(0, 4096, 4, 0, 0), 0);
  // Two stripes over four drives from drive 3: drives 3 and 0.
  EXPECT_EQ(StripedBytesPerDrive(4096 + 10, 4096, 4, 3), (std::vector<int64_t>{10, 0, 0, 4096}));
}

TEST(DriveSetOf, FollowsThePresetsArraysAndGpuSlots) {
  // Four arrays of two drives (eight drives), GPU g on array g % 4.
  DriveLayout four{{2, 2, 2, 2}, 0};
  for (int gpu = 0; gpu < 8; ++gpu) {
    auto set = DriveSetOf(four, gpu, 8);
    ASSERT_TRUE(set.ok()) << set.status().message();
    EXPECT_EQ(set->first, 2 * (gpu % 4));
    EXPECT_EQ(set->count, 2);
  }
  // Uneven arrays (the paper's machine: 4 and 3 drives).
  auto second = DriveSetOf(DriveLayout{{4, 3}, 0}, 1, 7);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->first, 4);
  EXPECT_EQ(second->count, 3);
  // No arrays: every drive given, for every GPU.
  auto all = DriveSetOf(DriveLayout{}, 5, 3);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->first, 0);
  EXPECT_EQ(all->count, 3);
}

TEST(DriveSetOf, RefusesADirectoryCountThePlanDoesNotHave) {
  auto set = DriveSetOf(DriveLayout{{8}, 0}, 0, 2);
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().message(),
            "the plan's storage has 8 drives in 1 array, but 2 offload directories were given; "
            "give one directory per drive, in order (directories on one disk can stand in for "
            "drives this machine lacks)");
  EXPECT_FALSE(DriveSetOf(DriveLayout{}, 0, 0).ok());
}

TEST(DriveLayout, StripeDefaultsAndValidation) {
  EXPECT_EQ(StripeBytes(DriveLayout{}), kDefaultStripeBytes);
  EXPECT_EQ(StripeBytes(DriveLayout{{}, 1 << 20}), 1 << 20);
  EXPECT_TRUE(ValidateDriveLayout(DriveLayout{{1, 2}, 8192}, "x").ok());
  EXPECT_EQ(ValidateDriveLayout(DriveLayout{{}, 1000}, "hw.json: storage").message(),
            "hw.json: storage.stripe_bytes: expected a positive multiple of 4096 (or 0: 4194304), "
            "got 1000");
  EXPECT_EQ(ValidateDriveLayout(DriveLayout{{2, 0}, 0}, "hw.json: storage").message(),
            "hw.json: storage.arrays[1]: expected 1 to 4096 drives, got 0");
}

TEST(SpreadOverDrives, GivesEachStorageTheNextDriveAndItsViewsTheSame) {
  Trace trace;
  trace.header.model = "m";
  for (int i = 0; i < 5; ++i) {
    Tensor t;
    t.id = i;
    t.bytes = 4096;
    trace.tensors.push_back(t);
  }
  trace.tensors[3].alias_of = 1;  // a view of storage 1
  Plan plan;
  for (TensorId t : {0, 1, 2, 3, 4}) {
    Placement p;
    p.tensor = t;
    p.action = t == 2 ? TensorAction::kOffloadHost : TensorAction::kOffloadSsd;
    p.device = 7;
    plan.placements.push_back(p);
  }
  SpreadOverDrives(trace, &plan, 2);
  std::vector<int> devices;
  for (const Placement& p : plan.placements) devices.push_back(p.device);
  // Storages 0, 1, 4 take drives 0, 1, 0; the view of 1 shares its drive; the
  // host placement is left alone.
  EXPECT_EQ(devices, (std::vector<int>{0, 1, 7, 1, 0}));
}

Plan MinimalPlan() {
  Plan p;
  p.policy = "offload-ssd";
  p.model = "m";
  return p;
}

TEST(PlanStorage, RoundTripsAndIsOmittedWhenUnset) {
  Plan p = MinimalPlan();
  EXPECT_FALSE(ToJson(p).contains("storage"));
  p.storage = DriveLayout{{4, 4}, 1 << 20, /*gds=*/true};
  EXPECT_EQ(ToJson(p)["storage"]["gds"], true);
  StepMetrics m;
  m.ssd_bytes_written = 30;
  m.ssd_bytes_written_per_drive = {10, 20};
  p.prediction = m;
  auto back = PlanFromJson(ToJson(p), "p.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->storage, p.storage);
  // The bounce path, the default, is not written.
  p.storage.gds = false;
  EXPECT_FALSE(ToJson(p)["storage"].contains("gds"));
  ASSERT_TRUE(back->prediction.has_value());
  EXPECT_EQ(back->prediction->ssd_bytes_written_per_drive, (std::vector<int64_t>{10, 20}));
  StepMetrics none;
  EXPECT_FALSE(ToJson(none).contains("ssd_bytes_written_per_drive"));
}

TEST(PlanStorage, RefusesBadFieldsNamingThem) {
  nlohmann::json j = ToJson(MinimalPlan());
  j["storage"] = {{"arrays", {2, 0}}};
  auto bad = PlanFromJson(j, "p.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("p.json: storage.arrays[1]: expected 1 to 4096 drives"),
            std::string::npos)
      << bad.status().message();
  j["storage"] = {{"stripe_bytes", 5000}};
  bad = PlanFromJson(j, "p.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("storage.stripe_bytes"), std::string::npos);
  j["storage"] = {{"stripes", 4096}};
  bad = PlanFromJson(j, "p.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("stripes"), std::string::npos);
}

}  // namespace
}  // namespace ssdtrain::traces

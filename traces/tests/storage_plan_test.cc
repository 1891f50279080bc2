// ResolvePlan: what a plan means, per storage (aliases, views, dedup,
// residency, lifetimes), and its rule of validity.
#include "traces/storage_plan.h"

#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "traces/tests/small_trace.h"

namespace ssdtrain::traces {
namespace {

std::vector<int> Ints(std::span<const int> s) { return {s.begin(), s.end()}; }

// SmallTrace (tests/small_trace.h): every tensor is 128 bytes; x (0) and w (1)
// are step inputs, a (2) and b (3) activations, v (5) a view of b, gb (6) an
// activation gradient and gw (7) a weight gradient nothing reads.
Plan PlanWith(const Trace& t, std::vector<Placement> placements) {
  Plan p;
  p.model = t.header.model;
  p.trace_fingerprint = Fingerprint(t);
  p.placements = std::move(placements);
  return p;
}

Placement Act(TensorId t, TensorAction action) {
  Placement p;
  p.tensor = t;
  p.action = action;
  return p;
}

Placement Ssd(TensorId t, std::string file, int64_t offset = 0, OpId prefetch = kNoOp) {
  return Placement{t, TensorAction::kOffloadSsd, prefetch, std::move(file), 0, offset};
}

TEST(ResolvePlan, AViewAndItsBaseAreOneStorage) {
  const Trace t = testing::SmallTrace();
  auto sp = ResolvePlan(t, PlanWith(t, {Ssd(5, "v.bin", 0, 3)}), "p.json");
  ASSERT_TRUE(sp.ok()) << sp.status().message();
  // 8 tensors, one of them a view: 7 storages.
  EXPECT_EQ(sp->storages.size(), 7u);
  EXPECT_EQ(sp->IndexOf(5), sp->IndexOf(3));
  const StorageInfo& b = sp->of(5);
  EXPECT_EQ(b.root, 3);
  EXPECT_EQ(b.action, TensorAction::kOffloadSsd);
  EXPECT_EQ(b.placed_by, 5);
  EXPECT_EQ(b.file, "v.bin");
  EXPECT_TRUE(b.saved);  // through its view
  EXPECT_EQ(sp->ssd_bytes, 128);
  ASSERT_EQ(sp->prefetch_at[3].size(), 1u);
  EXPECT_EQ(sp->prefetch_at[3][0], sp->IndexOf(3));
  // b is made by op1, read by op2 (loss) and, through v, by op3.
  EXPECT_EQ(b.producer, 1);
  EXPECT_EQ(b.last_forward_use, 2);
  EXPECT_EQ(b.first_backward_use, 3);
  EXPECT_EQ(b.last_use, 3);
  // op3 reads l and v: two storages, v counted as b.
  EXPECT_EQ(Ints(sp->op_inputs[3]), (std::vector<int>{sp->IndexOf(4), sp->IndexOf(3)}));
}

TEST(ResolvePlan, OneRuleOfResidency) {
  const Trace t = testing::SmallTrace();
  auto sp = ResolvePlan(t, PlanWith(t, {}), "p.json");
  ASSERT_TRUE(sp.ok());
  EXPECT_EQ(sp->of(0).role, StorageRole::kPersistent);  // step input
  EXPECT_EQ(sp->of(1).role, StorageRole::kPersistent);  // weight
  EXPECT_EQ(sp->of(7).role, StorageRole::kPersistent);  // weight gradient: read by nothing
  EXPECT_EQ(sp->of(6).role, StorageRole::kTransient);   // activation gradient: read by op4
  EXPECT_EQ(sp->of(2).role, StorageRole::kActivation);
  EXPECT_EQ(sp->persistent_bytes, 3 * 128);
}

TEST(ResolvePlan, PlacementsOnAliasesMustAgree) {
  Trace t = testing::SmallTrace();
  t.tensors[3].saved_for_backward = true;  // b saved as itself and through its view v
  t.tensors[3].offloadable = true;
  // Different actions on one storage.
  Plan p = PlanWith(t, {Ssd(5, "b.bin"), Act(3, TensorAction::kRecompute)});
  Status s = ResolvePlan(t, p, "p.json").status();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(
      s.message().find("p.json: placements[1]: tensor 3 (b) shares its storage with tensor 5"),
      std::string::npos)
      << s.message();
  // The same action at two places.
  p = PlanWith(t, {Ssd(5, "b.bin"), Ssd(3, "other.bin")});
  s = ResolvePlan(t, p, "p.json").status();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("one storage takes one placement"), std::string::npos) << s.message();
  // The same action and place: deduplicated; the earlier prefetch point wins.
  p = PlanWith(t, {Ssd(5, "b.bin", 0, 4), Ssd(3, "b.bin", 0, 3)});
  auto sp = ResolvePlan(t, p, "p.json");
  ASSERT_TRUE(sp.ok()) << sp.status().message();
  EXPECT_EQ(sp->of(3).prefetch_before, 3);
  EXPECT_EQ(sp->ssd_bytes, 128);  // written once
}

TEST(ResolvePlan, OverlappingExtentsAreRejected) {
  const Trace t = testing::SmallTrace();
  // a takes [0, 4096) of shared.bin on disk (128 bytes padded to the O_DIRECT block).
  Status s =
      ResolvePlan(t, PlanWith(t, {Ssd(2, "shared.bin", 0), Ssd(5, "shared.bin", 0)}), "p.json")
          .status();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("placements[1].offset: tensor 5 at shared.bin:0 overlaps tensor 2"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(
      ResolvePlan(t, PlanWith(t, {Ssd(2, "shared.bin", 0), Ssd(5, "shared.bin", 4096)}), "p.json")
          .ok());
  // The same offset in another directory is another file.
  Placement other = Ssd(5, "shared.bin", 0);
  other.device = 1;
  EXPECT_TRUE(ResolvePlan(t, PlanWith(t, {Ssd(2, "shared.bin", 0), other}), "p.json").ok());
  s = ResolvePlan(t, PlanWith(t, {Ssd(2, "shared.bin", 100)}), "p.json").status();
  EXPECT_NE(s.message().find("placements[0].offset: 100 must be a multiple of 4096"),
            std::string::npos)
      << s.message();
}

TEST(ResolvePlan, ADeviceIndexNeedsADirectory) {
  const Trace t = testing::SmallTrace();
  Placement p = Ssd(2, "a.bin");
  p.device = 1;
  auto sp = ResolvePlan(t, PlanWith(t, {p}), "p.json");
  ASSERT_TRUE(sp.ok());
  EXPECT_TRUE(CheckDevices(*sp, 2, "p.json").ok());
  Status s = CheckDevices(*sp, 1, "p.json");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "p.json: the placement of tensor 2 names device 1, but the run has 1 offload "
            "directory (device 0 to 0)");
}

TEST(ResolvePlan, StorageResidentAllStepCanOnlyBeKept) {
  Trace t = testing::SmallTrace();
  t.tensors[1].saved_for_backward = true;  // the weight, saved for the wgrad
  t.tensors[1].offloadable = true;
  Status s = ResolvePlan(t, PlanWith(t, {Act(1, TensorAction::kOffloadHost)}), "p.json").status();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("placements[0].action: tensor 1 (w) is resident all step"),
            std::string::npos)
      << s.message();
}

TEST(ResolvePlan, HostOffloadGetsFixedPaddedPlaces) {
  Trace t = testing::SmallTrace();
  auto sp = ResolvePlan(
      t, PlanWith(t, {Act(2, TensorAction::kOffloadHost), Act(5, TensorAction::kOffloadHost)}),
      "p.json");
  ASSERT_TRUE(sp.ok()) << sp.status().message();
  EXPECT_EQ(sp->of(2).host_offset, 0);
  EXPECT_EQ(sp->of(3).host_offset, 4096);  // 128 bytes padded to 4096
  EXPECT_EQ(sp->host_region_bytes, 8192);
  EXPECT_EQ(sp->of(4).host_offset, -1);
}

TEST(ComputeStaticPeaks, KeepAndOffloadByHand) {
  const Trace t = testing::SmallTrace();
  // Keep: persistent x, w, gw = 384. op0 adds a, op1 b, op2 l (activations:
  // 384 after op2), op3 adds gb (896 in all) and frees l and b; op4 frees a and gb.
  auto keep = ResolvePlan(t, PlanWith(t, {}), "p.json");
  ASSERT_TRUE(keep.ok());
  StaticPeaks peaks = ComputeStaticPeaks(t, *keep);
  EXPECT_EQ(peaks.activation_bytes, 384);
  EXPECT_EQ(peaks.device_bytes, 896);
  // a offloaded, read back at op4: it leaves after op1, its last forward use,
  // so at most two activations (b, l) are resident: 256; the device peak is at
  // op3: 384 + b + l + gb = 768.
  auto offload = ResolvePlan(t, PlanWith(t, {Ssd(2, "a.bin", 0, 4)}), "p.json");
  ASSERT_TRUE(offload.ok());
  peaks = ComputeStaticPeaks(t, *offload);
  EXPECT_EQ(peaks.activation_bytes, 256);
  EXPECT_EQ(peaks.device_bytes, 768);
  // A 256-byte allocation granularity doubles every 128-byte storage.
  peaks = ComputeStaticPeaks(t, *offload, 256);
  EXPECT_EQ(peaks.activation_bytes, 512);
  EXPECT_EQ(peaks.device_bytes, 1536);
}

// Planned eviction points: a (tensor 2) is made by op0, last read in forward
// by op1 and first read in backward by op4, where it is prefetched; its
// eviction point must lie in (1, 4), so op2 or op3.
Placement SsdEvict(TensorId t, OpId evict, OpId prefetch = 4) {
  Placement p = Ssd(t, "t" + std::to_string(t) + ".bin", 0, prefetch);
  p.evict_before = evict;
  return p;
}

// A point in backward is the end of the forward pass: it resolves to the first
// backward op (op3), also where that op is the prefetch point (the write
// lands, the copy goes, the read brings it back).
TEST(ResolvePlan, AnEvictionPointInBackwardIsTheEndOfTheForwardPass) {
  const Trace t = testing::SmallTrace();
  for (const OpId prefetch : {OpId{3}, OpId{4}}) {
    for (const OpId evict : {OpId{3}, OpId{4}}) {
      auto sp = ResolvePlan(t, PlanWith(t, {SsdEvict(2, evict, prefetch)}), "p.json");
      ASSERT_TRUE(sp.ok()) << sp.status().message();
      EXPECT_EQ(sp->of(2).evict_before, 3);
      EXPECT_EQ(Ints(sp->evict_at[3]), (std::vector<int>{sp->IndexOf(2)}));
      EXPECT_TRUE(sp->evict_at[4].empty());
    }
  }
}

TEST(ResolvePlan, AnEvictionPointLiesBetweenTheLastForwardUseAndBackward) {
  const Trace t = testing::SmallTrace();
  auto sp = ResolvePlan(t, PlanWith(t, {SsdEvict(2, 3)}), "p.json");
  ASSERT_TRUE(sp.ok()) << sp.status().message();
  EXPECT_EQ(sp->of(2).evict_before, 3);
  EXPECT_EQ(Ints(sp->evict_at[3]), (std::vector<int>{sp->IndexOf(2)}));
  EXPECT_TRUE(sp->evict_at[2].empty());
  for (const OpId bad : {OpId{0}, OpId{1}}) {
    const Status s = ResolvePlan(t, PlanWith(t, {SsdEvict(2, bad)}), "p.json").status();
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("p.json: placements[0].evict_before: op " + std::to_string(bad) +
                               " must come after tensor 2's last forward use (op 1) and before "
                               "op 4"),
              std::string::npos)
        << s.message();
  }
  Status s = ResolvePlan(t, PlanWith(t, {SsdEvict(2, 9)}), "p.json").status();
  EXPECT_NE(s.message().find("placements[0].evict_before: op 9 does not exist"), std::string::npos)
      << s.message();
  Placement kept = Act(2, TensorAction::kRecompute);
  kept.evict_before = 2;
  s = ResolvePlan(t, PlanWith(t, {kept}), "p.json").status();
  EXPECT_NE(s.message().find("placements[0].evict_before: only an offloaded tensor is evicted"),
            std::string::npos)
      << s.message();
}

TEST(ResolvePlan, OneStorageHasOneEvictionPoint) {
  Trace t = testing::SmallTrace();
  t.tensors[3].saved_for_backward = true;  // b saved as itself and through its view v
  t.tensors[3].offloadable = true;
  Placement v = Ssd(5, "b.bin"), b = Ssd(3, "b.bin");
  b.evict_before = 2;
  const Status s = ResolvePlan(t, PlanWith(t, {v, b}), "p.json").status();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("p.json: placements[1].evict_before: tensor 3 (b) shares its storage "
                             "with tensor 5, whose placements[0] evicts it when its write lands; "
                             "one storage has one eviction point"),
            std::string::npos)
      << s.message();
}

// With its eviction point at op3, a stays resident through op2: activations
// a + b + l = 384 there (256 when it goes right after op1); it leaves before
// op3 allocates gb, so the device peak stays 384 + b + l + gb = 768.
TEST(ComputeStaticPeaks, AStorageStaysUntilItsEvictionPoint) {
  const Trace t = testing::SmallTrace();
  auto sp = ResolvePlan(t, PlanWith(t, {SsdEvict(2, 3)}), "p.json");
  ASSERT_TRUE(sp.ok()) << sp.status().message();
  const StaticPeaks peaks = ComputeStaticPeaks(t, *sp);
  EXPECT_EQ(peaks.activation_bytes, 384);
  EXPECT_EQ(peaks.device_bytes, 768);
}

TEST(Plan, EvictionPointsRoundTripThroughJson) {
  const Trace t = testing::SmallTrace();
  const Plan p = PlanWith(t, {SsdEvict(2, 3), Ssd(5, "v.bin", 4096)});
  auto back = PlanFromJson(ToJson(p), "p.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->placements.size(), 2u);
  EXPECT_EQ(back->placements[0].evict_before, 3);
  EXPECT_EQ(back->placements[1].evict_before, kNoOp);
  EXPECT_FALSE(ToJson(p)["placements"][1].contains("evict_before"));  // absent: on landing
}

TEST(DeviceBytes, RoundsUpToTheGranularity) {
  EXPECT_EQ(DeviceBytes(0, 256), 0);
  EXPECT_EQ(DeviceBytes(1, 256), 256);
  EXPECT_EQ(DeviceBytes(256, 256), 256);
  EXPECT_EQ(DeviceBytes(257, 64), 320);
  EXPECT_EQ(DeviceBytes(257, 1), 257);
}

// Both halves of the storage plan said per storage and per op, to compare.
std::vector<std::string> Described(const Trace& t, const StoragePlan& sp) {
  std::vector<std::string> out;
  for (const StorageInfo& s : sp.storages) {
    out.push_back(std::to_string(s.root) + " " + std::to_string(s.bytes) + " " +
                  std::to_string(static_cast<int>(s.role)) + " " + std::to_string(s.saved) + " " +
                  std::to_string(static_cast<int>(s.action)) + " " + std::to_string(s.placed_by) +
                  " " + std::to_string(s.prefetch_before) + " " + std::to_string(s.evict_before) +
                  " " + s.file + " " + std::to_string(s.device) + " " + std::to_string(s.offset) +
                  " " + std::to_string(s.host_offset) + " " + std::to_string(s.producer) + " " +
                  std::to_string(s.last_use) + " " + std::to_string(s.last_forward_use) + " " +
                  std::to_string(s.first_backward_use));
  }
  for (size_t op = 0; op < t.ops.size(); ++op) {
    for (const OpLists* lists : {&sp.op_inputs, &sp.op_outputs, &sp.prefetch_at, &sp.evict_at}) {
      std::string line = "op " + std::to_string(op) + ":";
      for (int s : (*lists)[op]) line += " " + std::to_string(s);
      out.push_back(line);
    }
  }
  for (int i : sp.index_of) out.push_back("index " + std::to_string(i));
  out.push_back(std::to_string(sp.persistent_bytes) + " " + std::to_string(sp.ssd_bytes) + " " +
                std::to_string(sp.host_region_bytes) + " " + std::to_string(sp.max_device));
  return out;
}

// A search resolves the trace's storages once and each plan against them
// (ResolveStorages): the same plan as resolving it whole, for every kind of
// placement, the same errors for a bad one; the storages alone keep
// everything; a resolved plan is refused as the storages to start from.
TEST(ResolvePlan, InTwoHalvesIsTheSamePlan) {
  const Trace t = testing::SmallTrace();
  auto storages = ResolveStorages(t, "p.json");
  ASSERT_TRUE(storages.ok()) << storages.status().message();
  auto keep = ResolvePlan(t, PlanWith(t, {}), "p.json");
  ASSERT_TRUE(keep.ok()) << keep.status().message();
  EXPECT_EQ(Described(t, *storages), Described(t, *keep));
  const std::vector<std::vector<Placement>> plans = {
      {},
      {Ssd(5, "v.bin", 0, 3)},
      {Act(2, TensorAction::kOffloadHost), Act(5, TensorAction::kOffloadHost)},
      {Act(2, TensorAction::kRecompute), Ssd(5, "b.bin", 4096)},
      {SsdEvict(2, 4, 3)},
  };
  for (const std::vector<Placement>& placements : plans) {
    const Plan plan = PlanWith(t, placements);
    auto whole = ResolvePlan(t, plan, "p.json");
    auto halves = ResolvePlan(t, *storages, plan, "p.json");
    ASSERT_TRUE(whole.ok()) << whole.status().message();
    ASSERT_TRUE(halves.ok()) << halves.status().message();
    EXPECT_EQ(Described(t, *halves), Described(t, *whole)) << placements.size();
  }
  const Plan bad = PlanWith(t, {Ssd(2, "a.bin", 0), Ssd(5, "a.bin", 0)});  // overlapping
  auto whole = ResolvePlan(t, bad, "p.json");
  auto halves = ResolvePlan(t, *storages, bad, "p.json");
  ASSERT_FALSE(whole.ok());
  ASSERT_FALSE(halves.ok());
  EXPECT_EQ(halves.status().message(), whole.status().message());

  auto placed = ResolvePlan(t, PlanWith(t, {Act(2, TensorAction::kRecompute)}), "p.json");
  ASSERT_TRUE(placed.ok());
  auto refused = ResolvePlan(t, *placed, PlanWith(t, {}), "p.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Status::Code::kInternal);
  EXPECT_NE(refused.status().message().find("not its trace's own"), std::string::npos);
}

}  // namespace
}  // namespace ssdtrain::traces

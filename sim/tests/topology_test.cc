// The interconnect by topology (sim/topology.h): one layout's collectives
// priced inside one node and across nodes, against the ring closed forms of
// both links; the pipeline's send by where its two ranks sit; the hardware
// file's two forms.
#include "sim/topology.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cmake/build_paths.h"
#include "sim/hardware.h"
#include "traces/layout.h"

namespace ssdtrain::sim {
namespace {

constexpr int64_t kGB = 1'000'000'000;

// A DGX-like node: 8 GPUs on NVLink at 200 GB/s, one 25 GB/s NIC per GPU.
HardwareOptions Dgx(double latency_us) {
  HardwareOptions hw;
  hw.gpus_per_node = 8;
  hw.interconnect.domain_gpus = 8;
  hw.interconnect.scale_up = LinkTier{200, 0, latency_us};
  hw.interconnect.scale_out = LinkTier{25, 0, latency_us};
  return hw;
}

traces::Layout TpDp(int64_t tp, int64_t dp) {
  traces::Layout l;
  l.tp = tp;
  l.dp = dp;
  return l;
}

int64_t DpAllReduce(const traces::Layout& l, const HardwareOptions& hw, int64_t bytes) {
  return GroupCollectiveNs(CollectiveKind::kAllReduce, bytes, PlaceLayout(l, hw).gradients,
                           hw.interconnect);
}

// 1 GB all-reduced over a dp group of 8. Inside one node (tp 1): the ring on
// NVLink, 2·7/8 · 1 GB / 200 GB/s = 8.75 ms. Across 8 nodes, one rank in each
// (tp 8): the ring on the NICs, 2·7/8 · 1 GB / 25 GB/s = 70 ms: the closed
// forms of the two links (sim/collective.h) at n = 8.
TEST(Topology, OneLayoutsAllReduceInsideANodeAndAcrossNodes) {
  const HardwareOptions hw = Dgx(0);
  EXPECT_EQ(DpAllReduce(TpDp(1, 8), hw, kGB),
            CollectiveNs(CollectiveKind::kAllReduce, kGB, 8, 200, 0));
  EXPECT_EQ(DpAllReduce(TpDp(1, 8), hw, kGB), 8'750'000);
  EXPECT_EQ(DpAllReduce(TpDp(8, 8), hw, kGB),
            CollectiveNs(CollectiveKind::kAllReduce, kGB, 8, 25, 0));
  EXPECT_EQ(DpAllReduce(TpDp(8, 8), hw, kGB), 70'000'000);
  // The same all-gather (ZeRO-1's parameters): 7/8 · 1 GB at each link.
  EXPECT_EQ(GroupCollectiveNs(CollectiveKind::kAllGather, kGB,
                              PlaceLayout(TpDp(1, 8), hw).gradients, hw.interconnect),
            4'375'000);
  EXPECT_EQ(GroupCollectiveNs(CollectiveKind::kAllGather, kGB,
                              PlaceLayout(TpDp(8, 8), hw).gradients, hw.interconnect),
            35'000'000);
}

// tp 2, dp 8 on 16 GPUs: the dp group is ranks 0, 2, ..., 14, four in each of
// two nodes. The ring through all 8 crosses the network on four NICs per node:
// 2·7/8 · 1 GB / min(200, 4 · 25) GB/s = 17.5 ms, and 14 steps of 5 µs. The
// hierarchical form: reduce-scatter in each node (3/4 · 1 GB / 200 = 3.75 ms,
// 3 steps), all-reduce of 250 MB across the two (2·1/2 · 0.25 GB / 25 = 10 ms,
// 2 steps), all-gather in each node (3.75 ms, 3 steps): 17.5 ms and 8 steps.
// The faster one is taken: 17.5 ms + 40 µs.
TEST(Topology, AGroupOverSeveralNodesTakesTheFasterOfRingAndHierarchy) {
  const HardwareOptions hw = Dgx(5);
  const traces::GroupPlacement p = PlaceLayout(TpDp(2, 8), hw).gradients;
  EXPECT_EQ(p.ranks, 8);
  EXPECT_EQ(p.domains, 2);
  EXPECT_EQ(p.max_per_domain, 4);
  EXPECT_EQ(DpAllReduce(TpDp(2, 8), hw, kGB), 17'540'000);
  // Without latency the two tie at 17.5 ms.
  EXPECT_EQ(DpAllReduce(TpDp(2, 8), Dgx(0), kGB), 17'500'000);
  // The tp group of 2 stays on NVLink: 1/2 · 1 GB / 200 = 2.5 ms + 5 µs.
  EXPECT_EQ(GroupCollectiveNs(CollectiveKind::kAllGather, kGB, PlaceLayout(TpDp(2, 8), hw).tp,
                              hw.interconnect),
            2'505'000);
}

// Pipeline sends: at tp 8 stage 1 starts on the next node (the network, 25
// GB/s: 1 GB in 40 ms + 5 µs); at tp 2 it is rank 2 of the same node
// (NVLink: 5 ms + 5 µs). A p2p figure of its own replaces the tier's ring one.
TEST(Topology, APipelineSendCrossesTheNetworkOnlyBetweenNodes) {
  HardwareOptions hw = Dgx(5);
  traces::Layout l = TpDp(8, 1);
  l.pp = 2;
  EXPECT_FALSE(PlaceLayout(l, hw).next_stage_within_domain);
  EXPECT_EQ(MessageNs(kGB, false, hw.interconnect), 40'005'000);
  l.tp = 2;
  EXPECT_TRUE(PlaceLayout(l, hw).next_stage_within_domain);
  EXPECT_EQ(MessageNs(kGB, true, hw.interconnect), 5'005'000);
  hw.interconnect.scale_up.p2p_GBps = 100;
  EXPECT_EQ(MessageNs(kGB, true, hw.interconnect), 10'005'000);
}

// An NVL72 rack: 72 GPUs in one domain. The dp group of tp 8, dp 8 (ranks 0,
// 8, ..., 56) stays inside it: NVLink, not the network.
TEST(Topology, AnNvl72DomainHoldsWhatADgxSpreadsOverNodes) {
  HardwareOptions hw = Dgx(0);
  hw.interconnect.domain_gpus = 72;
  EXPECT_TRUE(PlaceLayout(TpDp(8, 8), hw).gradients.within_one_domain());
  EXPECT_EQ(DpAllReduce(TpDp(8, 8), hw, kGB), 8'750'000);
}

// Today's shipped presets: tp 8 × dp 8 on 64 GPUs. On a DGX B200 each dp
// group spans 8 nodes and rings over the 400 Gb/s NICs; in a GB200 NVL72 rack
// the same group stays in the 72-GPU NVLink domain and rings at its NVLink
// figure.
TEST(Topology, TodaysPresetsPlaceOneLayoutByTheirDomains) {
  auto b200 = LoadHardware(std::string(ConfiguredSourceDir()) + "/configs/hardware/dgx-b200.json");
  auto nvl72 =
      LoadHardware(std::string(ConfiguredSourceDir()) + "/configs/hardware/gb200-nvl72.json");
  ASSERT_TRUE(b200.ok()) << b200.status().message();
  ASSERT_TRUE(nvl72.ok()) << nvl72.status().message();
  EXPECT_EQ(DomainGpus(*b200), 8);
  EXPECT_EQ(DomainGpus(*nvl72), 72);
  EXPECT_FALSE(PlaceLayout(TpDp(8, 8), *b200).gradients.within_one_domain());
  EXPECT_TRUE(PlaceLayout(TpDp(8, 8), *nvl72).gradients.within_one_domain());
  EXPECT_EQ(DpAllReduce(TpDp(8, 8), *b200, kGB),
            CollectiveNs(CollectiveKind::kAllReduce, kGB, 8, 50, 5));
  EXPECT_EQ(DpAllReduce(TpDp(8, 8), *nvl72, kGB),
            CollectiveNs(CollectiveKind::kAllReduce, kGB, 8, 682, 5));
  // A GB200 tray: 4 GPUs share one RAID0 of 4 E1.S drives.
  EXPECT_EQ(nvl72->gpus_per_node, 4);
  EXPECT_EQ(ArrayFor(*nvl72, 3).drives, 4);
  EXPECT_EQ(ArrayFor(*b200, 7).drives, 8);
}

nlohmann::json WithInterconnect(nlohmann::json interconnect) {
  auto hw = LoadHardware(std::string(ConfiguredSourceDir()) + "/configs/hardware/dgx-h100.json");
  EXPECT_TRUE(hw.ok());
  nlohmann::json j = ToJson(*hw);
  j["interconnect"] = std::move(interconnect);
  return j;
}

// The per-dimension fields of older files are read, converted, and a note
// says what they became.
// PlaceLayout memoizes per thread: every layout field, the domain and the
// stage are its key. Layouts that differ in one field each, asked in turn
// and again, each get their own groups' placements (computed here afresh from
// the layout's groups), on two domain sizes.
bool SamePlacement(const traces::GroupPlacement& a, const traces::GroupPlacement& b) {
  return a.ranks == b.ranks && a.domains == b.domains && a.max_per_domain == b.max_per_domain;
}

TEST(Topology, MemoizedPlacementsAreEachLayoutsOwn) {
  traces::Layout base;
  base.tp = 2;
  base.cp = 2;
  base.pp = 2;
  base.dp = 8;
  base.ep = 4;
  base.zero_stage = 3;
  std::vector<traces::Layout> layouts{base};
  auto vary = [&](auto change) {
    traces::Layout l = base;
    change(l);
    layouts.push_back(l);
  };
  vary([](traces::Layout& l) { l.tp = 4; });
  vary([](traces::Layout& l) { l.cp = 1; });
  vary([](traces::Layout& l) { l.pp = 4; });
  vary([](traces::Layout& l) { l.dp = 16; });
  vary([](traces::Layout& l) { l.ep = 2; });
  vary([](traces::Layout& l) { l.zero_stage = 1; });
  vary([](traces::Layout& l) { l.dp_shard = 4; });
  for (int round = 0; round < 2; ++round) {
    for (const int64_t domain : {8, 72}) {
      HardwareOptions hw = Dgx(5);
      hw.interconnect.domain_gpus = domain;
      for (const traces::Layout& l : layouts) {
        for (int64_t stage = 0; stage < l.pp; ++stage) {
          const LayoutLinks got = PlaceLayout(l, hw, stage);
          const int64_t first = l.RankOf({0, 0, 0, stage});
          const std::string at =
              "tp " + std::to_string(l.tp) + " cp " + std::to_string(l.cp) + " pp " +
              std::to_string(l.pp) + " dp " + std::to_string(l.dp) + " ep " + std::to_string(l.ep) +
              " zero " + std::to_string(l.zero_stage) + " dp_shard " + std::to_string(l.dp_shard) +
              " stage " + std::to_string(stage) + " domain " + std::to_string(domain);
          EXPECT_TRUE(SamePlacement(got.tp, traces::PlaceGroup(l.TpGroup(first), domain))) << at;
          EXPECT_TRUE(SamePlacement(got.gradients, traces::PlaceGroup(l.DpCpGroup(first), domain)))
              << at;
          EXPECT_TRUE(SamePlacement(got.shard, traces::PlaceGroup(l.ShardGroup(first), domain)))
              << at;
          EXPECT_TRUE(SamePlacement(got.expert_shard,
                                    traces::PlaceGroup(l.ExpertShardGroup(first), domain)))
              << at;
          EXPECT_TRUE(SamePlacement(got.dense_buckets,
                                    traces::PlaceGroup(l.DenseGradientGroup(first), domain)))
              << at;
          EXPECT_EQ(got.next_stage_within_domain,
                    l.pp <= 1 || first / domain == l.NextStageRank(first) / domain)
              << at;
        }
      }
    }
  }
}

TEST(Topology, TheOldPerDimensionFieldsAreReadWithANote) {
  auto hw = HardwareFromJson(
      WithInterconnect({{"tp_GBps", 370}, {"pp_GBps", 40}, {"dp_GBps", 50}, {"latency_us", 5}}),
      "old.json");
  ASSERT_TRUE(hw.ok()) << hw.status().message();
  EXPECT_EQ(hw->interconnect.domain_gpus, 8);
  EXPECT_EQ(hw->interconnect.scale_up.GBps, 370);
  EXPECT_EQ(hw->interconnect.scale_out.GBps, 50);
  EXPECT_EQ(hw->interconnect.scale_out.P2pGBps(), 40);
  // The old form names no SMs a collective holds: not modelled.
  EXPECT_EQ(hw->interconnect.scale_up.collective_sms, 0);
  EXPECT_EQ(hw->interconnect.scale_out.collective_sms, 0);
  ASSERT_EQ(hw->notes.size(), 1u);
  EXPECT_NE(hw->notes[0].find("old.json: interconnect: tp_GBps, pp_GBps and dp_GBps price links "
                              "per parallel dimension"),
            std::string::npos)
      << hw->notes[0];
  EXPECT_NE(hw->notes[0].find("scale_up {domain_gpus 8 (gpus_per_node), GBps 370} and scale_out "
                              "{GBps 50, p2p_GBps 40}"),
            std::string::npos)
      << hw->notes[0];
  // The shipped presets are in the new form: no note.
  auto preset =
      LoadHardware(std::string(ConfiguredSourceDir()) + "/configs/hardware/dgx-h100.json");
  ASSERT_TRUE(preset.ok());
  EXPECT_TRUE(preset->notes.empty());
}

TEST(Topology, BadInterconnectsAreRefusedNamingTheField) {
  auto both = HardwareFromJson(
      WithInterconnect({{"tp_GBps", 370}, {"pp_GBps", 50}, {"scale_up", {{"GBps", 1}}}}), "b.json");
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("b.json: interconnect.scale_up: give either scale_up and "
                                         "scale_out or the older"),
            std::string::npos)
      << both.status().message();
  auto half = HardwareFromJson(
      WithInterconnect({{"scale_up", {{"domain_gpus", 8}, {"GBps", 450}}}}), "h.json");
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.status().message().find("h.json: interconnect.scale_out"), std::string::npos)
      << half.status().message();
  auto zero = HardwareFromJson(WithInterconnect({{"scale_up", {{"domain_gpus", 8}, {"GBps", 0}}},
                                                 {"scale_out", {{"GBps", 50}}}}),
                               "z.json");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("z.json: interconnect.scale_up.GBps: must be > 0, got 0"),
            std::string::npos)
      << zero.status().message();
  auto fraction =
      HardwareFromJson(WithInterconnect({{"scale_up", {{"domain_gpus", 7.5}, {"GBps", 450}}},
                                         {"scale_out", {{"GBps", 50}}}}),
                       "f.json");
  ASSERT_FALSE(fraction.ok());
  EXPECT_NE(fraction.status().message().find("f.json: interconnect.scale_up.domain_gpus: expected "
                                             "an integer"),
            std::string::npos)
      << fraction.status().message();
  // A domain past int's range is refused, not converted (the fuzzer's 4.4e50 once was).
  for (const nlohmann::json& domain :
       {nlohmann::json(4.44444e50), nlohmann::json(int64_t{1} << 40), nlohmann::json(0)}) {
    auto out =
        HardwareFromJson(WithInterconnect({{"scale_up", {{"domain_gpus", domain}, {"GBps", 450}}},
                                           {"scale_out", {{"GBps", 50}}}}),
                         "o.json");
    ASSERT_FALSE(out.ok()) << domain;
    EXPECT_NE(out.status().message().find("o.json: interconnect.scale_up.domain_gpus: "),
              std::string::npos)
        << out.status().message();
  }
}

}  // namespace
}  // namespace ssdtrain::sim

// Keeps the paper table (scripts/paper.sh, docs/PERFORMANCE.md) from drifting:
// ranges and invariants of the simulated reproduction, not the paper's figures
// copied in. Where the simulator's results sit outside the paper's range
// (activation-peak cut 28-40%), docs/PERFORMANCE.md says which modelled fact
// explains it; the bands here are ours, a few points around today's results.
#include "sim/tests/paper_table.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "cmake/build_paths.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "sim/hardware.h"
#include "sim/policy.h"

namespace ssdtrain::sim::paper {
namespace {

const std::string kRoot = ConfiguredSourceDir();

HardwareOptions PaperHardware() {
  auto hw = LoadHardware(kRoot + "/configs/hardware/a100-pcie-40gb-ssdtrain-paper.json");
  EXPECT_TRUE(hw.ok()) << hw.status().message();
  return hw.ok() ? *hw : HardwareOptions{};
}

double Cut(const Run& r, const Run& keep) {
  return 1.0 - static_cast<double>(r.paper_activation) / static_cast<double>(keep.paper_activation);
}
double OurCut(const Run& r, const Run& keep) {
  return 1.0 - static_cast<double>(r.activation_peak) / static_cast<double>(keep.activation_peak);
}
double Cost(const Run& r, const Run& keep) {
  return static_cast<double>(r.step_ns) / static_cast<double>(keep.step_ns) - 1.0;
}

// All nine rows, computed once for the suite (< 1 s).
const std::vector<ModelRow>& Rows() {
  static const std::vector<ModelRow> rows = [] {
    std::vector<ModelRow> out;
    const HardwareOptions hw = PaperHardware();
    for (const std::string& name : PaperModels()) {
      auto config = models::LoadModelConfig(kRoot + "/configs/models/" + name + ".json");
      EXPECT_TRUE(config.ok()) << config.status().message();
      if (!config.ok()) continue;
      auto row = EvaluateModel(*config, hw);
      EXPECT_TRUE(row.ok()) << row.status().message();
      if (row.ok()) out.push_back(*row);
    }
    return out;
  }();
  return rows;
}

TEST(PaperTable, NineModelsAreEvaluated) { EXPECT_EQ(Rows().size(), 9u); }

// Fig. 6 on the simulator: ssdtrain-paper costs <= 3% step time (the paper:
// almost none). Its cut, the paper's way, sits in our band 50-85% (today
// 58-77%; the paper measured 28-40%, docs/PERFORMANCE.md says why), and ours
// (activation tensors only) cuts at least as much, since activation gradients
// and temporaries do not shrink under offload.
TEST(PaperTable, SsdtrainPaperCutsWithinOurBandAtSmallCost) {
  for (const ModelRow& r : Rows()) {
    SCOPED_TRACE(r.model);
    EXPECT_LE(Cost(r.ssdtrain_paper, r.keep), 0.03);
    EXPECT_GE(Cut(r.ssdtrain_paper, r.keep), 0.50);
    EXPECT_LE(Cut(r.ssdtrain_paper, r.keep), 0.85);
    EXPECT_GE(OurCut(r.ssdtrain_paper, r.keep), Cut(r.ssdtrain_paper, r.keep));
    EXPECT_GT(r.ssdtrain_paper.ssd_bytes_written, 0);
  }
}

// The cut falls as hidden grows at fixed family (fewer layers, so the
// non-offloaded rest, the head and the gradients, weighs more): h8192 > h16384.
TEST(PaperTable, CutFallsFromTheSmallestToTheLargestHidden) {
  std::map<std::string, std::vector<double>> by_family;
  for (const ModelRow& r : Rows()) {
    by_family[r.model.substr(0, r.model.find("-h"))].push_back(Cut(r.ssdtrain_paper, r.keep));
  }
  for (const auto& [family, cuts] : by_family) {
    ASSERT_EQ(cuts.size(), 3u) << family;  // PaperModels order: h8192, h12288, h16384
    EXPECT_GT(cuts[0], cuts[2]) << family;
  }
}

// The optimizer under ssdtrain-paper's device peak fits it, is no slower, and
// its activation peak is no higher; at the lowest budget within 3% of keep's
// step time it reaches our goal of >= 60% less activation peak.
// Weight gradients allocated in backward (set_to_none), traced: they count in
// the paper's peak once backward has made them, so ssdtrain-paper's cut falls,
// and its act rises by at most the gradients' bytes. Today 32-61%; the band is
// ours, a few points around it (docs/PERFORMANCE.md).
TEST(PaperTable, GradientsAllocatedInBackwardLowerTheCut) {
  for (const ModelRow& r : Rows()) {
    SCOPED_TRACE(r.model);
    const double cut = Cut(r.ssdtrain_paper_set_to_none, r.keep_set_to_none);
    EXPECT_LT(cut, Cut(r.ssdtrain_paper, r.keep));
    EXPECT_GT(cut, 0.28);
    EXPECT_LT(cut, 0.65);
    EXPECT_GE(r.keep_set_to_none.paper_activation, r.keep.paper_activation);
    EXPECT_GT(r.ssdtrain_paper_set_to_none.paper_activation, r.ssdtrain_paper.paper_activation);
    EXPECT_LE(r.ssdtrain_paper_set_to_none.paper_activation,
              r.ssdtrain_paper.paper_activation + r.weight_grad_bytes + (int64_t{1} << 20));
  }
}

TEST(PaperTable, OptimalGoesFurtherWithinThreePercent) {
  for (const ModelRow& r : Rows()) {
    SCOPED_TRACE(r.model);
    EXPECT_TRUE(r.optimal_same_budget.fits);
    EXPECT_LE(r.optimal_same_budget.step_ns, r.ssdtrain_paper.step_ns);
    EXPECT_LE(Cost(r.optimal_3pct, r.keep), 0.03);
    EXPECT_GE(Cut(r.optimal_3pct, r.keep), 0.60);
    EXPECT_GE(Cut(r.optimal_3pct, r.keep), Cut(r.ssdtrain_paper, r.keep));
  }
}

// Fig. 7 (ROK, BERT 3 layers, hidden 12K and 14K): at equal batch ssdtrain-paper
// runs within 1% of keep's throughput and peaks below recompute-full; at keep's
// activation peak for batch 8 it fits at least 2x the batch.
TEST(PaperTable, RokEqualThroughputLowerPeakAndTwiceTheBatch) {
  auto rok = RokSweep(kRoot, PaperHardware());
  ASSERT_TRUE(rok.ok()) << rok.status().message();
  ASSERT_EQ(rok->size(), 2 * std::size(kRokBatches));
  for (const RokPoint& p : *rok) {
    SCOPED_TRACE(std::to_string(p.hidden) + " b" + std::to_string(p.batch));
    EXPECT_LE(Cost(p.ssdtrain_paper, p.keep), 0.01);
    EXPECT_LT(p.ssdtrain_paper.paper_activation, p.recompute_full.paper_activation);
    EXPECT_GT(p.recompute_full.step_ns, p.keep.step_ns);
    if (p.batch != 8) continue;
    int64_t largest = 0;
    for (const RokPoint& q : *rok) {
      if (q.hidden == p.hidden && q.ssdtrain_paper.paper_activation <= p.keep.paper_activation) {
        largest = std::max(largest, q.batch);
      }
    }
    EXPECT_GE(largest, 2 * p.batch);
  }
}

// Table III: the write bandwidth a step needs, activations / (step / 2), falls
// as hidden grows (activations grow with h, compute with h²).
TEST(PaperTable, RequiredWriteBandwidthFallsAsHiddenGrows) {
  std::map<std::string, std::vector<double>> by_family;
  for (const ModelRow& r : Rows()) {
    by_family[r.model.substr(0, r.model.find("-h"))].push_back(
        RequiredWriteGBps(r.step_activation_bytes, r.keep.step_ns));
  }
  for (const auto& [family, gbps] : by_family) {
    ASSERT_EQ(gbps.size(), 3u) << family;
    EXPECT_GT(gbps[0], gbps[1]) << family;
    EXPECT_GT(gbps[1], gbps[2]) << family;
  }
}

// §III-D's arithmetic: 10 GB written per 2 s step needs 10 / (2 / 2) = 10 GB/s;
// 4 drives × 600 TB × 2.5 × 86 = 516 PB at 10 GB per 2 s (5 GB/s) last
// 516e15 / 5e9 = 1.032e8 s = 3.27 years (365-day years); the vendor rating alone
// (factor 1) 2.4e15 / 5e9 = 4.8e5 s = 0.0152 years.
TEST(PaperTable, LifespanAndBandwidthFollowThePapersFormulas) {
  constexpr int64_t kBytes = 10'000'000'000;
  constexpr int64_t kStepNs = 2'000'000'000;
  EXPECT_DOUBLE_EQ(RequiredWriteGBps(kBytes, kStepNs), 10.0);
  EXPECT_NEAR(LifespanYears(600, 4, kPaperWafRatio * kPaperRetentionFactor, kBytes, kStepNs),
              516e15 / 5e9 / (365.0 * 86400.0), 1e-9);
  EXPECT_NEAR(LifespanYears(600, 4, 1.0, kBytes, kStepNs), 2.4e15 / 5e9 / (365.0 * 86400.0), 1e-12);
}

// Under the paper's assumptions every paper model whose required bandwidth is at
// most 12.1 GB/s lives over 2 years on 4x 980 PRO (the paper's claim; 12.1 GB/s
// → 516e15 / 6.05e9 s = 2.70 years).
TEST(PaperTable, LifespanOverTwoYearsAtOrBelowTwelveGBps) {
  auto pro = LoadHardware(kRoot + "/configs/hardware/a100-pcie-40gb-4x-980pro.json");
  ASSERT_TRUE(pro.ok()) << pro.status().message();
  EXPECT_EQ(pro->storage.drive.endurance_TBW, 600);
  int checked = 0;
  for (const ModelRow& r : Rows()) {
    if (RequiredWriteGBps(r.step_activation_bytes, r.keep.step_ns) > 12.1) continue;
    ++checked;
    EXPECT_GT(LifespanYears(pro->storage.drive.endurance_TBW, ArrayFor(*pro, 0).drives,
                            kPaperWafRatio * kPaperRetentionFactor, r.step_activation_bytes,
                            r.keep.step_ns),
              2.0)
        << r.model;
  }
  // Not vacuous: some of the nine fall under the bound (4 since collectives are
  // priced by kind: shorter steps need more bandwidth).
  EXPECT_GE(checked, 3);
}

}  // namespace
}  // namespace ssdtrain::sim::paper

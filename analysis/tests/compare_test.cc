#include "analysis/compare.h"

#include <gtest/gtest.h>

#include <sstream>

namespace ssdtrain::analysis {
namespace {

traces::StepReport Report(std::string kind, int64_t step_ns) {
  traces::StepReport r;
  r.kind = std::move(kind);
  r.model = "tiny-gpt";
  r.trace_fingerprint = 0x1234;
  r.metrics.step_time_ns = step_ns;
  r.lane_busy_ns["compute"] = step_ns;
  r.ops = {{0, 0, 100, "embed"}, {1, 100, 400, "L0.qkv"}, {2, 400, step_ns, "L0.adam"}};
  return r;
}

TEST(Compare, RelativeErrorIsAgainstMeasured) {
  // predicted 110 ms, measured 100 ms: +10%.
  Result<Comparison> c = Compare(Report("prediction", 110'000'000), Report("run", 100'000'000));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->metrics[0].name, "step_time");
  EXPECT_NEAR(c->metrics[0].relative_error, 0.10, 1e-12);
}

TEST(Compare, WorstOpsSortedByAbsoluteError) {
  traces::StepReport p = Report("prediction", 1000);
  traces::StepReport m = Report("run", 1000);
  m.ops[1].end_ns = 700;  // op 1: predicted 300 ns, measured 600 ns -> error 300
  m.ops[0].end_ns = 150;  // op 0: predicted 100, measured 150 -> error 50
  Result<Comparison> c = Compare(p, m, 2);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->worst_ops.size(), 2u);
  EXPECT_EQ(c->worst_ops[0].op, 1);
  EXPECT_EQ(c->worst_ops[0].abs_error_ns, 300);
}

TEST(Compare, WorstOpsNamedAsTheTraceNamesThem) {
  traces::StepReport p = Report("prediction", 1000);
  traces::StepReport m = Report("run", 1000);
  m.ops[1].end_ns = 700;
  // A measured report from before op names: the prediction's name is used.
  for (traces::OpTiming& t : m.ops) t.name.clear();
  Result<Comparison> c = Compare(p, m, 1);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->worst_ops.size(), 1u);
  EXPECT_EQ(c->worst_ops[0].name, "L0.qkv");
  std::ostringstream out;
  PrintComparison(*c, out);
  EXPECT_NE(out.str().find("       1 L0.qkv "), std::string::npos) << out.str();
  // Neither side named: the row says so with "-" rather than a blank column.
  for (traces::OpTiming& t : p.ops) t.name.clear();
  c = Compare(p, m, 1);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->worst_ops[0].name, "");
  out.str("");
  PrintComparison(*c, out);
  EXPECT_NE(out.str().find("       1 -    "), std::string::npos) << out.str();
}

TEST(Compare, TimingOfNamesTheOpFromTheTrace) {
  traces::Trace trace;
  trace.ops.resize(2);
  trace.ops[0].name = "embed";
  trace.ops[1].id = 1;
  trace.ops[1].name = "L3.adam";
  const traces::OpTiming t = traces::TimingOf(trace, 1, 10, 30);
  EXPECT_EQ(t.op, 1);
  EXPECT_EQ(t.start_ns, 10);
  EXPECT_EQ(t.end_ns, 30);
  EXPECT_EQ(t.name, "L3.adam");
  EXPECT_EQ(traces::TimingOf(trace, 7, 0, 1).name, "");  // not in the trace: unnamed
}

TEST(Compare, ReportWithoutOpNamesStillLoads) {
  nlohmann::json j = traces::ToJson(Report("run", 5000));
  ASSERT_EQ(j["ops"][1]["name"], "L0.qkv");
  for (nlohmann::json& op : j["ops"]) op.erase("name");
  Result<traces::StepReport> back = traces::StepReportFromJson(j, "old-run.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->ops.size(), 3u);
  EXPECT_EQ(back->ops[1].name, "");
  EXPECT_EQ(back->ops[1].end_ns, 400);
  // A name of the wrong type is refused, naming the field.
  j["ops"][1]["name"] = 5;
  Result<traces::StepReport> bad = traces::StepReportFromJson(j, "bad-run.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ops[1].name"), std::string::npos)
      << bad.status().ToString();
}

TEST(Compare, EachStagesPeaksBesideTheLargestOfItsRanks) {
  // Stage 1's predicted peak is 100 bytes; its two ranks measured 90 and 120,
  // so its row says 100 against 120: -16.7%.
  traces::StepReport p = Report("prediction", 1000);
  p.extra["details"]["stages"] = {
      {{"stage", 0}, {"peak_gpu_bytes", 50}, {"peak_activation_bytes", 20}},
      {{"stage", 1}, {"peak_gpu_bytes", 100}, {"peak_activation_bytes", 40}}};
  traces::StepReport m = Report("run", 1000);
  m.extra["ranks"] = nlohmann::json::array();
  for (auto [stage, device] : {std::pair{0, 50}, {0, 50}, {1, 90}, {1, 120}}) {
    m.extra["ranks"].push_back(
        {{"stage", stage}, {"peak_device_bytes", device}, {"peak_activation_bytes", 40}});
  }
  Result<Comparison> c = Compare(p, m);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const MetricRow* stage1 = nullptr;
  for (const MetricRow& r : c->metrics) {
    if (r.name == "stage1.peak_device") stage1 = &r;
  }
  ASSERT_NE(stage1, nullptr);
  EXPECT_EQ(stage1->predicted, 100);
  EXPECT_EQ(stage1->measured, 120);
  EXPECT_NEAR(stage1->relative_error, -20.0 / 120.0, 1e-12);
  // Without per-stage predictions (one stage, or an older report), no rows.
  Result<Comparison> plain = Compare(Report("prediction", 1000), m);
  ASSERT_TRUE(plain.ok());
  for (const MetricRow& r : plain->metrics) EXPECT_EQ(r.name.rfind("stage", 0), std::string::npos);
}

TEST(Compare, RefusesDifferentTraces) {
  traces::StepReport m = Report("run", 1000);
  m.trace_fingerprint = 0x9999;
  Result<Comparison> c = Compare(Report("prediction", 1000), m);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("different traces"), std::string::npos);
}

TEST(Compare, RefusesTwoPredictions) {
  EXPECT_FALSE(Compare(Report("prediction", 1), Report("prediction", 1)).ok());
}

TEST(Compare, ReportJsonRoundTrip) {
  traces::StepReport r = Report("run", 5000);
  r.verified = true;
  Result<traces::StepReport> back = traces::StepReportFromJson(traces::ToJson(r), "run.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(traces::ToJson(*back), traces::ToJson(r));
}

TEST(Compare, CsvHasHeaderAndOneLinePerRow) {
  Result<Comparison> c = Compare(Report("prediction", 1000), Report("run", 1000));
  ASSERT_TRUE(c.ok());
  std::ostringstream out;
  WriteCsv(*c, out);
  const std::string csv = out.str();
  EXPECT_EQ(csv.rfind("kind,name,unit,predicted,measured,relative_error\n", 0), 0u);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'),
            1 + static_cast<long>(c->metrics.size() + c->worst_ops.size()));
}

}  // namespace
}  // namespace ssdtrain::analysis

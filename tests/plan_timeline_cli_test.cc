// End to end: `ssdtrain plan --timeline` of a whole step (m micro-batches)
// shows every op of each micro-batch and the I/O lanes, as a replay's
// timeline does, not only the pipeline's passes (issue 30 item 7).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "tests/cli_util.h"
#include "traces/io.h"

namespace ssdtrain {
namespace {

using testing::CliResult;
using testing::RunSsdtrain;

class PlanTimelineCli : public testing::CliTest {
 protected:
  PlanTimelineCli() : CliTest("plan-timeline-cli") {}
};

TEST_F(PlanTimelineCli, WholeStepShowsEveryForwardOpPerMicroBatchAndTheSsdLanes) {
  const std::string model = Model("tiny-gpt");
  // 4 micro-batches of 4 under 0.1 GiB: offload-ssd writes to the SSD.
  CliResult r = RunSsdtrain("plan --model " + model + " --hardware " + Hardware("cpu-local") +
                            " --memory-budget 0.1 --micro-batch 4 "
                            "--num-micro-batches 4 --policy offload-ssd -o " +
                            File("plan.json") + " --timeline " + File("tl.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(
      RunSsdtrain("trace --model " + model + " --micro-batch 4 -o " + File("t.json")).exit_code, 0);
  Result<traces::Trace> trace = traces::ReadTrace(File("t.json"));
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  Result<nlohmann::json> tl = traces::ReadJsonFile(File("tl.json"));
  ASSERT_TRUE(tl.ok()) << tl.status().ToString();
  const nlohmann::json& events = tl->is_object() ? tl->at("traceEvents") : *tl;

  std::map<int, std::string> lanes;  // tid -> thread name
  for (const nlohmann::json& e : events) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name") {
      lanes[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
    }
  }
  std::map<int, std::map<traces::OpId, int>> ops;  // micro-batch -> op -> spans
  std::map<std::string, std::set<int>> io;         // lane -> micro-batches with a span
  for (const nlohmann::json& e : events) {
    if (e.value("ph", "") != "X") continue;
    const int mb = e.at("args").value("micro_batch", -1);
    const std::string& lane = lanes[e.at("tid").get<int>()];
    if (e.at("args").contains("op")) {
      EXPECT_EQ(lane, "stage 0 compute");
      ++ops[mb][e.at("args").at("op").get<traces::OpId>()];
    } else if (lane != "stage 0 compute") {
      io[lane].insert(mb);
    }
  }
  ASSERT_EQ(ops.size(), 4u);
  for (const auto& [mb, seen] : ops) {
    for (const traces::Op& op : trace->ops) {
      if (op.phase != traces::Phase::kForward) continue;
      EXPECT_EQ(seen.count(op.id) ? seen.at(op.id) : 0, 1)
          << "micro-batch " << mb << " op " << op.id << " " << op.name;
    }
    for (const auto& [id, n] : seen) EXPECT_EQ(n, 1) << "micro-batch " << mb << " op " << id;
  }
  for (const char* lane : {"stage 0 d2h", "stage 0 ssd_write", "stage 0 ssd_read", "stage 0 h2d"}) {
    EXPECT_EQ(io[lane], (std::set<int>{0, 1, 2, 3})) << lane;
  }
}

}  // namespace
}  // namespace ssdtrain

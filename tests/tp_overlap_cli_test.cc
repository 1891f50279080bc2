// End to end: the tensor-parallel overlap flags of `ssdtrain trace` and
// `plan` (models/README.md, "TP communication overlap"): what the trace marks,
// what the header and the plan record, what each refuses, and what the
// overlap hides from the step.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/cli_util.h"
#include "traces/io.h"
#include "traces/plan.h"

namespace ssdtrain {
namespace {

using testing::RunSsdtrain;
using testing::SourceDir;

class TpOverlapCli : public testing::CliTest {
 protected:
  TpOverlapCli() : CliTest("tp-overlap-cli") {}
};

// --tp-comm-overlap marks the sequence-parallel collectives (traces::TpOverlap),
// needs sequence parallelism, and a plan of a trace built without it refuses the flag.
TEST_F(TpOverlapCli, TpCommOverlapMarksTheCollectivesAndIsRefusedWhereItCannotHold) {
  const std::string model = SourceDir() + "/configs/models/gpt-1.3b.json";
  testing::CliResult r = RunSsdtrain("trace --model " + model +
                                     " --seq-len 512 --tp 2 --sequence-parallel "
                                     "--tp-comm-overlap -o " +
                                     File("ub.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Result<traces::Trace> t = traces::ReadTrace(File("ub.json"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->header.tp_comm_overlap);
  int marked = 0;
  for (const traces::Op& op : t->ops) marked += op.tp_overlap ? 1 : 0;
  // models/README.md: ten a block, and the output layer's backward pair
  // through NCCL (the asynchronous tp backward; it is no TE module).
  EXPECT_EQ(marked, 10 * t->header.layers + 2);

  r = RunSsdtrain("trace --model " + model + " --tp 2 --tp-comm-overlap -o " + File("no.json"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--tp-comm-overlap: tp_comm_overlap: true needs sequence_parallel"),
            std::string::npos)
      << r.output;

  r = RunSsdtrain("trace --model " + model + " --seq-len 512 --tp 2 --sequence-parallel -o " +
                  File("sp.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = RunSsdtrain("plan --trace " + File("sp.json") + " --hardware " + SourceDir() +
                  "/configs/hardware/dgx-h100.json --policy keep --tp-comm-overlap -o " +
                  File("plan.json"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--tp-comm-overlap contradicts the trace"), std::string::npos)
      << r.output;
}

// --no-tp-backward-overlap: the column-parallel layers' backward collectives
// after their GEMMs (Megatron-LM before 2021-08-30); the trace's header and
// the plan record it, a plan of a trace built with the overlap refuses the
// flag, and the step is longer by what the overlap hid.
TEST_F(TpOverlapCli, NoTpBackwardOverlapIsRecordedPricedAndRefusedWhereItCannotHold) {
  const std::string model = SourceDir() + "/configs/models/gpt-1.3b.json";
  const std::string h100 = SourceDir() + "/configs/hardware/dgx-h100.json";
  testing::CliResult r = RunSsdtrain(
      "trace --model " + model + " --micro-batch 1 --seq-len 512 --tp 2 -o " + File("async.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = RunSsdtrain("trace --model " + model +
                  " --micro-batch 1 --seq-len 512 --tp 2 --no-tp-backward-overlap -o " +
                  File("serial.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Result<traces::Trace> async = traces::ReadTrace(File("async.json"));
  const Result<traces::Trace> serial = traces::ReadTrace(File("serial.json"));
  ASSERT_TRUE(async.ok() && serial.ok());
  EXPECT_TRUE(async->header.tp_backward_overlap);
  EXPECT_FALSE(serial->header.tp_backward_overlap);
  auto marked = [](const traces::Trace& t) {
    int n = 0;
    for (const traces::Op& op : t.ops) n += op.tp_overlap ? 1 : 0;
    return n;
  };
  // Each block's qkv and fc1 data-gradient all-reduces, and the output layer's.
  EXPECT_EQ(marked(*async), 2 * async->header.layers + 1);
  EXPECT_EQ(marked(*serial), 0);

  auto plan = [&](const std::string& args, const std::string& out) {
    return RunSsdtrain("plan " + args + " --hardware " + h100 + " --policy keep -o " + File(out) +
                       " --prediction " + File(out + ".pred"));
  };
  const std::string shape =
      " --gpus 2 --tp 2 --pp 1 --micro-batch 1 --global-batch 1 --seq-len 512";
  r = plan("--trace " + File("async.json") + " --no-tp-backward-overlap", "refused.json");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--no-tp-backward-overlap contradicts the trace"), std::string::npos)
      << r.output;
  r = plan("--model " + model + shape, "on.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = plan("--model " + model + shape + " --no-tp-backward-overlap", "off.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tp 2 (tp backward collectives in order) pp 1"), std::string::npos)
      << r.output;
  // The command it prints for its trace builds it as the plan says.
  EXPECT_NE(r.output.find("--tp 2 --pp 1 --no-tp-backward-overlap"), std::string::npos) << r.output;
  const Result<traces::Plan> on = traces::ReadPlan(File("on.json"));
  const Result<traces::Plan> off = traces::ReadPlan(File("off.json"));
  ASSERT_TRUE(on.ok() && off.ok());
  EXPECT_TRUE(on->tp_backward_overlap);
  EXPECT_FALSE(off->tp_backward_overlap);
  auto step_ns = [&](const std::string& prediction) {
    return nlohmann::json::parse(std::ifstream(File(prediction))).at("step_time_ns").get<int64_t>();
  };
  EXPECT_LT(step_ns("on.json.pred"), step_ns("off.json.pred"));
  // Each plan simulates on the trace built as it says, and refuses the other.
  r = RunSsdtrain("simulate --trace " + File("serial.json") + " --plan " + File("off.json") +
                  " --hardware " + h100 + " -o " + File("off.sim"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(step_ns("off.sim"), step_ns("off.json.pred"));
  r = RunSsdtrain("simulate --trace " + File("async.json") + " --plan " + File("off.json") +
                  " --hardware " + h100 + " -o " + File("mixed.sim"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("tp_backward_overlap: the plan runs the column-parallel layers' "
                          "backward collectives after their GEMMs, the trace beside their GEMMs"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace ssdtrain

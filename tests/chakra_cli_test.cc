// ssdtrain export --chakra, read back by an independent decoder: Python's
// protobuf with a module protoc makes from traces/schema/chakra_et.proto
// (tests/chakra_decode.py). The node and dependency counts must be the
// trace's ops, producers and edges, and the plan's SSD writes and reads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "tests/cli_util.h"
#include "traces/io.h"
#include "traces/plan.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::RunSsdtrain;
using testing::Shell;

class ChakraCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ssdtrain-chakra-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string File(const std::string& name) const { return (dir_ / name).string(); }
  static std::string Config(const std::string& rel) {
    return testing::SourceDir() + "/configs/" + rel;
  }

  // The file decoded by Python's protobuf: its JSON summary.
  nlohmann::json Decode(const std::string& et) const {
    const std::string py = File("py");
    fs::create_directories(py);
    CliResult r = Shell("protoc -I " + testing::SourceDir() + "/traces/schema --python_out=" + py +
                        " chakra_et.proto");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    r = Shell("/usr/bin/python3 " + testing::SourceDir() + "/tests/chakra_decode.py " + py + " " +
              et + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output, nullptr, false);
  }
  fs::path dir_;
};

TEST_F(ChakraCli, APlansStepDecodesToTheTracesOpsEdgesAndSsdTransfers) {
  ASSERT_EQ(RunSsdtrain("trace --model " + Config("models/tiny-gpt.json") + " -o " + File("t.json"))
                .exit_code,
            0);
  CliResult r =
      RunSsdtrain("plan --trace " + File("t.json") + " --hardware " +
                  Config("hardware/cpu-local.json") + " --policy offload-ssd -o " + File("p.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = RunSsdtrain("export --chakra --trace " + File("t.json") + " --plan " + File("p.json") +
                  " --hardware " + Config("hardware/cpu-local.json") + " -o " + File("step.et"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Chakra ET 0.0.4"), std::string::npos) << r.output;

  const Result<traces::Trace> trace = traces::ReadTrace(File("t.json"));
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  const Result<traces::Plan> plan = traces::ReadPlan(File("p.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  // What the file must hold, counted from the trace and the plan.
  int64_t data_deps = 0, ctrl_deps = 0, transfers = 0;
  for (const traces::Op& op : trace->ops) {
    std::set<traces::OpId> producers;
    for (traces::TensorId t : op.inputs) {
      const traces::OpId p = trace->tensor(t).producer;
      if (p != traces::kNoOp && p != op.id) producers.insert(p);
    }
    data_deps += static_cast<int64_t>(producers.size());
  }
  std::set<std::pair<traces::OpId, traces::OpId>> edges;
  for (const traces::Edge& e : trace->edges) edges.emplace(e.from, e.to);
  ctrl_deps = static_cast<int64_t>(edges.size());
  for (const traces::Placement& p : plan->placements) {
    if (p.action != traces::TensorAction::kOffloadSsd) continue;
    ++transfers;
    // The write after its producer, the read after the write, and the
    // storage's first backward consumer after the read.
    data_deps += 3;
    if (p.prefetch_before != traces::kNoOp) ++ctrl_deps;
  }
  ASSERT_GT(transfers, 0) << "the plan offloads nothing";

  const nlohmann::json d = Decode(File("step.et"));
  ASSERT_TRUE(d.is_object()) << d;
  EXPECT_EQ(d["version"], "0.0.4");
  EXPECT_EQ(d["tensors"], trace->tensors.size());
  EXPECT_EQ(d["types"]["COMP_NODE"], trace->ops.size()) << d["types"];
  EXPECT_EQ(d["types"]["MEM_STORE_NODE"], transfers);
  EXPECT_EQ(d["types"]["MEM_LOAD_NODE"], transfers);
  EXPECT_EQ(d["data_deps"], data_deps);
  EXPECT_EQ(d["ctrl_deps"], ctrl_deps);
  EXPECT_GT(d["duration_micros"].get<int64_t>(), 0) << "no simulated times";
  for (const char* attr : {"is_cpu_op", "num_ops", "ssdtrain.kind", "ssdtrain.phase",
                           "ssdtrain.inputs", "ssdtrain.outputs", "ssdtrain.gemm"}) {
    EXPECT_NE(std::find(d["op_attrs"].begin(), d["op_attrs"].end(), attr), d["op_attrs"].end())
        << attr;
  }
  // Each transfer carries its tensor's bytes; node ids are unique.
  std::set<uint64_t> ids;
  int64_t transfer_bytes = 0;
  for (const nlohmann::json& n : d["nodes"]) {
    EXPECT_TRUE(ids.insert(n["id"].get<uint64_t>()).second) << n;
    if (!n["tensor_size"].is_null()) transfer_bytes += n["tensor_size"].get<int64_t>();
  }
  int64_t offloaded = 0;
  for (const traces::Placement& p : plan->placements) {
    if (p.action == traces::TensorAction::kOffloadSsd) offloaded += trace->tensor(p.tensor).bytes;
  }
  EXPECT_EQ(transfer_bytes, 2 * offloaded);
}

TEST_F(ChakraCli, TensorParallelCollectivesCarryTheirCommTypeAndSize) {
  ASSERT_EQ(RunSsdtrain("trace --model " + Config("models/tiny-gpt.json") + " --tp 2 -o " +
                        File("t.json"))
                .exit_code,
            0);
  const CliResult r =
      RunSsdtrain("export --chakra --trace " + File("t.json") + " -o " + File("t.et"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json d = Decode(File("t.et"));
  ASSERT_TRUE(d.is_object()) << d;
  const Result<traces::Trace> trace = traces::ReadTrace(File("t.json"));
  ASSERT_TRUE(trace.ok());
  size_t collectives = 0;
  for (const traces::Op& op : trace->ops) collectives += op.kind == traces::OpKind::kCollective;
  ASSERT_GT(collectives, 0u);
  EXPECT_EQ(d["types"]["COMM_COLL_NODE"], collectives);
  EXPECT_EQ(d["collectives"].size(), collectives);
  for (const nlohmann::json& c : d["collectives"]) {
    EXPECT_EQ(c[0], "ALL_REDUCE") << c;  // Megatron's tp all-reduces
    EXPECT_GT(c[1].get<int64_t>(), 0) << c;
  }
  EXPECT_EQ(d["types"].count("MEM_STORE_NODE"), 0u) << "no plan, no transfers";
}

// Export, import, plan: the same plan and prediction as from the trace itself.
TEST_F(ChakraCli, APlanOfTheExportedTraceIsThePlanOfTheTrace) {
  ASSERT_EQ(
      RunSsdtrain("trace --model " + Config("models/small-gpt.json") + " -o " + File("t.json"))
          .exit_code,
      0);
  CliResult r = RunSsdtrain("export --chakra --trace " + File("t.json") + " -o " + File("t.et"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* from : {"t.json", "t.et"}) {
    const std::string stem = std::string(from) == "t.json" ? "json" : "et";
    r = RunSsdtrain("plan --trace " + File(from) + " --hardware " +
                    Config("hardware/cpu-local.json") + " -o " + File(stem + "-plan.json") +
                    " --prediction " + File(stem + "-prediction.json"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  auto read = [&](const std::string& name) {
    const Result<nlohmann::json> j = traces::ReadJsonFile(File(name));
    EXPECT_TRUE(j.ok()) << name;
    return j.ok() ? *j : nlohmann::json();
  };
  const nlohmann::json a = read("json-plan.json"), b = read("et-plan.json");
  EXPECT_EQ(a["trace_fingerprint"], b["trace_fingerprint"]);
  EXPECT_EQ(a["policy"], b["policy"]);
  EXPECT_EQ(a["placements"], b["placements"]);
  EXPECT_EQ(a["memory_budget_bytes"], b["memory_budget_bytes"]);
  EXPECT_EQ(read("json-prediction.json"), read("et-prediction.json"));
}

TEST_F(ChakraCli, ATruncatedChakraTraceIsRefusedNamingTheFile) {
  ASSERT_EQ(RunSsdtrain("trace --model " + Config("models/tiny-gpt.json") + " -o " + File("t.json"))
                .exit_code,
            0);
  ASSERT_EQ(
      RunSsdtrain("export --chakra --trace " + File("t.json") + " -o " + File("t.et")).exit_code,
      0);
  fs::resize_file(File("t.et"), fs::file_size(File("t.et")) - 10);
  const CliResult r = RunSsdtrain("plan --trace " + File("t.et") + " --hardware " +
                                  Config("hardware/cpu-local.json") + " -o " + File("p.json"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(File("t.et") + ": message "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("runs past the end of the file"), std::string::npos) << r.output;
}

TEST_F(ChakraCli, AnExportWithoutAFormatOrWithAPlanButNoHardwareIsRefused) {
  CliResult r = RunSsdtrain("export --trace x.json -o " + File("x.et"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--chakra"), std::string::npos) << r.output;
  r = RunSsdtrain("export --chakra --trace x.json --plan p.json -o " + File("x.et"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--plan and --hardware go together"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(File("x.et")));
}

}  // namespace
}  // namespace ssdtrain

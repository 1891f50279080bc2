// End to end: `ssdtrain trace` on the shipped configs, round trips through
// JSON and CBOR, and the CLI's handling of bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "models/build_trace.h"
#include "models/model_config.h"
#include "tests/cli_util.h"
#include "traces/io.h"
#include "traces/plan.h"
#include "traces/validate.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::RunSsdtrain;
using testing::SourceDir;

class TraceCli : public testing::CliTest {
 protected:
  TraceCli() : CliTest("cli") {}
  std::string Write(const std::string& name, const std::string& text) const {
    std::ofstream(File(name)) << text;
    return File(name);
  }
};

// Every shipped config traces (all stages), and its trace survives
// JSON -> CBOR -> JSON byte for byte.
TEST_F(TraceCli, EveryConfigRoundTripsJsonCborJson) {
  int configs = 0;
  for (const auto& entry : fs::directory_iterator(SourceDir() + "/configs/models")) {
    if (entry.path().extension() != ".json") continue;
    ++configs;
    Result<models::ModelConfig> c = models::LoadModelConfig(entry.path().string());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    Result<traces::Trace> t = models::BuildTrace(*c, 0);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE(traces::WriteTrace(*t, File("a.json")).ok());
    Result<traces::Trace> a = traces::ReadTrace(File("a.json"));
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(traces::WriteTrace(*a, File("b.cbor")).ok());
    Result<traces::Trace> b = traces::ReadTrace(File("b.cbor"));
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    ASSERT_TRUE(traces::WriteTrace(*b, File("c.json")).ok());
    std::ifstream fa(File("a.json")), fc(File("c.json"));
    const std::string sa((std::istreambuf_iterator<char>(fa)), {});
    const std::string sc((std::istreambuf_iterator<char>(fc)), {});
    EXPECT_EQ(sa, sc) << entry.path();
    EXPECT_EQ(traces::Fingerprint(*b), traces::Fingerprint(*t)) << entry.path();
  }
  EXPECT_GE(configs, 20);
}

TEST_F(TraceCli, WritesAValidTraceAndPrintsTheSummary) {
  testing::CliResult r =
      RunSsdtrain("trace --model " + SourceDir() + "/configs/models/tiny-gpt.json --summary -o " +
                  File("t.cbor"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("total"), std::string::npos) << r.output;
  Result<traces::Trace> t = traces::ReadTrace(File("t.cbor"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->header.model, "tiny-gpt");
}

TEST_F(TraceCli, FlagsOverrideTheConfig) {
  testing::CliResult r =
      RunSsdtrain("trace --model " + SourceDir() +
                  "/configs/models/gpt-1.3b.json --micro-batch 2 --seq-len 512 --tp 2 "
                  "--sequence-parallel --attention flash --dtype bf16 -o " +
                  File("t.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Result<traces::Trace> t = traces::ReadTrace(File("t.json"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->header.micro_batch, 2);
  EXPECT_EQ(t->header.seq_len, 512);
  EXPECT_EQ(t->header.tp, 2);
  EXPECT_TRUE(t->header.sequence_parallel);
  EXPECT_EQ(t->header.attention, "flash");
  EXPECT_EQ(t->header.dtype, "bf16");
}

// --attention-kernel names the fused kernel the attention is priced on: the
// trace and the plan record it, the hardware must have its curves, it needs
// flash attention, and a plan of a trace built without it refuses the flag.
TEST_F(TraceCli, AttentionKernelIsRecordedPricedAndRefusedWhereItCannotHold) {
  const std::string model = SourceDir() + "/configs/models/gpt-1.3b.json";
  const std::string h100 = SourceDir() + "/configs/hardware/dgx-h100.json";
  testing::CliResult r = RunSsdtrain("trace --model " + model +
                                     " --seq-len 2048 --attention flash --attention-kernel flash2 "
                                     "-o " +
                                     File("k.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Result<traces::Trace> t = traces::ReadTrace(File("k.json"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->header.attention_kernel, "flash2");
  r = RunSsdtrain("trace --model " + model + " --seq-len 2048 --attention flash -o " +
                  File("plain.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;

  // The same ops on flash-attn 2's curves (a causal forward at 2k: 30% of
  // peak on the half it computes) take longer than on the one figure (0.75 on
  // every pair); the plan records the kernel.
  auto step_ms = [&](const std::string& trace, const std::string& name) {
    const testing::CliResult p =
        RunSsdtrain("plan --trace " + File(trace) + " --hardware " + h100 + " --policy keep -o " +
                    File(name) + " --prediction " + File(name + ".p"));
    EXPECT_EQ(p.exit_code, 0) << p.output;
    const Result<nlohmann::json> j = traces::ReadJsonFile(File(name + ".p"));
    return j.ok() ? j->at("step_time_ns").get<double>() / 1e6 : 0.0;
  };
  EXPECT_GT(step_ms("k.json", "kplan.json"), step_ms("plain.json", "plan.json"));
  const Result<nlohmann::json> plan = traces::ReadJsonFile(File("kplan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->at("attention_kernel"), "flash2");
  // A trace without it still matches that plan (it changes no op); simulate says whose kernel.
  r = RunSsdtrain("simulate --trace " + File("plain.json") + " --plan " + File("kplan.json") +
                  " --hardware " + h100 + " -o " + File("sim.json"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("was priced on attention kernel flash2, the trace"), std::string::npos)
      << r.output;

  r = RunSsdtrain("plan --trace " + File("k.json") + " --hardware " + SourceDir() +
                  "/configs/hardware/a100-pcie-40gb-4x-980pro.json --policy keep -o " +
                  File("a.json"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("no curves for the attention kernel \"flash2\""), std::string::npos)
      << r.output;
  r = RunSsdtrain("plan --model " + model + " --hardware " + h100 +
                  " --attention flash --attention-kernel flash4 --gpus 8 -o " + File("b.json"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("it has cudnn, flash2, flash3"), std::string::npos) << r.output;
  r = RunSsdtrain("trace --model " + model + " --attention standard --attention-kernel flash2 -o " +
                  File("s.json"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("attention_kernel: names the kernel flash attention runs as"),
            std::string::npos)
      << r.output;
  r = RunSsdtrain("plan --trace " + File("plain.json") + " --hardware " + h100 +
                  " --policy keep --attention-kernel flash2 -o " + File("c.json"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--attention-kernel flash2 contradicts the trace"), std::string::npos)
      << r.output;
}

// torchtitan's block kernels and the gradients' dtype as flags
// (traces::kBlockKernels; models/README.md, "Block kernels", "Gradient
// dtype"): a trace built with them is the trace of a config that sets them,
// its header names them, a plan records them and a replay from the model
// config rebuilds its trace with them (the plan's fingerprint matches); a
// flag that contradicts a trace is refused, naming the header field.
TEST_F(TraceCli, BlockKernelFlagsBuildRecordAndReplayAsTheConfigFields) {
  nlohmann::json config = {{"name", "tiny-llama"}, {"family", "llama"}, {"hidden", 256},
                           {"heads", 4},           {"kv_heads", 2},     {"layers", 2},
                           {"vocab", 1024},        {"seq_len", 128},    {"micro_batch", 2},
                           {"attention", "flash"}, {"dtype", "bf16"}};
  const std::string model = Write("tiny-llama.json", config.dump());
  const std::string flags = " --rotary complex --gqa repeat --norm eager --grad-dtype fp32";
  testing::CliResult r = RunSsdtrain("trace --model " + model + flags + " -o " + File("f.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  config.update(
      {{"rotary", "complex"}, {"gqa", "repeat"}, {"norm", "eager"}, {"grad_dtype", "fp32"}});
  fs::create_directories(File("set"));
  const std::string set = Write("set/tiny-llama.json", config.dump());
  r = RunSsdtrain("trace --model " + set + " -o " + File("c.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Result<traces::Trace> flagged = traces::ReadTrace(File("f.json"));
  Result<traces::Trace> configured = traces::ReadTrace(File("c.json"));
  ASSERT_TRUE(flagged.ok() && configured.ok());
  EXPECT_EQ(traces::Fingerprint(*flagged), traces::Fingerprint(*configured));
  EXPECT_EQ(flagged->header.block_kernels, (traces::BlockKernels{"complex", "repeat", "eager"}));
  EXPECT_EQ(flagged->header.grad_dtype, "fp32");
  EXPECT_EQ(flagged->header.block_kernels, configured->header.block_kernels);

  r = RunSsdtrain("plan --model " + model + flags + " --hardware " + SourceDir() +
                  "/configs/hardware/cpu-local.json --gpus 1 --policy recompute-full -o " +
                  File("p.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--rotary complex --gqa repeat --norm eager --grad-dtype fp32"),
            std::string::npos)
      << r.output;  // the trace command it prints
  Result<traces::Plan> plan = traces::ReadPlan(File("p.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->block_kernels, flagged->header.block_kernels);
  EXPECT_EQ(plan->grad_dtype, "fp32");
  fs::create_directories(File("off"));
  r = RunSsdtrain("replay --model " + model + " --plan " + File("p.json") +
                  " --backend cpu --steps 1 --dir " + File("off") + " -o " + File("run.json"));
  EXPECT_EQ(r.exit_code, 0) << r.output;

  r = RunSsdtrain("trace --model " + model + " -o " + File("plain.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = RunSsdtrain("plan --trace " + File("plain.json") + " --hardware " + SourceDir() +
                  "/configs/hardware/cpu-local.json --norm eager -o " + File("x.json"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--norm eager contradicts the trace " + File("plain.json") +
                          " (built with norm fused: header.norm)"),
            std::string::npos)
      << r.output;
  r = RunSsdtrain("trace --model " + model + " --norm layer -o " + File("y.json"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--norm"), std::string::npos) << r.output;
}

// Bad input: one line naming the file and field, exit 1, no output file.
TEST_F(TraceCli, InconsistentFlagFailsCleanly) {
  testing::CliResult r = RunSsdtrain("trace --model " + SourceDir() +
                                     "/configs/models/gpt-1.3b.json --tp 5 -o " + File("t.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("tp: 5 does not divide heads 16"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(File("t.json")));
}

TEST_F(TraceCli, MalformedConfigNamesFileAndField) {
  const std::string cfg = Write("bad.json", R"({"name": "bad", "family": "gpt", "hidden": "big"})");
  testing::CliResult r = RunSsdtrain("trace --model " + cfg + " -o " + File("t.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(cfg), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hidden"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("terminate"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(File("t.json")));
}

TEST_F(TraceCli, MissingConfigFails) {
  testing::CliResult r = RunSsdtrain("trace --model " + File("nope.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("nope.json"), std::string::npos) << r.output;
}

TEST_F(TraceCli, UnwritableOutputFailsWithoutPartialFile) {
  testing::CliResult r =
      RunSsdtrain("trace --model " + SourceDir() + "/configs/models/tiny-gpt.json -o " +
                  File("no-such-dir/t.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("no-such-dir/t.json"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(TraceCli, UnknownFlagValueIsRejected) {
  testing::CliResult r = RunSsdtrain("trace --model " + SourceDir() +
                                     "/configs/models/tiny-gpt.json --attention sparse");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--attention"), std::string::npos) << r.output;
}

// A Hugging Face config.json: read from its folder, the summary says what was
// read and assumed and prints the parameter count (Llama-3-8B: 8,030,261,248).
TEST_F(TraceCli, HuggingFaceFolderTracesWithWhatWasReadAndAssumed) {
  testing::CliResult r = RunSsdtrain("trace --model " + SourceDir() +
                                     "/models/tests/hf/meta-llama-3-8b-instruct --summary");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("read:    num_key_value_heads 8 -> kv_heads"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("assumed: seq_len 4096: min(max positions 8192, 4096)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("parameters: 8030261248"), std::string::npos) << r.output;
}

// A malformed Hugging Face file: one line naming the file and the field, exit 1,
// no output file.
TEST_F(TraceCli, MalformedHuggingFaceConfigNamesFileAndFieldAndWritesNothing) {
  fs::create_directories(dir_ / "bad");
  const std::string cfg = Write("bad/config.json", R"({"model_type": "llama", "hidden_size": 4096,
      "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 5,
      "intermediate_size": 11008, "vocab_size": 32000, "max_position_embeddings": 4096})");
  testing::CliResult r = RunSsdtrain("trace --model " + cfg + " -o " + File("t.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.output, "ssdtrain trace: error: " + cfg +
                          ": num_key_value_heads: 5 does not divide num_attention_heads 32\n");
  EXPECT_FALSE(fs::exists(File("t.json")));
}

// A mixture-of-experts file (Qwen3-30B-A3B's real config.json): --summary prints
// the total and the active parameters (models/tests/moe_test.cc derives both).
TEST_F(TraceCli, MixtureOfExpertsHuggingFaceConfigPrintsTotalAndActiveParameters) {
  testing::CliResult r = RunSsdtrain("trace --model " + SourceDir() +
                                     "/models/tests/hf/qwen3-30b-a3b --seq-len 64 --summary");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("parameters: 30532122624 (30.532 B"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("active parameters per token: 3353032704 (3.353 B; 8 of 128 experts "
                          "in 48 of 48 layers)"),
            std::string::npos)
      << r.output;
}

// DeepSeek-V3's real file: the MTP depth's parameters apart from the main
// model's 671 B, and the active count without the input embedding, DeepSeek's
// corrected 36.6 B (models/tests/mla_test.cc).
TEST_F(TraceCli, DeepseekV3SummarySaysItsMtpAndActiveParametersAsPublished) {
  testing::CliResult r = RunSsdtrain("trace --model " + SourceDir() +
                                     "/models/tests/hf/deepseek-v3 --seq-len 64 --summary");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("multi-token prediction: 11610067968 parameters (11.610 B) in 1 "
                          "depth(s); the main model 671026404352 (671.026 B)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("active parameters without the input embedding or the MTP depths: "
                          "36625603584 (36.626 B"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace ssdtrain

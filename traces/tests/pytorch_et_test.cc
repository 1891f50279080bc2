// PyTorch execution traces as traces (traces/pytorch_et.h), against a file
// torch 1.13's own observer wrote (traces/tests/data/pytorch_et_tiny_gpt.json,
// made by python/tests/pytorch_et.py: a one-layer GPT's step with SGD), and
// malformed files refused naming the file, the node and the field. The
// vocabulary both PyTorch readers share (traces/torch_ops.h) is tested here too.
#include "traces/pytorch_et.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "cmake/build_paths.h"
#include "traces/io.h"
#include "traces/torch_ops.h"
#include "traces/validate.h"

namespace ssdtrain::traces {
namespace {

using nlohmann::json;

const std::string kFixture =
    std::string(ConfiguredSourceDir()) + "/traces/tests/data/pytorch_et_tiny_gpt.json";

const PytorchEtImport& Fixture() {
  static const PytorchEtImport imported = [] {
    Result<json> j = ReadJsonFile(kFixture);
    EXPECT_TRUE(j.ok()) << j.status().message();
    Result<PytorchEtImport> r = TraceFromPytorchEt(*j, kFixture);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? std::move(*r) : PytorchEtImport{};
  }();
  return imported;
}

const Op* FindOp(const Trace& t, const std::string& name, Phase phase) {
  for (const Op& op : t.ops) {
    if (op.name == name && op.phase == phase) return &op;
  }
  return nullptr;
}

TEST(PytorchEt, TorchsOwnFileReadsAsAValidStep) {
  const Trace& t = Fixture().trace;
  ASSERT_FALSE(t.ops.empty());
  EXPECT_TRUE(Validate(t, "imported").ok());
  // Forward, then backward, then the optimizer, each a contiguous run.
  Phase last = Phase::kForward;
  std::map<Phase, int> count;
  std::map<std::string, int> optimizer_ops;
  for (const Op& op : t.ops) {
    EXPECT_GE(static_cast<int>(op.phase), static_cast<int>(last)) << op.name;
    last = op.phase;
    ++count[op.phase];
    if (op.phase == Phase::kOptimizer) {
      EXPECT_EQ(op.kind, OpKind::kOptimizer);
      ++optimizer_ops[op.name];
    }
  }
  EXPECT_GT(count[Phase::kForward], 20);
  EXPECT_GT(count[Phase::kBackward], 20);
  // SGD with momentum: mul_, add_ and add_ per parameter.
  EXPECT_EQ(optimizer_ops["Optimizer.step#SGD.step.mul_"], 16);
  EXPECT_EQ(optimizer_ops["Optimizer.step#SGD.step.add_"], 2 * 16);
  std::map<TensorKind, int> kinds;
  for (const Tensor& x : t.tensors) kinds[x.kind] += x.alias_of ? 0 : 1;
  EXPECT_EQ(kinds[TensorKind::kWeight], 16);          // the GPT's 16 parameters
  EXPECT_EQ(kinds[TensorKind::kOptimizerState], 16);  // their momentum buffers
  EXPECT_EQ(t.header.layers, 1);
  EXPECT_EQ(t.header.dtype, "fp32");
  EXPECT_FALSE(Fixture().assumed.empty());
}

TEST(PytorchEt, LinearsAreGemmsAndLayersComeFromScopes) {
  const Trace& t = Fixture().trace;
  // blocks.0's fc1: [s=32, b=2, h=64] x [256, 64]^T.
  int linears = 0;
  for (const Op& op : t.ops) {
    if (op.name == "blocks.0.linear" && op.gemm && op.gemm->n == 256) {
      EXPECT_EQ(*op.gemm, (GemmDims{64, 256, 64, 1}));
      EXPECT_EQ(op.flops, 2 * 64 * 256 * 64);
      EXPECT_EQ(op.layer, 0);
      ++linears;
    }
  }
  EXPECT_EQ(linears, 1);
  // Its backward: AddmmBackward0's two mm, named and layered after it.
  int mms = 0;
  for (const Op& op : t.ops) {
    if (op.phase == Phase::kBackward && op.name == "blocks.0.AddmmBackward0.mm") {
      EXPECT_EQ(op.kind, OpKind::kGemm);
      EXPECT_EQ(op.layer, 0);
      ++mms;
    }
  }
  EXPECT_EQ(mms, 4 * 2);  // qkv, proj, fc1, fc2
  const Op* embedding = FindOp(t, "<model>.embedding", Phase::kForward);
  ASSERT_NE(embedding, nullptr);
  EXPECT_EQ(embedding->layer, kNoLayer);
  EXPECT_EQ(embedding->kind, OpKind::kEmbedding);
}

TEST(PytorchEt, SavedTensorsAreMadeInForwardAndReadInBackward) {
  const Trace& t = Fixture().trace;
  int64_t saved = 0;
  for (const Tensor& x : t.tensors) {
    if (x.alias_of || !x.saved_for_backward) continue;
    ASSERT_NE(x.producer, kNoOp) << x.name;
    EXPECT_EQ(t.op(x.producer).phase, Phase::kForward) << x.name;
    bool read_in_backward = false;
    for (TensorId id = 0; id < static_cast<TensorId>(t.tensors.size()); ++id) {
      if (t.StorageOf(id) != x.id) continue;
      for (OpId c : t.tensor(id).consumers) read_in_backward |= t.op(c).phase == Phase::kBackward;
    }
    EXPECT_TRUE(read_in_backward) << x.name;
    if (x.kind == TensorKind::kActivation) saved += x.bytes;
  }
  // cross_entropy's log-probabilities, made by its inner log_softmax and read
  // by NllLossBackward0: a row of the cross_entropy op, [b*s, vocab].
  const Op* ce = FindOp(t, "<model>.cross_entropy_loss", Phase::kForward);
  ASSERT_NE(ce, nullptr);
  bool logprobs = false;
  for (TensorId o : ce->outputs) {
    logprobs |=
        t.tensor(o).shape == std::vector<int64_t>{64, 128} && t.tensor(o).saved_for_backward;
  }
  EXPECT_TRUE(logprobs);
  // python/tests/test_pytorch_et.py checks these bytes against ssdtrain.capture's
  // for the same model; here they are the file's, fixed.
  EXPECT_GT(saved, 0);
  int offloadable = 0;
  for (const Tensor& x : t.tensors) offloadable += x.offloadable && !x.alias_of ? 1 : 0;
  EXPECT_GT(offloadable, 0);
}

TEST(PytorchEt, ReadTraceKnowsTheFileAndSaysWhatItAssumed) {
  std::vector<std::string> assumed;
  Result<Trace> t = ReadTrace(kFixture, &assumed);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(Fingerprint(*t), Fingerprint(Fixture().trace));
  EXPECT_EQ(assumed, Fixture().assumed);
  EXPECT_TRUE(IsTraceFile(kFixture));
  // Written as ssdtrain's own and read back: the same trace.
  Result<Trace> back = TraceFromJson(ToJson(*t), "back.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(ToJson(*back), ToJson(*t));
}

std::string Refusal(const json& j);

// The fixture rewritten in torch 2's layout (execution_trace_observer.cpp:
// ctrl_deps, inputs/outputs as {values, shapes, types, strides}, the rest
// under attrs), as torch 2.5 writes it.
json Torch2Layout(const json& et) {
  json out = {{"schema", "1.1.1-chakra.0.0.4"}, {"pid", et["pid"]}, {"nodes", json::array()}};
  for (const json& n : et["nodes"]) {
    std::string name = n["name"];
    if (const size_t at = name.find("execution_graph"); at != std::string::npos) {
      name.replace(at, 15, "execution_trace");
    }
    auto io = [&](const char* side, const char* one) {
      const std::string s(one);
      return json{{"values", n[side]},
                  {"shapes", n[s + "_shapes"]},
                  {"types", n[s + "_types"]},
                  {"strides", json::array()}};
    };
    json attrs = json::array();
    for (const char* a : {"rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid", "op_schema"}) {
      attrs.push_back({{"name", a},
                       {"type", a == std::string("op_schema") ? "string" : "int64"},
                       {"value", n[a]}});
    }
    attrs.push_back({{"name", "kernel_backend"}, {"type", "string"}, {"value", ""}});
    out["nodes"].push_back({{"id", n["id"]},
                            {"name", name},
                            {"ctrl_deps", n["parent"]},
                            {"inputs", io("inputs", "input")},
                            {"outputs", io("outputs", "output")},
                            {"attrs", attrs}});
  }
  return out;
}

TEST(PytorchEt, Torch2sLayoutReadsAsTheSameStep) {
  Result<json> j = ReadJsonFile(kFixture);
  ASSERT_TRUE(j.ok()) << j.status().message();
  const json torch2 = Torch2Layout(*j);
  ASSERT_TRUE(IsPytorchEt(torch2));
  Result<PytorchEtImport> r = TraceFromPytorchEt(torch2, "et2.json");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(ToJson(r->trace), ToJson(Fixture().trace));
  // Its messages name its own fields.
  json bad = torch2;
  for (json& n : bad["nodes"]) {
    if (n["name"] == "aten::linear") {
      n["inputs"]["types"].erase(0);
      break;
    }
  }
  const std::string message = Refusal(bad);
  EXPECT_NE(message.find("(aten::linear): inputs.types: expected an array as long as "
                         "inputs.values"),
            std::string::npos)
      << message;
}

// A minimal step as the observer writes it: x @ w forward, its backward.
json MiniEt() {
  auto tensor = [](int64_t tid, int64_t sid, int64_t numel) {
    return json::array({tid, sid, 0, numel, 4, "cpu"});
  };
  json nodes = json::array();
  auto node = [&](int64_t id, int64_t parent, const std::string& name, const std::string& schema,
                  json inputs, json in_shapes, json in_types, json outputs, json out_shapes,
                  json out_types, int64_t seq = -1) {
    nodes.push_back({{"id", id},
                     {"parent", parent},
                     {"name", name},
                     {"op_schema", schema},
                     {"seq_id", seq},
                     {"tid", 1},
                     {"fw_tid", 0},
                     {"inputs", inputs},
                     {"input_shapes", in_shapes},
                     {"input_types", in_types},
                     {"outputs", outputs},
                     {"output_shapes", out_shapes},
                     {"output_types", out_types}});
  };
  const json e = json::array();
  node(1, 1, "[pytorch|profiler|execution_graph|process]", "", e, e, e, e, e, e);
  node(2, 1, "[pytorch|profiler|execution_graph|thread]", "", e, e, e, e, e, e);
  node(3, 2, "aten::mm", "aten::mm(Tensor self, Tensor mat2) -> Tensor",
       json::array({tensor(10, 11, 64), tensor(12, 13, 64)}),
       json::array({json::array({8, 8}), json::array({8, 8})}),
       json::array({"Tensor(float)", "Tensor(float)"}), json::array({tensor(14, 15, 64)}),
       json::array({json::array({8, 8})}), json::array({"Tensor(float)"}), 0);
  node(4, 2, "autograd::engine::evaluate_function: MmBackward0", "", e, e, e, e, e, e);
  node(5, 4, "MmBackward0", "", e, e, e, e, e, e, 0);
  node(6, 5, "aten::mm", "aten::mm(Tensor self, Tensor mat2) -> Tensor",
       json::array({tensor(14, 15, 64), tensor(10, 11, 64)}),
       json::array({json::array({8, 8}), json::array({8, 8})}),
       json::array({"Tensor(float)", "Tensor(float)"}), json::array({tensor(16, 17, 64)}),
       json::array({json::array({8, 8})}), json::array({"Tensor(float)"}));
  return {{"schema", "1.0.1"}, {"pid", 1}, {"nodes", nodes}};
}

std::string Refusal(const json& j) {
  Result<PytorchEtImport> r = TraceFromPytorchEt(j, "et.json");
  EXPECT_FALSE(r.ok());
  return r.ok() ? std::string() : r.status().message();
}

json& NodeWithId(json& j, int64_t id) {
  for (json& n : j["nodes"]) {
    if (n["id"] == id) return n;
  }
  ADD_FAILURE() << "no node " << id;
  return j;
}

TEST(PytorchEt, TheMinimalStepReads) {
  Result<PytorchEtImport> r = TraceFromPytorchEt(MiniEt(), "et.json");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Trace& t = r->trace;
  ASSERT_EQ(t.ops.size(), 2u);
  EXPECT_EQ(t.ops[0].phase, Phase::kForward);
  EXPECT_EQ(t.ops[1].phase, Phase::kBackward);
  EXPECT_EQ(t.ops[1].name, "<model>.MmBackward0.mm");
  EXPECT_EQ(t.ops[0].flops, 2 * 8 * 8 * 8);
  // x (read again in backward) and w: made before the trace, step inputs (no
  // gradient accumulated into a leaf here); the forward's result is saved.
  const Tensor& y = t.tensor(t.ops[0].outputs[0]);
  EXPECT_TRUE(y.saved_for_backward);
  EXPECT_EQ(y.kind, TensorKind::kActivation);
  EXPECT_EQ(y.bytes, 256);
  EXPECT_FALSE(y.offloadable);  // under 64 KiB
}

TEST(PytorchEt, MalformedFilesNameTheFileTheNodeAndTheField) {
  EXPECT_NE(Refusal(json::array()).find("et.json: expected a PyTorch execution trace"),
            std::string::npos);
  json j = MiniEt();
  j.erase("nodes");
  EXPECT_NE(Refusal(j).find("et.json: nodes: expected an array"), std::string::npos);

  j = MiniEt();
  NodeWithId(j, 3).erase("parent");
  EXPECT_NE(Refusal(j).find("et.json: node 3 (aten::mm): parent: expected an integer"),
            std::string::npos);

  j = MiniEt();
  NodeWithId(j, 2)["parent"] = 6;  // 2 -> 6 -> 5 -> 4 -> 2
  EXPECT_NE(Refusal(j).find("loops back"), std::string::npos) << Refusal(j);

  j = MiniEt();
  NodeWithId(j, 3)["parent"] = 99;
  EXPECT_NE(Refusal(j).find("node 3 (aten::mm): parent: node 99 is not in the file"),
            std::string::npos);

  j = MiniEt();
  NodeWithId(j, 3)["inputs"][0] = json::array({10, 11, 0, 64});
  EXPECT_NE(Refusal(j).find("node 3 (aten::mm): inputs[0]: expected a tensor [tensor id"),
            std::string::npos);

  j = MiniEt();
  NodeWithId(j, 3)["input_types"][1] = "Tensor(c10::complex<float>)";
  EXPECT_NE(Refusal(j).find("node 3 (aten::mm): inputs[1]: type 'Tensor(c10::complex<float>)' "
                            "has no trace dtype"),
            std::string::npos);

  j = MiniEt();
  NodeWithId(j, 3)["inputs"][1][4] = 2;  // float is 4 bytes
  EXPECT_NE(Refusal(j).find("node 3 (aten::mm): inputs[1]: itemsize 2 is not the size of 'float'"),
            std::string::npos);

  j = MiniEt();
  NodeWithId(j, 3)["input_types"].erase(1);
  EXPECT_NE(Refusal(j).find("node 3 (aten::mm): input_types: expected an array as long as inputs"),
            std::string::npos);

  j = MiniEt();
  NodeWithId(j, 6)["parent"] = 2;  // no longer under evaluate_function
  NodeWithId(j, 5)["parent"] = 2;
  NodeWithId(j, 4)["name"] = "a scope";
  EXPECT_NE(Refusal(j).find("et.json: no backward"), std::string::npos);

  j = MiniEt();
  j["nodes"].push_back(NodeWithId(j, 3));
  EXPECT_NE(Refusal(j).find("node 3 (aten::mm): id: two nodes have this id"), std::string::npos);
}

TEST(TorchOps, TheVocabularyBothReadersShare) {
  EXPECT_TRUE(TorchOpInfo("aten::view").view);
  EXPECT_TRUE(TorchOpInfo("transpose").view);
  EXPECT_FALSE(TorchOpInfo("aten::add_").view);
  EXPECT_EQ(TorchOpInfo("aten::native_layer_norm").kind, OpKind::kNorm);
  EXPECT_EQ(TorchOpInfo("aten::addmm.out").kind, OpKind::kGemm);
  EXPECT_EQ(TorchOpInfo("myns::mm").kind, OpKind::kElementwise);  // not aten's
  EXPECT_EQ(TorchGemmDims("aten::addmm", {{256}, {128, 64}, {64, 256}, {}, {}}),
            (GemmDims{128, 256, 64, 1}));
  EXPECT_EQ(TorchGemmDims("linear", {{4, 32, 64}, {256, 64}, {256}}), (GemmDims{128, 256, 64, 1}));
  EXPECT_EQ(TorchGemmDims("baddbmm", {{8, 3, 5}, {8, 3, 4}, {8, 4, 5}}), (GemmDims{3, 5, 4, 8}));
  // matmul broadcasts its leading dims; a 1-D operand gains and loses one.
  EXPECT_EQ(TorchGemmDims("matmul", {{2, 1, 3, 4}, {5, 4, 6}}), (GemmDims{3, 6, 4, 10}));
  EXPECT_EQ(TorchGemmDims("matmul", {{4}, {4, 6}}), (GemmDims{1, 6, 4, 1}));
  EXPECT_EQ(TorchGemmDims("mm", {{3, 4}, {5, 6}}), std::nullopt);  // k disagrees
  EXPECT_EQ(TorchGemmDims("mm", {{0, 4}, {4, 6}}), std::nullopt);  // empty: no work
  // Attention: 2·Lq·Lk·(E + Ev) per batch and head; backward 2.5 times.
  EXPECT_EQ(TorchAttentionFlops("aten::_scaled_dot_product_flash_attention",
                                {{2, 4, 128, 64}, {2, 4, 256, 64}, {2, 4, 256, 32}}),
            2 * 8 * 128 * 256 * (64 + 32));
  EXPECT_EQ(
      TorchAttentionFlops("aten::_scaled_dot_product_flash_attention_backward",
                          {{2, 4, 128, 32}, {2, 4, 128, 64}, {2, 4, 256, 64}, {2, 4, 256, 32}}),
      int64_t{5} * 8 * 128 * 256 * (64 + 32));
  EXPECT_EQ(TorchDType("float32"), DType::kFp32);
  EXPECT_EQ(TorchDType("torch.bfloat16"), DType::kBf16);
  EXPECT_EQ(TorchDType("c10::Half"), DType::kFp16);
  EXPECT_EQ(TorchDType("long int"), DType::kInt64);
  EXPECT_EQ(TorchDType("double"), DType::kInt64);  // stored as the dtype of its size
  EXPECT_EQ(TorchDType("complex64"), std::nullopt);
  for (DType d :
       {DType::kFp16, DType::kBf16, DType::kFp32, DType::kUint8, DType::kInt32, DType::kInt64}) {
    EXPECT_EQ(TorchDType(TorchTypeName(d)), d) << ToString(d);  // each its own name back
  }
}

}  // namespace
}  // namespace ssdtrain::traces

// The PyTorch execution-trace importer's parts (traces/pytorch_et.h says
// what the file holds and how it becomes a trace): the nodes as read, their
// ancestry, the top-level operator calls with their tensors, and the steps
// that assemble the trace from them. Reading: traces/pytorch_et.cc (nodes,
// ancestry, calls) and traces/pytorch_et_values.cc (tensor values); assembly:
// traces/pytorch_et_build.cc.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "traces/pytorch_et.h"
#include "traces/torch_ops.h"

namespace ssdtrain::traces::detail {

inline constexpr std::string_view kEvaluateFunction = "autograd::engine::evaluate_function: ";
inline constexpr std::string_view kAccumulateGrad = "torch::autograd::AccumulateGrad";

struct Node {
  int64_t id = 0;
  int64_t parent = 0;
  std::string name;
  bool op = false;  // an operator call (a non-empty op_schema)
  int64_t seq_id = -1;
  int64_t tid = 0;
  int64_t fw_tid = 0;
  const nlohmann::json* j = nullptr;
  // Filled by the ancestry walk.
  bool under_op = false;  // an operator is above it
  int64_t top_op = -1;    // the node index of its outermost operator (itself if top-level)
  int64_t evaluate = -1;  // the evaluate_function node above it
  int64_t grad_fn = -1;   // the autograd node (evaluate_function's child) above or at it
  int64_t scope = -1;     // the innermost record_function scope above it
};

// One tensor argument or result.
struct TensorValue {
  int64_t tensor_id = 0;
  int64_t storage_id = 0;
  int64_t offset = 0;
  int64_t numel = 0;
  int64_t itemsize = 0;
  std::string device;
  DType dtype = DType::kFp32;
  std::vector<int64_t> shape;
  int64_t bytes() const { return numel * itemsize; }
};

struct OpCall {
  size_t node = 0;
  Phase phase = Phase::kForward;
  std::vector<TensorValue> inputs, outputs;
  // What the calls inside it made: a composite op's saved intermediates
  // (layer_norm's mean and rstd, cross_entropy's log-probabilities) are
  // results of its inner calls, not of the op.
  std::vector<TensorValue> inner;
  ArgShapes arg_shapes;  // every argument's, in schema order
};

// A JSON integer (signed or unsigned) as int64, or nullopt.
std::optional<int64_t> AsInt(const nlohmann::json& v);
// A node's field: its own (torch 1.13's layout), or the value of its attrs
// entry of that name (torch 2's: [{"name", "type", "value"}, ...]); null when
// it has neither.
const nlohmann::json* Field(const nlohmann::json& node, const char* name);
// The op's name without its namespace: "aten::addmm" -> "addmm".
std::string ShortName(const std::string& name);

struct EtBuildState;  // the assembly's bookkeeping (traces/pytorch_et_build.cc)

class EtImporter {
 public:
  EtImporter(const nlohmann::json& j, std::string source, PytorchEtOptions options)
      : j_(j), source_(std::move(source)), options_(options) {}

  Result<PytorchEtImport> Run();

 private:
  Status Error(const std::string& what) const {
    return Status::InvalidArgument(source_ + ": " + what);
  }
  Status NodeError(const Node& n, const std::string& field, const std::string& what) const {
    return Error("node " + std::to_string(n.id) + " (" + n.name + "): " + field + ": " + what);
  }
  // Reading (traces/pytorch_et.cc, traces/pytorch_et_values.cc).
  Status ReadNodes();
  Status WalkAncestry();
  Status ReadCalls();
  Status ReadCall(size_t node, OpCall* call) const;
  Status ReadValues(const Node& n, const std::string& side, std::vector<TensorValue>* tensors,
                    ArgShapes* shapes) const;
  Result<TensorValue> ReadTensor(const Node& n, const std::string& field,
                                 const nlohmann::json& value, const nlohmann::json& shape,
                                 std::string_view type) const;
  std::string ScopeName(const Node& n) const;
  int LayerOf(const std::string& scope);

  // Assembly (traces/pytorch_et_build.cc).
  void Build();
  void CountLeafGradients(EtBuildState* s) const;
  void IndexForwardOps(EtBuildState* s) const;
  std::string CallScope(const OpCall& call, const EtBuildState& s, std::string* grad_fn) const;
  void ImportCall(const OpCall& call, EtBuildState* s);
  void AddInputs(const OpCall& call, const std::string& scope, int layer, Op* op, EtBuildState* s);
  bool AddOutputs(const OpCall& call, const std::string& scope, int layer, Op* op, EtBuildState* s);
  void SetWork(const OpCall& call, bool view, const EtBuildState& s, Op* op) const;
  void FillHeader();
  void SayAssumptions(const EtBuildState& s);

  const nlohmann::json& j_;
  std::string source_;
  PytorchEtOptions options_;
  std::vector<Node> nodes_;
  std::unordered_map<int64_t, size_t> index_;  // node id -> nodes_ index
  std::vector<std::vector<size_t>> children_;
  std::vector<OpCall> calls_;
  std::unordered_map<std::string, int> layers_;  // scope name -> layer
  PytorchEtImport out_;
};

}  // namespace ssdtrain::traces::detail

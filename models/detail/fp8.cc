#include "models/detail/fp8.h"

#include "models/detail/costs.h"

namespace ssdtrain::models::detail {
namespace {

// Rows of x [..., width]: the product of its leading dimensions.
int64_t RowsOf(const std::vector<int64_t>& shape) {
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  return rows;
}

// One cast: inputs read once (twice under current scaling: its amax pass).
OpId Cast(TraceBuilder& b, const Dims& d, const std::string& name,
          const std::vector<TensorId>& inputs, const std::vector<TensorId>& outputs,
          int64_t elements) {
  const OpId id = b.Op(name, OpKind::kElementwise, inputs, outputs, elements);
  if (d.fp8 == traces::Fp8Recipe::kCurrent) {
    int64_t high_precision = 0;
    for (TensorId t : inputs) {
      if (b.tensor(t).dtype != DType::kFp8) high_precision += b.tensor(t).bytes;
    }
    b.op(id).bytes_read += high_precision;
  }
  return id;
}

}  // namespace

Fp8Weight Fp8Weights(TraceBuilder& b, TensorId weight) {
  // Copies: the first copy's tensor may move the trace's tensors.
  const std::vector<int64_t> shape = b.shape(weight);
  const std::string name = b.tensor(weight).name;
  Fp8Weight w;
  w.row = b.Fp8WeightCopy(weight, name + ".fp8", shape);
  w.col = b.Fp8WeightCopy(weight, name + ".fp8_t", {shape.back(), Elements(shape) / shape.back()});
  return w;
}

TensorId QuantizeInput(TraceBuilder& b, const Dims& d, const std::string& name, TensorId x,
                       TensorId* col) {
  const std::vector<int64_t> shape = b.shape(x);
  const TensorId row = b.Activation(name + ".fp8", shape, DType::kFp8);
  std::vector<TensorId> outputs = {row};
  if (col != nullptr) {
    *col = b.Activation(name + ".fp8_t", {shape.back(), RowsOf(shape)}, DType::kFp8);
    outputs.push_back(*col);
  }
  Cast(b, d, name + ".quantize", {x}, outputs, Elements(shape));
  return row;
}

TensorId ColumnwiseOf(TraceBuilder& b, const Dims& d, const std::string& name, TensorId x) {
  const std::vector<int64_t> shape = b.shape(x);
  const TensorId col = b.Workspace(name + ".fp8_t", {shape.back(), RowsOf(shape)}, DType::kFp8);
  const bool fp8 = b.tensor(x).dtype == DType::kFp8;
  Cast(b, d, name + (fp8 ? ".transpose" : ".quantize_t"), {x}, {col}, Elements(shape));
  return col;
}

Fp8Grad QuantizeGrad(TraceBuilder& b, const Dims& d, const std::string& name,
                     const std::vector<TensorId>& g, int64_t width) {
  std::vector<int64_t> shape = b.shape(g.front());
  shape.back() = width;
  Fp8Grad q;
  q.row = b.Gradient(name + ".fp8", shape, DType::kFp8);
  q.col = b.Gradient(name + ".fp8_t", {width, RowsOf(shape)}, DType::kFp8);
  Cast(b, d, name + ".quantize", g, {q.row, q.col}, Elements(shape));
  return q;
}

}  // namespace ssdtrain::models::detail

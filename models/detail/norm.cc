#include "models/detail/norm.h"

#include "models/detail/costs.h"

namespace ssdtrain::models::detail {

TensorId NormForward(TraceBuilder& b, const Dims& d, NormKind kind, const std::string& name,
                     TensorId x, NormState* st) {
  st->name = name;
  st->input = x;
  const int64_t width = b.shape(x).back();  // h, or an MLA latent's rank
  st->weight = kind == NormKind::kLayerNorm ? b.Weight(name + ".weight", {2, width}, d.act)
                                            : b.Weight(name + ".weight", {width}, d.act);
  const TensorId y = b.Activation(name + ".out", b.shape(x), d.act);
  b.Op(name, OpKind::kNorm, {x, st->weight}, {y}, kNormFlops * Elements(b.shape(x)));
  return y;
}

TensorId HeadNormForward(TraceBuilder& b, const Dims& d, const std::string& name, TensorId x,
                         NormState* st) {
  st->name = name;
  st->input = x;
  st->weight = b.Weight(name + ".weight", {d.d}, d.act);
  const TensorId y = b.Activation(name + ".out", b.shape(x), d.act);
  b.Op(name, OpKind::kNorm, {x, st->weight}, {y}, kNormFlops * Elements(b.shape(x)));
  return y;
}

TensorId NormBackward(TraceBuilder& b, const Dims& d, const NormState& st, TensorId g_output,
                      TensorId g_residual) {
  std::vector<TensorId> inputs = {st.input, st.weight, g_output};
  if (g_residual != kNoTensor) inputs.push_back(g_residual);
  const TensorId g_x = b.Gradient(st.name + ".in.grad", b.shape(st.input), d.act);
  const TensorId g_w = b.WeightGrad(st.weight, inputs);
  int64_t flops = kBackwardFactor * kNormFlops * Elements(b.shape(st.input));
  if (g_residual != kNoTensor) flops += kAddFlops * Elements(b.shape(st.input));
  b.Op(st.name + ".bwd", OpKind::kNorm, inputs, {g_x, g_w}, flops);
  return g_x;
}

}  // namespace ssdtrain::models::detail

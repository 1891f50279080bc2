#include "models/detail/norm.h"

#include "models/detail/costs.h"

namespace ssdtrain::models::detail {
namespace {

std::vector<int64_t> Rows(std::vector<int64_t> shape) {
  shape.back() = 1;
  return shape;
}

// torchtitan's RMSNorm module in eager PyTorch (torchtitan/models/norms.py,
// the same at 1ea476e9 and 9dec370; norm_type "rmsnorm"):
//   output = (x.float() * rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps))
//                .type_as(x) * weight
// each step its own kernel (+ eps and rsqrt, over one value a row, one op
// here). Autograd saves the fp32 copy (the square's and the product's
// input), the rsqrt and the cast rows (the weight's product's input). In
// fp32, float() and type_as return the tensor itself (no op).
TensorId EagerRmsNormForward(TraceBuilder& b, const Dims& d, const std::string& name, TensorId x,
                             NormState* st) {
  const bool casts = d.act != DType::kFp32;
  const std::vector<int64_t> shape = b.shape(x);
  const int64_t n = Elements(shape), rows = Elements(Rows(shape));
  st->eager = true;
  st->x_float = x;
  if (casts) {
    st->x_float = b.Activation(name + ".x_float", shape, DType::kFp32);
    b.Op(name + ".float", OpKind::kElementwise, {x}, {st->x_float}, 0);
  }
  const TensorId square = b.Activation(name + ".square", shape, DType::kFp32);
  b.Op(name + ".pow", OpKind::kElementwise, {st->x_float}, {square}, n);
  const TensorId mean = b.Activation(name + ".mean", Rows(shape), DType::kFp32);
  b.Op(name + ".mean", OpKind::kElementwise, {square}, {mean}, n);
  st->rstd = b.Activation(name + ".rstd", Rows(shape), DType::kFp32);
  b.Op(name + ".rsqrt", OpKind::kElementwise, {mean}, {st->rstd}, 2 * rows);
  const TensorId normed = b.Activation(name + ".normed", shape, DType::kFp32);
  b.Op(name + ".mul", OpKind::kElementwise, {st->x_float, st->rstd}, {normed}, n);
  st->normed = normed;
  if (casts) {
    st->normed = b.Activation(name + ".normed_cast", shape, d.act);
    b.Op(name + ".type_as", OpKind::kElementwise, {normed}, {st->normed}, 0);
  }
  const TensorId y = b.Activation(name + ".out", shape, d.act);
  b.Op(name + ".scale", OpKind::kElementwise, {st->normed, st->weight}, {y}, n);
  return y;
}

// EagerRmsNormForward's backward as autograd runs it, step by step: the
// weight's product (the input's gradient times the weight; the weight's, the
// product with the cast rows summed over the tokens), type_as's, the rows'
// product (times the rsqrt; and with the fp32 copy, summed over each row),
// rsqrt's and + eps's (one op, a value a row), mean's (the row gradient
// expanded and divided into a whole tensor), the square's (grad · (2 ·
// x.pow(1)): x.pow(1) a copy, the scalar product and the gradient's, three
// passes), the two gradients of the fp32 copy summed, float()'s, and the
// residual's gradient added where the norm's input has one.
TensorId EagerRmsNormBackward(TraceBuilder& b, const Dims& d, const NormState& st,
                              TensorId g_output, TensorId g_residual) {
  const bool casts = d.act != DType::kFp32;
  const std::string& name = st.name;
  const std::vector<int64_t> shape = b.shape(st.input);
  const int64_t n = Elements(shape), rows = Elements(Rows(shape));
  const auto fp32 = [&](const std::string& suffix, const std::vector<int64_t>& s) {
    return b.Gradient(name + suffix, s, DType::kFp32);
  };
  const TensorId g_normed = b.Gradient(name + ".normed_cast.grad", shape, d.act);
  b.Op(name + ".scale.bwd", OpKind::kElementwise, {g_output, st.weight}, {g_normed}, n);
  const TensorId g_w_rows = b.Gradient(name + ".weight.grad_rows", shape, d.act);
  b.Op(name + ".scale.bwd_weight", OpKind::kElementwise, {g_output, st.normed}, {g_w_rows}, n);
  std::vector<TensorId> w_inputs = {g_w_rows};
  const TensorId g_w = b.WeightGrad(st.weight, w_inputs);
  b.Op(name + ".weight.grad_sum", OpKind::kElementwise, w_inputs, {g_w}, kAddFlops * n);
  TensorId g_y = g_normed;
  if (casts) {
    g_y = fp32(".normed.grad", shape);
    b.Op(name + ".type_as.bwd", OpKind::kElementwise, {g_normed}, {g_y}, 0);
  }
  const TensorId g_x_mul = fp32(".x_float.grad_mul", shape);
  b.Op(name + ".mul.bwd", OpKind::kElementwise, {g_y, st.rstd}, {g_x_mul}, n);
  const TensorId g_rstd_rows = fp32(".rstd.grad_rows", shape);
  b.Op(name + ".mul.bwd_rstd", OpKind::kElementwise, {g_y, st.x_float}, {g_rstd_rows}, n);
  const TensorId g_rstd = fp32(".rstd.grad", Rows(shape));
  b.Op(name + ".mul.bwd_rstd_sum", OpKind::kElementwise, {g_rstd_rows}, {g_rstd}, kAddFlops * n);
  const TensorId g_mean = fp32(".mean.grad", Rows(shape));
  b.Op(name + ".rsqrt.bwd", OpKind::kElementwise, {g_rstd, st.rstd}, {g_mean}, 4 * rows);
  const TensorId g_square = fp32(".square.grad", shape);
  b.Op(name + ".mean.bwd", OpKind::kElementwise, {g_mean}, {g_square}, n);
  const TensorId x_pow1 = fp32(".x_float.pow1", shape);
  b.Op(name + ".pow.bwd_pow", OpKind::kElementwise, {st.x_float}, {x_pow1}, 0);
  const TensorId x_twice = fp32(".x_float.twice", shape);
  b.Op(name + ".pow.bwd_scale", OpKind::kElementwise, {x_pow1}, {x_twice}, n);
  const TensorId g_x_pow = fp32(".x_float.grad_pow", shape);
  b.Op(name + ".pow.bwd", OpKind::kElementwise, {g_square, x_twice}, {g_x_pow}, n);
  const TensorId g_x_float =
      casts ? fp32(".x_float.grad", shape) : b.Gradient(name + ".in.grad", shape, d.act);
  b.Op(name + ".x_float.grad_sum", OpKind::kElementwise, {g_x_mul, g_x_pow}, {g_x_float},
       kAddFlops * n);
  TensorId g_x = g_x_float;
  if (casts) {
    g_x = b.Gradient(name + ".in.grad", shape, d.act);
    b.Op(name + ".float.bwd", OpKind::kElementwise, {g_x_float}, {g_x}, 0);
  }
  if (g_residual == kNoTensor) return g_x;
  const TensorId g_sum = b.Gradient(name + ".in.grad_sum", shape, d.act);
  b.Op(name + ".in.grad_add", OpKind::kElementwise, {g_x, g_residual}, {g_sum}, kAddFlops * n);
  return g_sum;
}

}  // namespace

TensorId NormForward(TraceBuilder& b, const Dims& d, NormKind kind, const std::string& name,
                     TensorId x, NormState* st) {
  st->name = name;
  st->input = x;
  const int64_t width = b.shape(x).back();  // h, or an MLA latent's rank
  st->weight = kind == NormKind::kLayerNorm ? b.Weight(name + ".weight", {2, width}, d.act)
                                            : b.Weight(name + ".weight", {width}, d.act);
  if (kind == NormKind::kRmsNorm && d.eager_rmsnorm) {
    return EagerRmsNormForward(b, d, name, x, st);
  }
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
  if (st.eager) return EagerRmsNormBackward(b, d, st, g_output, g_residual);
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

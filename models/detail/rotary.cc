// The rotary embedding's ops on q and k (models/detail/rotary.h).
#include "models/detail/rotary.h"

#include "models/detail/costs.h"

namespace ssdtrain::models::detail {
namespace {

// torchtitan's apply_rotary_emb (torchtitan/models/llama/model.py) in eager
// PyTorch on one of q and k (`x`, "q" or "k"): x.float(), its product with the
// frequencies as complex64 numbers, type_as back to the activation dtype, each
// its own kernel (per tensor, as eager PyTorch runs them: no op here has two
// outputs that a re-run would have to rebuild together). In fp32 the casts
// return the tensor itself (no op).
void ComplexRotaryForward(TraceBuilder& b, const Dims& d, const std::string& x, TensorId in,
                          TensorId out) {
  const bool casts = d.act != DType::kFp32;
  const std::string name = "rotary." + x;
  TensorId v = in;
  if (casts) {
    v = b.Activation(x + "_rot.float", b.shape(in), DType::kFp32);
    b.Op(name + ".float", OpKind::kElementwise, {in}, {v}, 0);
  }
  const TensorId prod = casts ? b.Activation(x + "_rot.complex", b.shape(in), DType::kFp32) : out;
  b.Op(name + ".complex_mul", OpKind::kElementwise, {v}, {prod},
       kRotaryFlops * Elements(b.shape(in)));
  if (casts) b.Op(name + ".type_as", OpKind::kElementwise, {prod}, {out}, 0);
}

// ComplexRotaryForward's backward as autograd runs it: type_as's (the
// gradient to fp32), the product's (times the conjugate frequencies) and
// float()'s (back to the activation dtype).
void ComplexRotaryBackward(TraceBuilder& b, const Dims& d, const std::string& x, TensorId g_out,
                           TensorId g_in) {
  const bool casts = d.act != DType::kFp32;
  const std::string name = "rotary." + x;
  TensorId g = g_out;
  if (casts) {
    g = b.Gradient(x + "_rot.complex.grad", b.shape(g_out), DType::kFp32);
    b.Op(name + ".type_as.bwd", OpKind::kElementwise, {g_out}, {g}, 0);
  }
  const TensorId g_prod =
      casts ? b.Gradient(x + "_rot.float.grad", b.shape(g_in), DType::kFp32) : g_in;
  b.Op(name + ".complex_mul.bwd", OpKind::kElementwise, {g}, {g_prod},
       kRotaryFlops * Elements(b.shape(g_in)));
  if (casts) b.Op(name + ".float.bwd", OpKind::kElementwise, {g_prod}, {g_in}, 0);
}

}  // namespace

void RotaryForward(TraceBuilder& b, const Dims& d, bool complex, TensorId q_in, TensorId k_in,
                   TensorId q_out, TensorId k_out) {
  if (complex) {
    ComplexRotaryForward(b, d, "q", q_in, q_out);
    ComplexRotaryForward(b, d, "k", k_in, k_out);
    return;
  }
  b.Op("rotary", OpKind::kElementwise, {q_in, k_in}, {q_out, k_out},
       kRotaryFlops * (Elements(b.shape(q_in)) + Elements(b.shape(k_in))));
}

void RotaryBackward(TraceBuilder& b, const Dims& d, bool complex, TensorId g_q_out,
                    TensorId g_k_out, TensorId g_q_in, TensorId g_k_in) {
  if (complex) {  // autograd: k's chain first, the reverse of forward
    ComplexRotaryBackward(b, d, "k", g_k_out, g_k_in);
    ComplexRotaryBackward(b, d, "q", g_q_out, g_q_in);
    return;
  }
  b.Op("rotary.bwd", OpKind::kElementwise, {g_q_out, g_k_out}, {g_q_in, g_k_in},
       kRotaryFlops * (Elements(b.shape(g_q_in)) + Elements(b.shape(g_k_in))));
}

}  // namespace ssdtrain::models::detail

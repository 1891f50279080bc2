#include "models/detail/moe.h"

#include "models/detail/block.h"
#include "models/detail/costs.h"
#include "models/detail/linear.h"
#include "models/moe_config.h"
#include "traces/collective_kind.h"
#include "traces/dp_buckets.h"

namespace ssdtrain::models::detail {
namespace {

// Top-k selection over the E scores of a token: one compare per score per pick
// is the order of magnitude (the op is memory-bound).
constexpr int64_t kTopkFlopsPerScore = 2;
// The combine multiplies each expert row by its weight and adds it: two per element.
constexpr int64_t kCombineFlops = 2;
// The shared expert's gate: sigmoid and multiply per element.
constexpr int64_t kGateFlops = 3;
// A sigmoid router's score per expert: exp, add, divide, plus the
// load-balancing bias added for the choice.
constexpr int64_t kSigmoidScoreFlops = 4;
// gpt-oss's clamped SwiGLU per output element: clamp the gate (1) and the up
// half (2), gate·sigmoid(α·gate) (5), (up + 1)·that (2).
constexpr int64_t kClampedSwigluFlops = 10;
// The router's softmax and top-k run in fp32, as Hugging Face and Megatron-Core do.
constexpr DType kRouterDType = DType::kFp32;
// Row maps and expert indices are int64 (torch's topk and argsort indices).
constexpr DType kIndexDType = DType::kInt64;

int64_t Rows(const std::vector<int64_t>& rows) { return Elements(rows); }

std::vector<int64_t> Shape(const std::vector<int64_t>& rows, int64_t width) {
  std::vector<int64_t> shape = rows;
  shape.push_back(width);
  return shape;
}

// A weight of `shape` per expert: grouped, one tensor [groups, shape...].
std::vector<int64_t> WeightShape(const ExpertState& st, std::vector<int64_t> shape) {
  if (st.groups > 1) shape.insert(shape.begin(), st.groups);
  return shape;
}

// A projection over the rows, out [rows, n] = in [rows, k] · Wᵀ; grouped, one
// GEMM of each expert's rows against its own weight.
OpId RowGemm(TraceBuilder& b, const ExpertState& st, const std::string& name,
             const std::vector<TensorId>& inputs, const std::vector<TensorId>& outputs, int64_t n,
             int64_t k) {
  return b.Gemm(name, inputs, outputs, {.m = st.group_rows, .n = n, .k = k, .batch = st.groups},
                2 * Rows(st.rows) * n * k);
}

// A weight gradient [out, in] summed over the rows (per expert, over its own).
OpId WeightGemm(TraceBuilder& b, const ExpertState& st, const std::string& name,
                const std::vector<TensorId>& inputs, const std::vector<TensorId>& outputs,
                int64_t out, int64_t in) {
  return b.Gemm(name, inputs, outputs, {.m = out, .n = in, .k = st.group_rows, .batch = st.groups},
                2 * out * in * Rows(st.rows));
}

// x [rows, h] → fc1 [rows, 2f] → SwiGLU [rows, f] → fc2 [rows, h]; with
// `bias` each gemm adds its bias (gpt-oss), with `clamp` the SwiGLU is gpt-oss's
// clamped one (one fused op reading fc1's output, as the plain one). With
// `groups` > 1 the rows are that many experts' (the most rows one runs:
// `group_rows`), each with its own weights, in grouped GEMMs.
TensorId ExpertForward(TraceBuilder& b, const Dims& d, const std::string& name, TensorId x,
                       std::vector<int64_t> rows, int64_t ffn, ExpertState* st, bool bias = false,
                       bool clamp = false, int64_t groups = 1, int64_t group_rows = 0) {
  st->name = name;
  st->rows = std::move(rows);
  st->ffn = ffn;
  st->in = x;
  st->clamp = clamp;
  const int64_t m = Rows(st->rows);
  st->groups = groups;
  st->group_rows = groups > 1 ? group_rows : m;
  st->fc1_weight = b.Weight(name + ".fc1.weight", WeightShape(*st, {2 * ffn, d.h}), d.act);
  const bool fp8 = Fp8On(d);
  st->fc1_saved = x;
  TensorId fc1_in = x;
  if (fp8) {
    st->fc1_fp8 = Fp8Weights(b, st->fc1_weight);
    fc1_in = QuantizeInput(b, d, name + ".fc1.in", x, &st->fc1_saved);
  }
  std::vector<TensorId> fc1_inputs = {fc1_in, fp8 ? st->fc1_fp8.row : st->fc1_weight};
  if (bias) {
    st->fc1_bias = b.Weight(name + ".fc1.bias", WeightShape(*st, {2 * ffn}), d.act);
    fc1_inputs.push_back(st->fc1_bias);
  }
  st->fc1_out = b.Activation(name + ".fc1.out", Shape(st->rows, 2 * ffn), d.act);
  RowGemm(b, *st, name + ".fc1", fc1_inputs, {st->fc1_out}, 2 * ffn, d.h);
  st->act = b.Activation(name + ".act.out", Shape(st->rows, ffn), d.act);
  b.Op(name + (clamp ? ".swiglu_clamped" : ".swiglu"), OpKind::kElementwise, {st->fc1_out},
       {st->act}, (clamp ? kClampedSwigluFlops : kSwigluFlops) * m * ffn);
  st->fc2_weight = b.Weight(name + ".fc2.weight", WeightShape(*st, {d.h, ffn}), d.act);
  st->fc2_saved = st->act;
  TensorId fc2_in = st->act;
  if (fp8) {
    st->fc2_fp8 = Fp8Weights(b, st->fc2_weight);
    fc2_in = QuantizeInput(b, d, name + ".fc2.in", st->act, &st->fc2_saved);
  }
  std::vector<TensorId> fc2_inputs = {fc2_in, fp8 ? st->fc2_fp8.row : st->fc2_weight};
  if (bias) {
    st->fc2_bias = b.Weight(name + ".fc2.bias", WeightShape(*st, {d.h}), d.act);
    fc2_inputs.push_back(st->fc2_bias);
  }
  st->out = b.Activation(name + ".fc2.out", Shape(st->rows, d.h), d.act);
  RowGemm(b, *st, name + ".fc2", fc2_inputs, {st->out}, d.h, ffn);
  return st->out;
}

// The weight gradient of a gemm and, with a bias, the bias's (the output
// gradient summed over the rows, in the same op).
std::vector<TensorId> WeightGrads(TraceBuilder& b, TensorId weight, TensorId bias,
                                  std::vector<TensorId>& inputs) {
  std::vector<TensorId> outputs = {b.WeightGrad(weight, inputs)};
  if (bias != kNoTensor) outputs.push_back(b.WeightGrad(bias, inputs));
  return outputs;
}

// Returns the gradient of the expert's input.
TensorId ExpertBackward(TraceBuilder& b, const Dims& d, const ExpertState& st, TensorId g_out) {
  const int64_t m = Rows(st.rows);
  const std::string& n = st.name;
  const bool fp8 = st.fc1_fp8.row != kNoTensor;  // as the forward ran
  Fp8Grad g2;
  if (fp8) g2 = QuantizeGrad(b, d, n + ".fc2.out.grad", {g_out}, d.h);
  const TensorId g_act = b.Gradient(n + ".act.out.grad", Shape(st.rows, st.ffn), d.act);
  RowGemm(b, st, n + ".fc2.dgrad", {fp8 ? g2.row : g_out, fp8 ? st.fc2_fp8.col : st.fc2_weight},
          {g_act}, st.ffn, d.h);
  std::vector<TensorId> fc2_inputs = {st.fc2_saved, fp8 ? g2.col : g_out};
  const std::vector<TensorId> g_fc2 = WeightGrads(b, st.fc2_weight, st.fc2_bias, fc2_inputs);
  WeightGemm(b, st, n + ".fc2.wgrad", fc2_inputs, g_fc2, d.h, st.ffn);
  const TensorId g_fc1_out = b.Gradient(n + ".fc1.out.grad", Shape(st.rows, 2 * st.ffn), d.act);
  b.Op(n + (st.clamp ? ".swiglu_clamped.bwd" : ".swiglu.bwd"), OpKind::kElementwise,
       {st.fc1_out, g_act}, {g_fc1_out},
       kBackwardFactor * (st.clamp ? kClampedSwigluFlops : kSwigluFlops) * m * st.ffn);
  Fp8Grad g1;
  if (fp8) g1 = QuantizeGrad(b, d, n + ".fc1.out.grad", {g_fc1_out}, 2 * st.ffn);
  const TensorId g_in = b.Gradient(n + ".in.grad", Shape(st.rows, d.h), d.act);
  RowGemm(b, st, n + ".fc1.dgrad", {fp8 ? g1.row : g_fc1_out, fp8 ? st.fc1_fp8.col : st.fc1_weight},
          {g_in}, d.h, 2 * st.ffn);
  std::vector<TensorId> fc1_inputs = {st.fc1_saved, fp8 ? g1.col : g_fc1_out};
  const std::vector<TensorId> g_fc1 = WeightGrads(b, st.fc1_weight, st.fc1_bias, fc1_inputs);
  WeightGemm(b, st, n + ".fc1.wgrad", fc1_inputs, g_fc1, 2 * st.ffn, d.h);
  return g_in;
}

// Router gemm, softmax and top-k; records scores, weights and indices in `st`.
void RouterForward(TraceBuilder& b, const Dims& d, MoeState* st) {
  const MoeSpec& spec = st->spec;
  const int64_t tokens = d.s * d.b;
  st->router_weight = b.Weight("router.weight", {spec.experts, d.h}, d.act);
  std::vector<TensorId> inputs = {st->x, st->router_weight};
  if (spec.bias) {
    st->router_bias = b.Weight("router.bias", {spec.experts}, d.act);
    inputs.push_back(st->router_bias);
  }
  const TensorId logits = b.Activation("router.logits", d.Full(spec.experts), d.act);
  b.Gemm("router", inputs, {logits}, {.m = tokens, .n = spec.experts, .k = d.h});
  st->scores = b.Activation("router.scores", d.Full(spec.experts), kRouterDType);
  st->weights = b.Activation("router.weights", d.Full(spec.top_k), d.act);
  st->indices = b.Activation("router.indices", d.Full(spec.top_k), kIndexDType);
  const int64_t score_flops = spec.sigmoid ? kSigmoidScoreFlops : kSoftmaxFlops;
  b.Op(spec.sigmoid ? "router.sigmoid_topk" : "router.softmax_topk",
       spec.sigmoid ? OpKind::kElementwise : OpKind::kSoftmax, {logits},
       {st->scores, st->weights, st->indices},
       (score_flops + kTopkFlopsPerScore * spec.top_k) * tokens * spec.experts);
}

// Returns the gradient of x through the router.
TensorId RouterBackward(TraceBuilder& b, const Dims& d, const MoeState& st, TensorId g_weights) {
  const MoeSpec& spec = st.spec;
  const int64_t tokens = d.s * d.b;
  const TensorId g_logits = b.Gradient("router.logits.grad", d.Full(spec.experts), d.act);
  b.Op(spec.sigmoid ? "router.sigmoid_topk.bwd" : "router.softmax_topk.bwd",
       spec.sigmoid ? OpKind::kElementwise : OpKind::kSoftmax,
       {st.scores, st.weights, st.indices, g_weights}, {g_logits},
       kBackwardFactor * (spec.sigmoid ? kSigmoidScoreFlops : kSoftmaxFlops) * tokens *
           spec.experts);
  const TensorId g_x = b.Gradient("router.in.grad", d.Full(d.h), d.act);
  b.Gemm("router.dgrad", {g_logits, st.router_weight}, {g_x},
         {.m = tokens, .n = d.h, .k = spec.experts});
  std::vector<TensorId> inputs = {st.x, g_logits};
  const std::vector<TensorId> g_w = WeightGrads(b, st.router_weight, st.router_bias, inputs);
  b.Gemm("router.wgrad", inputs, g_w, {.m = spec.experts, .n = d.h, .k = tokens});
  return g_x;
}

// The shared expert on every token, through its gate when it has one.
TensorId SharedForward(TraceBuilder& b, const Dims& d, MoeState* st) {
  const TensorId y = ExpertForward(b, d, "shared_expert", st->x, {d.s, d.b}, st->spec.shared_ffn,
                                   &st->shared_expert);
  if (!st->spec.shared_gate) return y;
  st->shared_raw = y;
  st->gate_weight = b.Weight("shared_gate.weight", {1, d.h}, d.act);
  st->gate = b.Activation("shared_gate.out", d.Full(1), d.act);
  b.Gemm("shared_gate", {st->x, st->gate_weight}, {st->gate}, {.m = d.s * d.b, .n = 1, .k = d.h});
  const TensorId gated = b.Activation("shared_expert.gated", d.Full(d.h), d.act);
  b.Op("shared_gate.sigmoid_mul", OpKind::kElementwise, {st->gate, y}, {gated},
       kGateFlops * d.s * d.b * d.h);
  return gated;
}

// Returns the gradient of x through the shared expert (and its gate).
TensorId SharedBackward(TraceBuilder& b, const Dims& d, const MoeState& st, TensorId g_y) {
  if (!st.spec.shared_gate) return ExpertBackward(b, d, st.shared_expert, g_y);
  const TensorId g_raw = b.Gradient("shared_expert.fc2.out.grad", d.Full(d.h), d.act);
  const TensorId g_gate = b.Gradient("shared_gate.out.grad", d.Full(1), d.act);
  b.Op("shared_gate.sigmoid_mul.bwd", OpKind::kElementwise, {st.gate, st.shared_raw, g_y},
       {g_raw, g_gate}, kBackwardFactor * kGateFlops * d.s * d.b * d.h);
  const TensorId g_x_gate = b.Gradient("shared_gate.in.grad", d.Full(d.h), d.act);
  b.Gemm("shared_gate.dgrad", {g_gate, st.gate_weight}, {g_x_gate},
         {.m = d.s * d.b, .n = d.h, .k = 1});
  std::vector<TensorId> inputs = {st.x, g_gate};
  const TensorId g_w = b.WeightGrad(st.gate_weight, inputs);
  b.Gemm("shared_gate.wgrad", inputs, {g_w}, {.m = 1, .n = d.h, .k = d.s * d.b});
  const TensorId g_x = ExpertBackward(b, d, st.shared_expert, g_raw);
  return AccumulateGrad(b, "shared_expert.in.grad_sum", g_x, g_x_gate);
}

// The rows this rank's experts run at: Σ tokens (ep > 1: received from the ep ranks).
int64_t Routed(const MoeSpec& spec) {
  int64_t rows = 0;
  for (int64_t t : spec.tokens) rows += t;
  return rows;
}

std::string AllToAllName(const std::string& what) {
  return "moe." + what + "." + std::string(traces::kAllToAllSuffix);
}

// The experts' input: the permuted rows (ep 1), or the rows the dispatch
// all-to-all receives from the ep ranks, each expert's contiguous.
TensorId Dispatch(TraceBuilder& b, const Dims& d, const MoeSpec& spec, TensorId permuted) {
  if (spec.ep == 1) return permuted;
  const TensorId received = b.Activation("moe.received", {Routed(spec), d.h}, d.act);
  b.Op(AllToAllName("dispatch"), OpKind::kCollective, {permuted}, {received}, 0);
  return received;
}

// The most rows one of this rank's experts runs.
int64_t MostRows(const MoeSpec& spec) {
  int64_t most = 0;
  for (int64_t t : spec.tokens) most = std::max(most, t);
  return most;
}

}  // namespace

MoeSpec MoeSpecFor(const ModelConfig& c) {
  MoeSpec spec;
  if (!IsMoe(c)) return spec;
  spec.experts = c.experts;
  spec.top_k = c.experts_per_token;
  spec.ffn = ExpertFfnHidden(c) / c.tp;
  spec.shared_ffn = c.shared_expert_ffn_hidden / c.tp;
  spec.shared_gate = c.shared_expert_gate;
  spec.sigmoid = c.router_score == "sigmoid";
  spec.bias = c.expert_bias;
  spec.clamp = c.swiglu_limit > 0.0;
  spec.ep = c.ep;
  for (int64_t e = 0; e < LocalExperts(c); ++e) spec.tokens.push_back(LocalExpertTokens(c, e));
  for (int64_t e = 0; e < c.experts; ++e) spec.routed += ExpertTokens(c, e);
  return spec;
}

TensorId MoeBranchForward(TraceBuilder& b, const Dims& d, const MoeSpec& spec, TensorId ln,
                          MoeState* st) {
  st->spec = spec;
  st->x = d.sp ? AllGatherSeq(b, d, "moe.in_gathered", ln, TensorKind::kActivation) : ln;
  RouterForward(b, d, st);
  const int64_t routed = spec.routed;
  const TensorId permuted = b.Activation("moe.permuted", {routed, d.h}, d.act);
  st->row_map = b.Activation("moe.row_map", {routed}, kIndexDType);
  b.Op("moe.permute", OpKind::kElementwise, {st->x, st->indices}, {permuted, st->row_map}, 0);
  const TensorId dispatched = Dispatch(b, d, spec, permuted);
  const TensorId out = ExpertForward(b, d, std::string(traces::kRoutedExperts), dispatched,
                                     {Routed(spec)}, spec.ffn, &st->experts, spec.bias, spec.clamp,
                                     static_cast<int64_t>(spec.tokens.size()), MostRows(spec));
  std::vector<TensorId> combine_inputs = {out};
  if (spec.ep > 1) {
    st->returned = b.Activation("moe.returned", {routed, d.h}, d.act);
    b.Op(AllToAllName("combine"), OpKind::kCollective, {out}, {st->returned}, 0);
    combine_inputs = {st->returned};
  }
  combine_inputs.push_back(st->weights);
  combine_inputs.push_back(st->row_map);
  TensorId y = b.Activation("moe.combined", d.Full(d.h), d.act);
  b.Op("moe.unpermute", OpKind::kElementwise, combine_inputs, {y}, kCombineFlops * routed * d.h);
  st->shared = spec.shared_ffn > 0;
  if (st->shared) {
    const TensorId shared = SharedForward(b, d, st);
    const TensorId sum = b.Activation("moe.out", d.Full(d.h), d.act);
    b.Op("moe.shared_add", OpKind::kElementwise, {y, shared}, {sum}, kAddFlops * d.s * d.b * d.h);
    y = sum;
  }
  if (d.sp) return ReduceScatterSeq(b, d, "moe.out_shard", y, TensorKind::kActivation);
  if (d.t > 1) return AllReduce(b, d, "moe.out_reduced", y);
  return y;
}

TensorId MoeBranchBackward(TraceBuilder& b, const Dims& d, const MoeState& st, TensorId g_y) {
  const MoeSpec& spec = st.spec;
  const TensorId g_full =
      d.sp ? AllGatherSeq(b, d, "moe.out.grad_full", g_y, TensorKind::kGradient) : g_y;
  const TensorId g_shared = st.shared ? SharedBackward(b, d, st, g_full) : kNoTensor;
  const bool ep = spec.ep > 1;
  std::vector<TensorId> combine_inputs = {st.row_map, st.weights};
  const ExpertState& experts = st.experts;
  const TensorId g_expert_out =
      b.Gradient(experts.name + ".fc2.out.grad", Shape(experts.rows, d.h), d.act);
  combine_inputs.push_back(ep ? st.returned : experts.out);
  combine_inputs.push_back(g_full);
  const TensorId g_weights = b.Gradient("router.weights.grad", d.Full(spec.top_k), d.act);
  const int64_t routed = spec.routed;
  // ep > 1: the unpermute's gradient rows go back to the experts' ranks.
  const TensorId g_returned =
      ep ? b.Gradient("moe.returned.grad", {routed, d.h}, d.act) : kNoTensor;
  b.Op("moe.unpermute.bwd", OpKind::kElementwise, combine_inputs,
       {ep ? g_returned : g_expert_out, g_weights}, kCombineFlops * routed * d.h);
  if (ep) {
    b.Op(AllToAllName("combine.bwd"), OpKind::kCollective, {g_returned}, {g_expert_out}, 0);
  }
  const TensorId g_in = ExpertBackward(b, d, experts, g_expert_out);
  std::vector<TensorId> dispatch_inputs = {st.row_map};
  if (ep) {
    const TensorId g_permuted = b.Gradient("moe.permuted.grad", {routed, d.h}, d.act);
    b.Op(AllToAllName("dispatch.bwd"), OpKind::kCollective, {g_in}, {g_permuted}, 0);
    dispatch_inputs.push_back(g_permuted);
  } else {
    dispatch_inputs.push_back(g_in);
  }
  const TensorId g_dispatch = b.Gradient("moe.in.grad_dispatch", d.Full(d.h), d.act);
  b.Op("moe.permute.bwd", OpKind::kElementwise, dispatch_inputs, {g_dispatch},
       kAddFlops * routed * d.h);
  TensorId g_x = RouterBackward(b, d, st, g_weights);
  g_x = AccumulateGrad(b, "moe.in.grad_sum", g_dispatch, g_x);
  if (g_shared != kNoTensor) g_x = AccumulateGrad(b, "moe.in.grad_sum_shared", g_x, g_shared);
  if (d.sp) return ReduceScatterSeq(b, d, "moe.in.grad_shard", g_x, TensorKind::kGradient);
  if (d.t > 1) return AllReduce(b, d, "moe.in.grad_reduced", g_x);
  return g_x;
}

}  // namespace ssdtrain::models::detail

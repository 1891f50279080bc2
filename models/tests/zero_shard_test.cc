// ZeRO-2/3 in the trace (models/detail/zero_shard.cc): the bytes per
// parameter of weights, gradients and optimizer state resident all step
// under ZeRO 0-3 and HSDP, in closed form from the unsharded trace's
// parameters; each collective's count and bytes per step under ZeRO-3; the
// gathers' prefetch and copy-outs; the gradients' casts; the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "cmake/build_paths.h"
#include "models/build_trace.h"
#include "traces/collective_kind.h"
#include "traces/storage_plan.h"
#include "traces/trace.h"
#include "traces/validate.h"

namespace ssdtrain::models {
namespace {

// Llama-3-8B's shapes at 4 layers, tp 1, s 256: bf16 weights, fp32 gradients
// (grad_dtype's default for bf16; `grad_dtype` "bf16" for 16-bit ones), Adam
// with fp32 master weights (12 bytes of state per parameter), untied output
// layer, no biases.
ModelConfig Llama(int64_t zero_stage, int64_t dp, int64_t dp_shard = 0, int64_t prefetch = 1,
                  bool defer = false, const std::string& grad_dtype = "") {
  Result<ModelConfig> c =
      LoadModelConfig(std::string(ConfiguredSourceDir()) + "/configs/models/llama-3-8b.json");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return {};
  ModelConfig m = *c;
  m.layers = 4;
  m.seq_len = 256;
  m.tp = 1;
  m.sequence_parallel = false;
  m.dp = dp;
  m.zero_stage = zero_stage;
  m.dp_shard = dp_shard;
  m.zero_prefetch = prefetch;
  m.zero_defer_grad_sync = defer;
  m.grad_dtype = grad_dtype;
  EXPECT_TRUE(ValidateConfig(m, "llama").ok()) << ValidateConfig(m, "llama").ToString();
  return m;
}

traces::Trace Build(const ModelConfig& c) {
  Result<traces::Trace> t = BuildTrace(c, 0);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return {};
  const Status valid = traces::Validate(*t, "zero");
  EXPECT_TRUE(valid.ok()) << valid.ToString();
  return *t;
}

int64_t Elements(const traces::Tensor& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n;
}
int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Resident {
  int64_t weights = 0, gradients = 0, state = 0;
};

Resident ResidentBytes(const traces::Trace& t) {
  Resident r;
  for (const traces::Tensor& x : t.tensors) {
    if (x.alias_of || !traces::IsPersistent(t, x)) continue;
    if (x.kind == traces::TensorKind::kWeight) r.weights += x.bytes;
    if (x.kind == traces::TensorKind::kGradient) r.gradients += x.bytes;
    if (x.kind == traces::TensorKind::kOptimizerState) r.state += x.bytes;
  }
  return r;
}

// The closed form: each weight's n elements at 2 bytes and its gradient's at
// `grad_bytes`, split over d (rounded up per tensor) where the stage shards
// weights (3) and gradients (2, 3); the state 3 fp32 words per parameter of
// each layer's group, split over d at 1-3. At 3 the shards are the fp32 master
// weights (FSDP2's sharded parameters): 4 bytes each, and the state the two
// moments.
Resident Expected(const traces::Trace& unsharded, int64_t stage, int64_t d,
                  int64_t grad_bytes = 4) {
  Resident r;
  std::map<int, int64_t> group_params;
  for (const traces::Tensor& x : unsharded.tensors) {
    if (x.kind != traces::TensorKind::kWeight || x.alias_of) continue;
    const int64_t n = Elements(x);
    r.weights += stage >= 3 ? 4 * CeilDiv(n, d) : 2 * n;
    r.gradients += grad_bytes * (stage >= 2 ? CeilDiv(n, d) : n);
    group_params[x.layer] += n;
  }
  const int64_t words = stage >= 3 ? 2 : 3;
  for (const auto& [layer, p] : group_params) {
    r.state += 4 * CeilDiv(words * p, stage >= 1 ? d : 1);
  }
  return r;
}

TEST(ZeroShard, ResidentBytesPerParameterFollowTheStageInClosedForm) {
  const traces::Trace base = Build(Llama(0, 8));
  int64_t params = 0;
  for (const traces::Tensor& x : base.tensors) {
    if (x.kind == traces::TensorKind::kWeight) params += Elements(x);
  }
  const double d = 8;
  // Bytes per parameter, the sharded parts over d (TODAYS_LAYOUTS.md 1.1,
  // Megatron's dist_optimizer.md table): bf16 weights, fp32 gradients and
  // 12 of state, 2 + 4 + 12; with bf16 gradients 2 + 2 + 12; at ZeRO-3 the
  // fp32 shards and two moments, (4 + 4 + 8) / d, FSDP2's (4 + 2 + 8) / d.
  const double fp32_grads[] = {18, 6 + 12 / d, 2 + 16 / d, 16 / d};
  const double bf16_grads[] = {16, 4 + 12 / d, 2 + 14 / d, 14 / d};
  for (const std::string grad_dtype : {"", "bf16"}) {
    const int64_t grad_bytes = grad_dtype.empty() ? 4 : 2;
    for (int64_t stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE("zero_stage " + std::to_string(stage) + " grad_dtype \"" + grad_dtype + "\"");
      const traces::Trace t = Build(Llama(stage, 8, 0, 1, false, grad_dtype));
      const Resident got = ResidentBytes(t), want = Expected(base, stage, 8, grad_bytes);
      EXPECT_EQ(got.weights, want.weights);
      EXPECT_EQ(got.gradients, want.gradients);
      EXPECT_EQ(got.state, want.state);
      const double total = static_cast<double>(got.weights + got.gradients + got.state);
      EXPECT_NEAR(total / static_cast<double>(params),
                  (grad_bytes == 4 ? fp32_grads : bf16_grads)[stage], 1e-3);
      EXPECT_EQ(t.header.zero_stage, stage);
      EXPECT_EQ(t.header.zero_shards, stage >= 1 ? 8 : 1);
    }
  }
}

TEST(ZeroShard, HsdpShardsOverTheShardGroupOnly) {
  const traces::Trace base = Build(Llama(0, 8));
  // dp 8 as 2 replicas of 4-rank shard groups: everything over 4, not 8.
  const traces::Trace t = Build(Llama(3, 8, 4));
  const Resident got = ResidentBytes(t), want = Expected(base, 3, 4);
  EXPECT_EQ(got.weights, want.weights);
  EXPECT_EQ(got.gradients, want.gradients);
  EXPECT_EQ(got.state, want.state);
  EXPECT_EQ(t.header.zero_shards, 4);
}

struct Collectives {
  int gathers_forward = 0, gathers_backward = 0, scatters = 0;
  int64_t gather_forward_bytes = 0, gather_backward_bytes = 0, scatter_bytes = 0;
};

Collectives Count(const traces::Trace& t) {
  Collectives c;
  for (const traces::Op& op : t.ops) {
    if (op.kind != traces::OpKind::kCollective) continue;
    if (traces::GroupOfCollective(op) != traces::CollectiveGroup::kShard) continue;
    const int64_t payload = traces::CollectivePayloadBytes(op);
    if (traces::ClassifyCollective(op) == traces::CollectiveKind::kAllGather) {
      EXPECT_EQ(op.stream, traces::kZeroGatherStream);
      if (op.phase == traces::Phase::kForward) {
        ++c.gathers_forward;
        c.gather_forward_bytes += payload;
      } else {
        ++c.gathers_backward;
        c.gather_backward_bytes += payload;
      }
    } else {
      EXPECT_EQ(traces::ClassifyCollective(op), traces::CollectiveKind::kReduceScatter);
      EXPECT_EQ(op.stream, traces::kZeroReduceStream);
      EXPECT_EQ(op.phase, t.header.zero_defer_grad_sync ? traces::Phase::kOptimizer
                                                        : traces::Phase::kBackward);
      ++c.scatters;
      c.scatter_bytes += payload;
    }
  }
  return c;
}

TEST(ZeroShard, Zero3CollectivesPerStepInClosedForm) {
  const traces::Trace base = Build(Llama(0, 8));
  // Units: 4 blocks, and the word embeddings, the final norm and the output
  // layer each on its own. Forward reads every weight once (untied); backward
  // reads every weight but the embedding table (its backward scatters the
  // gradient rows and reads no weight).
  int64_t all = 0, read_in_backward = 0;
  for (const traces::Tensor& x : base.tensors) {
    if (x.kind != traces::TensorKind::kWeight) continue;
    all += x.bytes;
    bool backward = false;
    for (traces::OpId o : x.consumers) backward |= base.op(o).phase == traces::Phase::kBackward;
    if (backward) read_in_backward += x.bytes;
  }
  const traces::Trace t = Build(Llama(3, 8));
  const Collectives c = Count(t);
  EXPECT_EQ(c.gathers_forward, 4 + 3);
  EXPECT_EQ(c.gathers_backward, 4 + 2);
  EXPECT_EQ(c.scatters, 4 + 3);
  EXPECT_EQ(c.gather_forward_bytes, all);
  EXPECT_EQ(c.gather_backward_bytes, read_in_backward);
  // Every gradient, full, once per micro-batch, in fp32: twice the weights' bytes.
  EXPECT_EQ(c.scatter_bytes, 2 * all);
  // Each reduce-scatter reads what the op just before it, on the compute
  // stream, cast from the unit's bf16 gradients to fp32 (FSDP2's copy-in).
  int casts = 0;
  for (const traces::Op& op : t.ops) {
    if (!op.name.ends_with(traces::kZeroReduceScatterSuffix)) continue;
    ASSERT_GT(op.id, 0);
    const traces::Op& cast = t.op(op.id - 1);
    ++casts;
    EXPECT_TRUE(cast.name.ends_with(traces::kZeroGradCastSuffix)) << cast.name;
    EXPECT_EQ(cast.kind, traces::OpKind::kElementwise) << cast.name;
    EXPECT_EQ(cast.stream, 0) << cast.name;
    EXPECT_EQ(cast.phase, op.phase) << cast.name;
    EXPECT_EQ(cast.layer, op.layer) << cast.name;
    EXPECT_EQ(cast.outputs, op.inputs) << cast.name;
    EXPECT_EQ(cast.bytes_written, 2 * cast.bytes_read) << cast.name;
    for (traces::TensorId in : cast.inputs) EXPECT_EQ(t.tensor(in).dtype, traces::DType::kBf16);
    for (traces::TensorId out : op.outputs) EXPECT_EQ(t.tensor(out).dtype, traces::DType::kFp32);
  }
  EXPECT_EQ(casts, 4 + 3);
  // With bf16 gradients (NeMo's grad_sync_dtype bf16) no cast, half the bytes.
  const traces::Trace bf16 = Build(Llama(3, 8, 0, 1, false, "bf16"));
  EXPECT_EQ(Count(bf16).scatter_bytes, all);
  for (const traces::Op& op : bf16.ops)
    EXPECT_FALSE(op.name.ends_with(traces::kZeroGradCastSuffix));
  // Each block's forward gather carries its parameters, 2 bytes each.
  for (const traces::Op& op : t.ops) {
    if (op.layer < 0 || !op.name.ends_with(traces::kZeroAllGatherSuffix)) continue;
    int64_t block = 0;
    for (const traces::Tensor& x : base.tensors) {
      if (x.kind == traces::TensorKind::kWeight && x.layer == op.layer) block += x.bytes;
    }
    if (op.phase == traces::Phase::kForward) {
      EXPECT_EQ(op.bytes_written, block) << op.name;
    }
    EXPECT_EQ(op.bytes_read * 8, op.bytes_written) << op.name;  // shards of 1/8, no padding here
  }
  // ZeRO-2: the reduce-scatters alone.
  const Collectives two = Count(Build(Llama(2, 8)));
  EXPECT_EQ(two.gathers_forward + two.gathers_backward, 0);
  EXPECT_EQ(two.scatters, 4 + 3);
  EXPECT_EQ(two.scatter_bytes, 2 * all);
}

// The first reader of a gather's copies, by op index.
std::map<traces::OpId, traces::OpId> FirstReaders(const traces::Trace& t) {
  std::map<traces::OpId, traces::OpId> out;
  for (const traces::Op& op : t.ops) {
    if (!op.name.ends_with(traces::kZeroAllGatherSuffix)) continue;
    out[op.id] = t.tensor(op.outputs[0]).consumers.front();
  }
  return out;
}

TEST(ZeroShard, GathersRunPrefetchUnitsAhead) {
  for (int64_t prefetch : {0, 1, 2}) {
    SCOPED_TRACE("prefetch " + std::to_string(prefetch));
    const traces::Trace t = Build(Llama(3, 8, 0, prefetch));
    std::vector<traces::OpId> forward;  // the forward gathers, in order
    for (const traces::Op& op : t.ops) {
      if (op.phase == traces::Phase::kForward && op.name.ends_with(traces::kZeroAllGatherSuffix)) {
        forward.push_back(op.id);
      }
    }
    const auto reader = FirstReaders(t);
    // Gather k is issued before the first reader of gather k - prefetch, and
    // after that of gather k - prefetch - 1.
    for (size_t k = 0; k < forward.size(); ++k) {
      const size_t ahead = static_cast<size_t>(prefetch);
      const size_t at = k >= ahead ? k - ahead : 0;
      EXPECT_LT(forward[k], reader.at(forward[at]));
      if (k >= ahead + 1) {
        EXPECT_GT(forward[k], reader.at(forward[k - ahead - 1]));
      }
    }
  }
}

// FSDP2's copy-out: each gather's outputs are read by one op alone, on the
// compute stream, in the gather's phase and layer, which copies them into the
// weights the run reads (as many bytes each way) just before the run's first
// op: nothing but other gathers and copy-outs lies between.
TEST(ZeroShard, EachGatherIsCopiedOutJustBeforeItsRun) {
  const traces::Trace t = Build(Llama(3, 8));
  int gathers = 0;
  for (const traces::Op& gather : t.ops) {
    if (!gather.name.ends_with(traces::kZeroAllGatherSuffix)) continue;
    ++gathers;
    const std::vector<traces::OpId>& readers = t.tensor(gather.outputs[0]).consumers;
    ASSERT_EQ(readers.size(), 1u) << gather.name;
    const traces::Op& copy = t.op(readers[0]);
    EXPECT_TRUE(copy.name.ends_with(traces::kZeroCopyOutSuffix)) << copy.name;
    EXPECT_EQ(copy.kind, traces::OpKind::kElementwise) << copy.name;
    EXPECT_EQ(copy.stream, 0) << copy.name;
    EXPECT_EQ(copy.phase, gather.phase) << copy.name;
    EXPECT_EQ(copy.layer, gather.layer) << copy.name;
    EXPECT_EQ(copy.inputs, gather.outputs) << copy.name;
    EXPECT_EQ(copy.bytes_read, gather.bytes_written) << copy.name;
    EXPECT_EQ(copy.bytes_written, gather.bytes_written) << copy.name;
    traces::OpId first = static_cast<traces::OpId>(t.ops.size());
    for (traces::TensorId w : copy.outputs) {
      EXPECT_TRUE(t.tensor(w).name.ends_with(".gathered") ||
                  t.tensor(w).name.ends_with(".gathered_bwd"))
          << t.tensor(w).name;
      ASSERT_FALSE(t.tensor(w).consumers.empty()) << t.tensor(w).name;
      first = std::min(first, t.tensor(w).consumers.front());
    }
    for (traces::OpId between = copy.id + 1; between < first; ++between) {
      const std::string& name = t.op(between).name;
      EXPECT_TRUE(name.ends_with(traces::kZeroCopyOutSuffix) ||
                  name.ends_with(traces::kZeroAllGatherSuffix))
          << name << " between " << copy.name << " and its run";
    }
  }
  EXPECT_EQ(gathers, 7 + 6);
}

// The shards are the fp32 master weights (FSDP2's sharded parameters): each
// gather sends their casts to bf16, which the op just before it writes on the
// compute stream (FSDP2's all-gather copy-in); the optimizer has no master
// word and no copy back to 16 bits. Without master weights (precision pure)
// the shards stay bf16 and are sent as they are.
TEST(ZeroShard, GathersSendTheFp32ShardsCastToBf16) {
  const traces::Trace t = Build(Llama(3, 8));
  int casts = 0;
  for (const traces::Op& gather : t.ops) {
    if (!gather.name.ends_with(traces::kZeroAllGatherSuffix)) continue;
    ASSERT_GT(gather.id, 0);
    const traces::Op& cast = t.op(gather.id - 1);
    ++casts;
    EXPECT_TRUE(cast.name.ends_with(traces::kZeroGatherCastSuffix)) << cast.name;
    EXPECT_EQ(cast.stream, 0) << cast.name;
    EXPECT_EQ(cast.phase, gather.phase) << cast.name;
    EXPECT_EQ(cast.outputs, gather.inputs) << cast.name;
    EXPECT_EQ(cast.bytes_read, 2 * cast.bytes_written) << cast.name;
    for (traces::TensorId w : cast.inputs) {
      EXPECT_EQ(t.tensor(w).kind, traces::TensorKind::kWeight) << t.tensor(w).name;
      EXPECT_EQ(t.tensor(w).dtype, traces::DType::kFp32) << t.tensor(w).name;
    }
    for (traces::TensorId x : gather.inputs) {
      EXPECT_EQ(t.tensor(x).dtype, traces::DType::kBf16) << t.tensor(x).name;
      EXPECT_FALSE(traces::IsPersistent(t, t.tensor(x))) << t.tensor(x).name;
    }
  }
  EXPECT_EQ(casts, 7 + 6);
  auto copies_back = [](const traces::Trace& x) {
    int n = 0;
    for (const traces::Op& op : x.ops) n += op.name.ends_with("master_to_model") ? 1 : 0;
    return n;
  };
  EXPECT_EQ(copies_back(t), 0);
  EXPECT_GT(copies_back(Build(Llama(2, 8))), 0);  // the master in the state below ZeRO-3
  ModelConfig pure = Llama(3, 8);
  pure.precision = "pure";
  const traces::Trace p = Build(pure);
  for (const traces::Op& op : p.ops) {
    EXPECT_FALSE(op.name.ends_with(traces::kZeroGatherCastSuffix)) << op.name;
    if (!op.name.ends_with(traces::kZeroAllGatherSuffix)) continue;
    for (traces::TensorId w : op.inputs) {
      EXPECT_EQ(p.tensor(w).kind, traces::TensorKind::kWeight) << p.tensor(w).name;
      EXPECT_EQ(p.tensor(w).dtype, traces::DType::kBf16) << p.tensor(w).name;
    }
  }
}

TEST(ZeroShard, GatheredCopiesAreTransientAndFullGradientsToo) {
  const traces::Trace t = Build(Llama(3, 8));
  for (const traces::Tensor& x : t.tensors) {
    if (x.name.ends_with(".gathered") || x.name.ends_with(".gathered_bwd") ||
        x.name.ends_with(".gather_out") || x.name.ends_with(".gather_out_bwd")) {
      EXPECT_EQ(x.kind, traces::TensorKind::kWorkspace) << x.name;
      EXPECT_FALSE(traces::IsPersistent(t, x)) << x.name;
      ASSERT_FALSE(x.consumers.empty()) << x.name;
    }
    if (x.kind == traces::TensorKind::kGradient && x.name.ends_with(".grad")) {
      EXPECT_FALSE(traces::IsPersistent(t, x)) << x.name << " is read by its reduce-scatter only";
    }
  }
}

// Deferred gradient sync: the full (bf16) gradients are weight gradients,
// resident beside their fp32 shards (2 bytes a parameter more: ZeRO-2
// 4 + 16/d, ZeRO-3 2 + 16/d); the casts and reduce-scatters are the optimizer
// phase's first ops, the same ones in the order the backward completes their
// units; at stages 0 and 1 the flag changes nothing.
TEST(ZeroShard, DeferredSyncHoldsFullGradientsAndScattersAfterTheBackward) {
  const traces::Trace base = Build(Llama(0, 8));
  int64_t params = 0, full_gradient_bytes = 0;
  for (const traces::Tensor& x : base.tensors) {
    if (x.kind != traces::TensorKind::kWeight) continue;
    params += Elements(x);
    full_gradient_bytes += 2 * Elements(x);
  }
  const double d = 8;
  for (int64_t stage : {2, 3}) {
    SCOPED_TRACE("zero_stage " + std::to_string(stage));
    const traces::Trace every = Build(Llama(stage, 8));
    const traces::Trace t = Build(Llama(stage, 8, 0, 1, /*defer=*/true));
    EXPECT_TRUE(t.header.zero_defer_grad_sync);
    EXPECT_NE(traces::Fingerprint(t), traces::Fingerprint(every));
    const Resident got = ResidentBytes(t), want = Expected(base, stage, 8);
    EXPECT_EQ(got.weights, want.weights);
    EXPECT_EQ(got.gradients, want.gradients + full_gradient_bytes);
    EXPECT_EQ(got.state, want.state);
    const double total = static_cast<double>(got.weights + got.gradients + got.state);
    EXPECT_NEAR(total / static_cast<double>(params), stage == 2 ? 4 + 16 / d : 2 + 16 / d, 1e-3);
    // The same collectives, the reduce-scatters moved.
    const Collectives c = Count(t), c_every = Count(every);
    EXPECT_EQ(c.scatters, 4 + 3);
    EXPECT_EQ(c.scatter_bytes, c_every.scatter_bytes);
    EXPECT_EQ(c.gathers_forward + c.gathers_backward,
              c_every.gathers_forward + c_every.gathers_backward);
    std::vector<std::string> order, order_every;
    for (const traces::Op& op : every.ops) {
      if (op.name.ends_with(traces::kZeroReduceScatterSuffix) ||
          op.name.ends_with(traces::kZeroGradCastSuffix)) {
        order_every.push_back(op.name);
      }
    }
    bool optimizer_seen = false, compute_after_scatter = false;
    for (const traces::Op& op : t.ops) {
      const bool scatter = op.name.ends_with(traces::kZeroReduceScatterSuffix) ||
                           op.name.ends_with(traces::kZeroGradCastSuffix);
      if (scatter) {
        order.push_back(op.name);
        EXPECT_TRUE(optimizer_seen || op.phase == traces::Phase::kOptimizer) << op.name;
        EXPECT_FALSE(compute_after_scatter) << op.name << " after an optimizer op";
      }
      if (op.phase == traces::Phase::kOptimizer) {
        optimizer_seen = true;
        if (!scatter) compute_after_scatter = true;
      }
    }
    EXPECT_EQ(order, order_every);
    // Every full gradient is read by its cast alone, and resident; the
    // reduce-scatter reads the cast's transient fp32 copies.
    int64_t full = 0;
    for (const traces::Op& op : t.ops) {
      if (!op.name.ends_with(traces::kZeroGradCastSuffix)) continue;
      for (traces::TensorId out : op.outputs) {
        EXPECT_FALSE(traces::IsPersistent(t, t.tensor(out))) << t.tensor(out).name;
      }
      for (traces::TensorId in : op.inputs) {
        const traces::Tensor& x = t.tensor(in);
        EXPECT_TRUE(traces::IsPersistent(t, x)) << x.name;
        EXPECT_EQ(x.consumers, std::vector<traces::OpId>{op.id}) << x.name;
        full += x.bytes;
      }
    }
    EXPECT_EQ(full, full_gradient_bytes);
  }
  for (int64_t stage : {0, 1}) {
    const traces::Trace t = Build(Llama(stage, 8, 0, 1, /*defer=*/true));
    EXPECT_FALSE(t.header.zero_defer_grad_sync);
    EXPECT_EQ(traces::Fingerprint(t), traces::Fingerprint(Build(Llama(stage, 8))));
  }
}

TEST(ZeroShard, RefusesWhatTheLayoutRefuses) {
  ModelConfig c = Llama(0, 8);
  c.zero_stage = 4;
  Status s = ValidateConfig(c, "m.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("m.json: zero_stage: expected 0, 1, 2 or 3"), std::string::npos)
      << s.ToString();
  c.zero_stage = 3;
  c.dp_shard = 3;
  s = ValidateConfig(c, "m.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("m.json: dp_shard: 3 does not divide dp 8"), std::string::npos)
      << s.ToString();
  c.dp_shard = 0;
  c.zero_prefetch = -1;
  s = ValidateConfig(c, "m.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("m.json: zero_prefetch:"), std::string::npos) << s.ToString();
  c.zero_prefetch = 1;
  c.dp_shard = 4;
  c.zero_defer_grad_sync = true;
  s = ValidateConfig(c, "m.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("m.json: zero_defer_grad_sync: not modelled with HSDP (dp_shard 4 < "
                              "dp 8)"),
            std::string::npos)
      << s.ToString();
}

}  // namespace
}  // namespace ssdtrain::models

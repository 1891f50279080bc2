// The interleaved whole step (traces/chunks.h, traces/whole_step.h): a stage's
// trace split into its model chunks, a send and a recv at each chunk boundary,
// and each chunk step running its chunk's ops, on a hand-built chain of
// blocks (ChainStage) whose shapes and counts are written out.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "traces/chunks.h"
#include "traces/storage_plan.h"
#include "traces/whole_step.h"

namespace ssdtrain::traces {
namespace {

constexpr int64_t kBytes = 4096;  // every activation and gradient, 1024 fp32

// Stage `stage` of `p` of a chain of `blocks` blocks per stage: block l's
// forward fc.l (h_l, w_l) -> h_{l+1} saves its input h_l; its backward
// fc.l.bwd (g_{l+1}, h_l, w_l) -> g_l, gw_l. Stage 0 embeds the tokens
// first, the last stage ends with the loss; between stages a recv and a send
// as the model builders make them; the optimizer's one op last.
Trace ChainStage(int64_t stage, int64_t p, int64_t blocks) {
  Trace t;
  Header& h = t.header;
  h.model = "chain";
  h.family = "gpt";
  h.layers = static_cast<int>(p * blocks);
  h.stage_layers = static_cast<int>(blocks);
  h.first_layer = static_cast<int>(stage * blocks);
  h.stage = stage;
  h.pp = p;
  auto tensor = [&](const std::string& name, TensorKind kind) {
    Tensor x;
    x.id = static_cast<TensorId>(t.tensors.size());
    x.name = name;
    x.dtype = DType::kFp32;
    x.shape = {1024};
    x.bytes = kBytes;
    x.kind = kind;
    t.tensors.push_back(x);
    return x.id;
  };
  auto op = [&](const std::string& name, OpKind kind, Phase phase, int layer,
                std::vector<TensorId> in, std::vector<TensorId> out) {
    Op o;
    o.id = static_cast<OpId>(t.ops.size());
    o.name = name;
    o.kind = kind;
    o.phase = phase;
    o.layer = layer;
    o.stage = static_cast<int>(stage);
    for (TensorId i : in) t.tensors[static_cast<size_t>(i)].consumers.push_back(o.id);
    for (TensorId i : out) t.tensors[static_cast<size_t>(i)].producer = o.id;
    o.inputs = std::move(in);
    o.outputs = std::move(out);
    t.ops.push_back(o);
  };
  const bool first = stage == 0, last = stage == p - 1;
  const int lo = h.first_layer, hi = lo + static_cast<int>(blocks);
  std::vector<TensorId> w, hs;
  const TensorId tokens = tensor("tokens", TensorKind::kInput);
  const TensorId emb = tensor("emb.w", TensorKind::kWeight);
  hs.push_back(tensor("h" + std::to_string(lo), TensorKind::kActivation));
  if (first) {
    op("embed", OpKind::kEmbedding, Phase::kForward, kNoLayer, {tokens, emb}, {hs[0]});
  } else {
    op("stage_input.recv", OpKind::kRecv, Phase::kForward, kNoLayer, {}, {hs[0]});
  }
  for (int l = lo; l < hi; ++l) {
    w.push_back(tensor("w" + std::to_string(l), TensorKind::kWeight));
    hs.push_back(tensor("h" + std::to_string(l + 1), TensorKind::kActivation));
    op("fc." + std::to_string(l), OpKind::kGemm, Phase::kForward, l, {hs.end()[-2], w.back()},
       {hs.back()});
    t.tensors[static_cast<size_t>(hs.end()[-2])].saved_for_backward = true;
    t.tensors[static_cast<size_t>(hs.end()[-2])].offloadable = true;
  }
  TensorId g = tensor("g" + std::to_string(hi), TensorKind::kGradient);
  if (last) {
    op("loss", OpKind::kLoss, Phase::kForward, kNoLayer, {hs.back(), tokens}, {});
    op("loss.bwd", OpKind::kLoss, Phase::kBackward, kNoLayer, {hs.back()}, {g});
    t.tensors[static_cast<size_t>(hs.back())].saved_for_backward = true;
  } else {
    op("stage_output.send", OpKind::kSend, Phase::kForward, kNoLayer, {hs.back()}, {});
    op("stage_output.grad.recv", OpKind::kRecv, Phase::kBackward, kNoLayer, {}, {g});
  }
  std::vector<TensorId> gw;
  for (int l = hi - 1; l >= lo; --l) {
    const TensorId gl = tensor("g" + std::to_string(l), TensorKind::kGradient);
    gw.push_back(tensor("gw" + std::to_string(l), TensorKind::kGradient));
    op("fc." + std::to_string(l) + ".bwd", OpKind::kGemm, Phase::kBackward, l,
       {g, hs[static_cast<size_t>(l - lo)], w[static_cast<size_t>(l - lo)]}, {gl, gw.back()});
    g = gl;
  }
  if (first) {
    const TensorId gemb = tensor("emb.grad", TensorKind::kGradient);
    op("embed.bwd", OpKind::kEmbedding, Phase::kBackward, kNoLayer, {g}, {gemb});
    gw.push_back(gemb);
  } else {
    op("stage_input.grad.send", OpKind::kSend, Phase::kBackward, kNoLayer, {g}, {});
  }
  op("adam", OpKind::kOptimizer, Phase::kOptimizer, kNoLayer, gw, {});
  return t;
}

Plan InterleavedPlan(const Trace& t, int64_t p, int64_t m, int64_t v) {
  Plan plan;
  plan.model = t.header.model;
  plan.trace_fingerprint = Fingerprint(t);
  plan.pp = p;
  plan.num_micro_batches = m;
  plan.schedule = "interleaved";
  plan.virtual_stages = v;
  return plan;
}

TEST(SplitIntoChunks, EachBoundaryIsASendAndARecvOfACopy) {
  // Stage 0 of 2, two blocks, v = 2: chunk 0 is embed and fc.0, chunk 1 fc.1
  // and the stage's send. Chunk 0 hands chunk 1 h1 (fc.1 and fc.1.bwd read
  // it), chunk 1's backward hands chunk 0 g1.
  const Trace t = ChainStage(0, 2, 2);
  auto c = SplitIntoChunks(t, 2);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::vector<std::string> names;
  for (size_t i = 0; i < c->trace.ops.size(); ++i) {
    names.push_back(c->trace.ops[i].name + "@" + std::to_string(c->chunk[i]));
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"embed@0", "fc.0@0", "h1.chunk1.send@0", "h1.chunk1.recv@1",
                                      "fc.1@1", "stage_output.send@1", "stage_output.grad.recv@1",
                                      "fc.1.bwd@1", "g1.chunk0.send@1", "g1.chunk0.recv@0",
                                      "fc.0.bwd@0", "embed.bwd@0", "adam@-1"}));
  // Two copies appended after the original's 13 tensors, of h1's and g1's shape.
  ASSERT_EQ(c->trace.tensors.size(), t.tensors.size() + 2);
  const Tensor& h1 = c->trace.tensors[t.tensors.size()];
  const Tensor& g1 = c->trace.tensors[t.tensors.size() + 1];
  EXPECT_EQ(h1.name, "h1.chunk1");
  EXPECT_EQ(h1.bytes, kBytes);
  EXPECT_EQ(h1.shape, std::vector<int64_t>{1024});
  EXPECT_EQ(h1.kind, TensorKind::kActivation);
  EXPECT_TRUE(h1.saved_for_backward);  // fc.1.bwd reads the copy
  EXPECT_EQ(g1.name, "g1.chunk0");
  EXPECT_EQ(g1.kind, TensorKind::kGradient);
  // The original h1 now feeds only its send, and is saved no longer.
  for (const Tensor& x : c->trace.tensors) {
    if (x.name != "h1") continue;
    ASSERT_EQ(x.consumers.size(), 1u);
    EXPECT_EQ(c->trace.op(x.consumers[0]).name, "h1.chunk1.send");
    EXPECT_FALSE(x.saved_for_backward);
  }
  EXPECT_EQ(c->trace.op(c->op_of[2]).name, "fc.1");  // fc.1 moved two places
  EXPECT_EQ(c->original_op[2], kNoOp);               // a boundary's send repeats no op
}

TEST(SplitIntoChunks, RefusesATensorThatSkipsAChunk) {
  // Three blocks in three chunks; fc.2 also reads h1, two chunks back.
  Trace t = ChainStage(0, 2, 3);
  for (Op& op : t.ops) {
    if (op.name != "fc.2") continue;
    for (Tensor& x : t.tensors) {
      if (x.name != "h1") continue;
      op.inputs.push_back(x.id);
      x.consumers.push_back(op.id);
    }
  }
  auto c = SplitIntoChunks(t, 3);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "the trace of chain stage 0: tensor h1 of chunk 0's forward is read by fc.2 of chunk "
            "2: only the neighbouring chunk's pass may take a chunk's output");
}

TEST(UnrollStep, InterleavedRunsEachChunkStepWithItsTransfers) {
  // p = 2, v = 2, m = 4 on stage 0: 4 micro-batches × (6 forward and 6
  // backward ops of the chunked stage, the 4 transfers among them) + adam.
  const Trace t = ChainStage(0, 2, 2);
  auto w = UnrollStep(t, InterleavedPlan(t, 2, 4, 2), "p.json");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->trace.ops.size(), 4u * 12 + 1);
  ASSERT_EQ(w->chunk.size(), w->trace.ops.size());
  ASSERT_EQ(w->original_op.size(), w->trace.ops.size());
  // The ops run in StageOrder's chunk steps, each step its chunk's ops.
  std::vector<StageTask> ran;
  int sends = 0, recvs = 0, repeats_none = 0;
  for (size_t i = 0; i < w->trace.ops.size(); ++i) {
    const Op& op = w->trace.ops[i];
    if (op.phase == Phase::kOptimizer) continue;
    const StageTask task{op.phase == Phase::kForward, op.micro_batch, w->chunk[i]};
    if (ran.empty() || !(ran.back() == task)) ran.push_back(task);
    sends += op.kind == OpKind::kSend;
    recvs += op.kind == OpKind::kRecv;
    repeats_none += w->original_op[i] == kNoOp;
  }
  EXPECT_EQ(ran, StageOrder(Schedule::kInterleaved, 2, 0, 4, 2));
  // Per micro-batch: forward sends h1 (chunk 0) and the stage's output
  // (chunk 1) and receives h1's copy; backward receives the output's
  // gradient, sends g1 and receives its copy: 3 each way, 2 of them a boundary's.
  EXPECT_EQ(sends, 4 * 3);
  EXPECT_EQ(recvs, 4 * 3);
  EXPECT_EQ(repeats_none, 4 * 4);
  // Each micro-batch has its own copies: 13 original tensors and 2 copies, of
  // which the 8 that are not weights, their gradients or inputs (h0..h2,
  // g0..g2 and the copies) repeat for micro-batches 1 to 3.
  EXPECT_EQ(w->trace.tensors.size(), 15u + 3 * 8);
  EXPECT_EQ(w->plan.trace_fingerprint, Fingerprint(w->trace));
}

TEST(UnrollStep, InterleavedKeepHoldsEveryChunkInFlight) {
  // Keep everything: stage 0 of p = 2, v = 2, m = 4 holds ChunksInFlight = 5
  // chunk passes at once; each forward chunk leaves its block's saved input
  // (4096 bytes: h0 in chunk 0, h1's copy in chunk 1) for its backward. The
  // peak is in the fifth, F2.0, as fc.0 writes h1: micro-batches 0 and 1's
  // h0 and h1 copy, and micro-batch 2's h0 and h1, 6 × 4096 bytes.
  const Trace t = ChainStage(0, 2, 2);
  auto w = UnrollStep(t, InterleavedPlan(t, 2, 4, 2), "p.json");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  auto sp = ResolvePlan(w->trace, w->plan, "p.json");
  ASSERT_TRUE(sp.ok()) << sp.status().ToString();
  const StaticPeaks peaks = ComputeStaticPeaks(w->trace, *sp);
  EXPECT_EQ(peaks.activation_bytes, 6 * kBytes);
  EXPECT_EQ(ChunksInFlight(Schedule::kInterleaved, 2, 0, 4, 2), 5);
}

// The messages between each pair of ranks: what one sends, in order, is what
// the other receives, in order (a recv takes the next message from its peer).
// A message is named by micro-batch, direction and the virtual stage c·p + s
// that sent it.
using Message = std::tuple<int64_t, bool, int64_t>;

TEST(UnrollStep, InterleavedStagesSendWhatTheirNeighboursReceiveInOrder) {
  for (const int64_t p : {2, 4}) {
    for (const int64_t m : {p, 2 * p}) {
      SCOPED_TRACE("p = " + std::to_string(p) + ", m = " + std::to_string(m));
      const int64_t v = 2;
      std::map<std::pair<int64_t, int64_t>, std::vector<Message>> sent, received;
      for (int64_t s = 0; s < p; ++s) {
        const Trace t = ChainStage(s, p, v);
        auto w = UnrollStep(t, InterleavedPlan(t, p, m, v), "p.json");
        ASSERT_TRUE(w.ok()) << w.status().ToString();
        for (size_t i = 0; i < w->trace.ops.size(); ++i) {
          const Op& op = w->trace.ops[i];
          if (op.kind != OpKind::kSend && op.kind != OpKind::kRecv) continue;
          const bool gradient = op.phase == Phase::kBackward;
          const int64_t here = w->chunk[i] * p + s;
          if (op.kind == OpKind::kSend) {
            const int64_t to = (here + (gradient ? -1 : 1)) % p;
            sent[{s, (to + p) % p}].push_back({op.micro_batch, gradient, here});
          } else {
            const int64_t from = here + (gradient ? 1 : -1);
            received[{from % p, s}].push_back({op.micro_batch, gradient, from});
          }
        }
      }
      EXPECT_EQ(sent, received);
      // Each micro-batch crosses v·p − 1 boundaries each way.
      size_t messages = 0;
      for (const auto& [pair, list] : sent) messages += list.size();
      EXPECT_EQ(messages, static_cast<size_t>(m * 2 * (v * p - 1)));
    }
  }
}

}  // namespace
}  // namespace ssdtrain::traces

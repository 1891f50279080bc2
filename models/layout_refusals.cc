// The layouts a model cannot run, decided once for the config's validation and
// the planner's search (sim::PlannerOptions' tp_refusal, cp_refusal and
// pp_refusal): the tp degrees its widths refuse, whether it can run
// context-parallel, and whether its pipeline stages are alike. Declared in
// models/model_config.h.
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "models/mla_config.h"
#include "models/model_config.h"
#include "models/moe_config.h"

namespace ssdtrain::models {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

}  // namespace

std::string PipelineStagesRefusal(const ModelConfig& c, const traces::Layout& l) {
  if (c.family == "t5" && l.pp > 1 && l.vp > 1) {
    return "an encoder-decoder model does not interleave: the encoder's relative position "
           "bias and its output are read by every later model chunk, not only the next (as "
           "Megatron-LM refuses virtual pipeline stages for a model with both encoder and "
           "decoder)";
  }
  if (l.pp < 4 || traces::PipelineSplitError(l, c.layers)) return "";
  // Interleaved (vp > 1, the even split): stage s holds model chunks c·pp + s,
  // each layers / (pp·vp) blocks (traces/whole_step.h).
  const bool interleaved = l.vp > 1 && c.layers % (l.pp * l.vp) == 0;
  auto ranges = [&](int64_t stage) {
    std::vector<traces::StageBlocks> r;
    if (!interleaved)
      return std::vector<traces::StageBlocks>{traces::BlocksOfStage(l, c.layers, stage)};
    const int64_t per_chunk = c.layers / (l.pp * l.vp);
    for (int64_t chunk = 0; chunk < l.vp; ++chunk) {
      r.push_back({(chunk * l.pp + stage) * per_chunk, per_chunk});
    }
    return r;
  };
  auto kinds = [&](int64_t stage) {
    std::vector<std::array<bool, 3>> k;
    for (const traces::StageBlocks& b : ranges(stage)) {
      for (int64_t i = b.first; i < b.first + b.count; ++i) {
        k.push_back({c.family == "t5" && i >= c.encoder_layers, IsMoeLayer(c, i),
                     AttentionWindow(c, i) > 0});
      }
    }
    return k;
  };
  auto blocks = [&](int64_t stage) {
    std::string s = "stage " + Str(stage) + " (blocks ";
    const std::vector<traces::StageBlocks> r = ranges(stage);
    for (size_t i = 0; i < r.size(); ++i) {
      s += (i == 0 ? "" : ", ") + Str(r[i].first) + "-" + Str(r[i].first + r[i].count - 1);
    }
    return s + ")";
  };
  const std::vector<std::array<bool, 3>> one = kinds(1);
  for (int64_t s = 2; s + 1 < l.pp; ++s) {
    if (kinds(s) == one) continue;
    return blocks(s) + " holds other blocks than " + blocks(1) +
           " (encoder or decoder, MoE or dense, windowed or full attention), which stands for "
           "every stage between the first and the last";
  }
  return "";
}

std::string TensorParallelRefusal(const ModelConfig& c, int64_t tp) {
  if (tp < 1) return "expected a positive integer, got " + Str(tp);
  if (tp > 1 && c.cross_entropy == "torch") {
    return "cross_entropy torch is modelled at tp 1 only (its input is the whole vocabulary's "
           "logits; torchtitan's tensor parallel runs loss_parallel, vocab_parallel here)";
  }
  if (tp > 1 && c.projections == "separate") {
    return "projections separate is modelled at tp 1 only (torchtitan's tensor parallel "
           "gathers the norm output once for wq, wk and wv; not modelled)";
  }
  std::vector<std::pair<const char*, int64_t>> widths = {
      {"heads", c.heads}, {"kv_heads", KvHeads(c)}, {"ffn_hidden", FfnHidden(c)}};
  if (c.experts > 0) {
    widths.emplace_back("expert_ffn_hidden", ExpertFfnHidden(c));
    widths.emplace_back("shared_expert_ffn_hidden", c.shared_expert_ffn_hidden);
  }
  for (const auto& [field, width] : widths) {
    if (width % tp != 0) return Str(tp) + " does not divide " + field + " " + Str(width);
  }
  return "";
}

std::string ContextParallelRefusal(const ModelConfig& c) {
  if (c.attention != "flash") {
    return "context parallelism needs attention flash (it runs attention as a ring of fused "
           "attention kernels, as Transformer Engine does), got attention " +
           c.attention;
  }
  if (c.family == "t5") {
    return "context parallelism is not modelled for t5 (its relative position bias spans the "
           "whole sequence)";
  }
  if (c.sliding_window > 0 && c.sliding_window < c.seq_len) {
    return "context parallelism is not modelled with a sliding window (" + Str(c.sliding_window) +
           ") shorter than the sequence (" + Str(c.seq_len) +
           "): a ring that skips the steps outside the window is not built";
  }
  if (c.attention_sinks) {
    return "context parallelism is not modelled with attention sinks (each ring step's partial "
           "softmax would need the sink once)";
  }
  if (IsMla(c)) {
    return "context parallelism is not modelled with multi-head latent attention yet (its ring "
           "would carry the up-projected keys and values, of qk and v widths apart)";
  }
  return "";
}

}  // namespace ssdtrain::models

// ssdtrain trace: model config -> operator trace (JSON or CBOR), with a summary.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "app/cli_errors.h"
#include "app/command.h"
#include "app/outputs.h"
#include "models/build_trace.h"
#include "models/hf_config.h"
#include "models/model_config.h"
#include "models/moe_config.h"
#include "traces/io.h"
#include "traces/summary.h"

namespace ssdtrain::app {
namespace {

struct TraceOptions {
  std::string model;
  std::string from;  // a trace file to read instead of building one
  std::string output;
  int64_t stage = 0;
  bool summary = false;
  models::ConfigOverrides overrides;
};

std::string HumanBytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.2f} MB", b / 1e6);
  if (b >= 1e3) return fmt::format("{:.2f} kB", b / 1e3);
  return fmt::format("{} B", bytes);
}

std::string HumanFlops(int64_t flops) {
  const double f = static_cast<double>(flops);
  if (f >= 1e12) return fmt::format("{:.2f} TFLOP", f / 1e12);
  if (f >= 1e9) return fmt::format("{:.2f} GFLOP", f / 1e9);
  return fmt::format("{:.2f} MFLOP", f / 1e6);
}

void PrintSummary(const traces::Trace& trace, std::ostream& out) {
  const traces::Header& h = trace.header;
  const traces::TraceSummary s = traces::Summarize(trace);
  out << fmt::format(
      "{} ({}): h={} a={} layers={} s={} b={} tp={}{} pp={} stage={} dtype={}{} attention={}{}\n",
      h.model, h.family, h.hidden, h.heads, h.layers, h.seq_len, h.micro_batch, h.tp,
      h.sequence_parallel ? "+sp" : "", h.pp, h.stage, h.dtype,
      h.fp8.empty() ? "" : " fp8=" + h.fp8, h.attention,
      h.attention_kernel.empty() ? "" : " (" + h.attention_kernel + ")");
  out << fmt::format("{} ops, {} tensors, weights {}\n\n", trace.ops.size(), s.tensors,
                     HumanBytes(s.weight_bytes));
  out << fmt::format("{:>6} {:>6} {:>12} {:>12} {:>14} {:>14} {:>10}\n", "layer", "ops", "saved",
                     "offloadable", "fwd FLOPs", "bwd FLOPs", "bytes/FLOP");
  auto row = [&](const std::string& name, const traces::LayerSummary& l) {
    const double per_flop = l.forward_flops > 0 ? static_cast<double>(l.saved_bytes) /
                                                      static_cast<double>(l.forward_flops)
                                                : 0.0;
    out << fmt::format("{:>6} {:>6} {:>12} {:>12} {:>14} {:>14} {:>10.2e}\n", name, l.ops,
                       HumanBytes(l.saved_bytes), HumanBytes(l.offloadable_bytes),
                       HumanFlops(l.forward_flops), HumanFlops(l.backward_flops), per_flop);
  };
  for (const traces::LayerSummary& l : s.layers) {
    row(l.layer == traces::kNoLayer ? "other" : std::to_string(l.layer), l);
  }
  row("total", s.total);
  out << "\nbytes/FLOP: saved activation bytes per forward FLOP (what offloading must move per "
         "unit of compute)\n";
}

// What a Hugging Face config.json gave and what was assumed (nothing for our own configs).
void PrintHfReport(const models::HfReport& r, std::ostream& out) {
  if (r.model_type.empty()) return;
  out << fmt::format("Hugging Face config (model_type {}):\n", r.model_type);
  for (const std::string& line : r.read) out << "  read:    " << line << "\n";
  for (const std::string& line : r.assumed) out << "  assumed: " << line << "\n";
  std::string ignored;
  for (const std::string& name : r.ignored) ignored += (ignored.empty() ? "" : ", ") + name;
  if (!ignored.empty()) out << "  ignored (no effect on the trace): " << ignored << "\n";
  out << "  flags (--seq-len, --micro-batch, --tp, --pp, --dtype, --attention) override the "
         "assumptions\n\n";
}

// -o: the trace as ssdtrain's JSON or CBOR, and a line saying so.
Status WriteIfAsked(const traces::Trace& trace, const std::string& output) {
  if (output.empty()) return Status::Ok();
  SSDTRAIN_RETURN_IF_ERROR(traces::WriteTrace(trace, output));
  std::cerr << fmt::format("wrote {} ({} ops, {} tensors)\n", output, trace.ops.size(),
                           trace.tensors.size());
  return Status::Ok();
}

// --from: a trace read (ssdtrain's, Chakra, a PyTorch execution trace), written as ssdtrain's.
int RunFrom(const TraceOptions& o, const CLI::App& cmd) {
  for (const CLI::Option* opt : cmd.get_options()) {
    const std::string name = opt->get_name();
    if (opt->count() > 0 && name != "--from" && name != "--output" && name != "--summary") {
      return ReportError(
          "trace", Status::InvalidArgument(name + ": builds a trace from --model; --from reads one "
                                                  "as it is (give one or the other)"));
    }
  }
  Outputs outputs;
  outputs.Add("-o", o.output);
  if (Status s = outputs.Check(); !s.ok()) return ReportError("trace", s);
  Result<traces::Trace> trace = ReadUserTrace("trace", o.from);
  if (!trace.ok()) return ReportError("trace", trace.status());
  if (Status s = WriteIfAsked(*trace, o.output); !s.ok()) return ReportError("trace", s);
  if (o.summary || o.output.empty()) PrintSummary(*trace, std::cout);
  return 0;
}

int Run(const TraceOptions& o, const CLI::App& cmd) {
  if (o.model.empty() == o.from.empty()) {
    return ReportError(
        "trace", Status::InvalidArgument("give exactly one of --model (a config to build the trace "
                                         "from) and --from (a trace file to read)"));
  }
  if (!o.from.empty()) return RunFrom(o, cmd);
  Outputs outputs;
  outputs.Add("-o", o.output);
  if (Status s = outputs.Check(); !s.ok()) return ReportError("trace", s);
  models::HfReport hf;
  Result<models::ModelConfig> config = models::LoadModelConfig(o.model, &hf);
  if (!config.ok()) return ReportError("trace", config.status());
  Result<models::ModelConfig> applied = models::ApplyOverrides(*config, o.overrides, o.model);
  if (!applied.ok()) return ReportError("trace", applied.status());
  if (o.stage < 0 || o.stage >= applied->pp) {
    return ReportError(
        "trace", Status::InvalidArgument(fmt::format(
                     "--stage: expected 0 <= stage < pp ({}), got {}", applied->pp, o.stage)));
  }
  Result<traces::Trace> trace = models::BuildTrace(*applied, o.stage);
  if (!trace.ok()) return ReportError("trace", trace.status());
  if (Status s = WriteIfAsked(*trace, o.output); !s.ok()) return ReportError("trace", s);
  if (o.summary || o.output.empty()) {
    Result<int64_t> params = models::ParameterCount(*applied);
    if (!params.ok()) return ReportError("trace", params.status());
    PrintHfReport(hf, std::cout);
    std::cout << fmt::format("parameters: {} ({:.3f} B; vocabulary padded to a multiple of 128)\n",
                             *params, static_cast<double>(*params) / 1e9);
    if (models::IsMoe(*applied)) {
      Result<int64_t> active = models::ActiveParameterCount(*applied);
      if (!active.ok()) return ReportError("trace", active.status());
      std::cout << fmt::format(
          "active parameters per token: {} ({:.3f} B; {} of {} experts in {} of {} layers)\n",
          *active, static_cast<double>(*active) / 1e9, applied->experts_per_token, applied->experts,
          models::MoeLayerCount(*applied), applied->layers);
      // DeepSeek's corrected count and OpenAI's gpt-oss card leave the input
      // embedding (a lookup, no gemm) out of the active parameters, and
      // DeepSeek the MTP depths too.
      models::ModelConfig main = *applied;
      main.mtp_layers = 0;
      Result<int64_t> main_active = models::ActiveParameterCount(main);
      if (!main_active.ok()) return ReportError("trace", main_active.status());
      main.tp = 1;  // ParameterCount's vocabulary padding
      const int64_t table = models::PaddedVocab(main) * applied->hidden;
      std::cout << fmt::format(
          "active parameters without the input embedding{}: {} ({:.3f} B; DeepSeek's and "
          "OpenAI's convention)\n",
          applied->mtp_layers > 0 ? " or the MTP depths" : "", *main_active - table,
          static_cast<double>(*main_active - table) / 1e9);
    }
    if (applied->mtp_layers > 0) {
      models::ModelConfig main = *applied;
      main.mtp_layers = 0;
      Result<int64_t> main_params = models::ParameterCount(main);
      if (!main_params.ok()) return ReportError("trace", main_params.status());
      std::cout << fmt::format(
          "multi-token prediction: {} parameters ({:.3f} B) in {} depth(s); the main model {} "
          "({:.3f} B)\n",
          *params - *main_params, static_cast<double>(*params - *main_params) / 1e9,
          applied->mtp_layers, *main_params, static_cast<double>(*main_params) / 1e9);
    }
    PrintSummary(*trace, std::cout);
  }
  return 0;
}

}  // namespace

Verb AddTraceCommand(CLI::App& app) {
  auto o = std::make_shared<TraceOptions>();
  CLI::App* cmd = app.add_subcommand(
      "trace",
      "Build the operator trace of one training step from a model config, or read one (--from)");
  cmd->add_option("--model", o->model,
                  fmt::format("Model config: ours (configs/models/*.json) or a Hugging Face "
                              "config.json (or its folder; model_type {}). From a Hugging Face "
                              "file: seq_len min(max positions, 4096), micro-batch 1, dtype its "
                              "torch_dtype or bf16, tp 1, pp 1, standard attention; --summary "
                              "prints what was read and assumed",
                              models::HfSupportedModelTypes()));
  cmd->add_option("--from", o->from,
                  "a trace file to read instead of building one: ssdtrain's (.json, .cbor), a "
                  ".et Chakra trace ssdtrain export wrote, or a PyTorch execution trace "
                  "(torch.profiler.ExecutionTraceObserver's JSON; what it cannot say is "
                  "assumed and printed); -o writes it as ssdtrain's");
  cmd->add_option("-o,--output", o->output, "Output trace (.json, or .cbor for CBOR)");
  cmd->add_flag("--summary", o->summary,
                "Print a per-layer table (also printed when no -o is given)");
  cmd->add_option("--stage", o->stage, "Pipeline stage to trace (default 0)")->check(IntAtLeast(0));
  cmd->add_option_function<int64_t>(
         "--micro-batch", [o](int64_t v) { o->overrides.micro_batch = v; },
         "Micro-batch size (overrides the config)")
      ->check(IntAtLeast(1));
  cmd->add_option_function<int64_t>(
         "--seq-len", [o](int64_t v) { o->overrides.seq_len = v; },
         "Sequence length (overrides the config)")
      ->check(IntAtLeast(1));
  cmd->add_option_function<int64_t>(
         "--tp", [o](int64_t v) { o->overrides.tp = v; },
         "Tensor-parallel degree (overrides the config)")
      ->check(IntAtLeast(1));
  cmd->add_flag_function(
      "--sequence-parallel", [o](int64_t) { o->overrides.sequence_parallel = true; },
      "Use sequence parallelism with tensor parallelism");
  cmd->add_flag_function(
      "--tp-comm-overlap", [o](int64_t) { o->overrides.tp_comm_overlap = true; },
      "Overlap the sequence-parallel collectives with the GEMMs beside them, as Transformer "
      "Engine's userbuffers do (needs --sequence-parallel or a config with it)");
  cmd->add_flag_function(
      "--no-tp-backward-overlap", [o](int64_t) { o->overrides.tp_backward_overlap = false; },
      "Run each column-parallel layer's backward collectives after its GEMMs, in order, as "
      "Megatron-LM did before 2021-08-30 (default: beside them, as Megatron-LM since, "
      "Megatron-Core and Transformer Engine do)");
  cmd->add_option_function<int64_t>(
         "--pp", [o](int64_t v) { o->overrides.pp = v; },
         "Pipeline-parallel degree (overrides the config)")
      ->check(IntAtLeast(1));
  cmd->add_option_function<int64_t>(
         "--pp-first-layers", [o](int64_t v) { o->overrides.pp_first_layers = v; },
         "The blocks on the first pipeline stage, the stages between sharing the rest evenly "
         "(Megatron's --decoder-first-pipeline-num-layers; overrides the config)")
      ->check(IntAtLeast(1));
  cmd->add_option_function<int64_t>(
         "--pp-last-layers", [o](int64_t v) { o->overrides.pp_last_layers = v; },
         "The blocks on the last pipeline stage (Megatron's --decoder-last-pipeline-num-layers; "
         "overrides the config)")
      ->check(IntAtLeast(1));
  cmd->add_option_function<int64_t>(
         "--cp", [o](int64_t v) { o->overrides.cp = v; },
         "Context-parallel degree: this rank holds seq_len / cp tokens, attention runs as a ring "
         "of K/V exchanges over the cp ranks (needs --attention flash; overrides the config)")
      ->check(IntAtLeast(1));
  cmd->add_option_function<int64_t>(
         "--dp", [o](int64_t v) { o->overrides.dp = v; },
         "Data-parallel degree the optimizer state is sharded over with --zero-stage 1 "
         "(overrides the config)")
      ->check(IntAtLeast(1));
  cmd->add_option_function<int64_t>(
      "--ep", [o](int64_t v) { o->overrides.ep = v; },
      "Expert-parallel degree of a MoE model: this rank holds experts / ep experts per layer, "
      "with an all-to-all before and after them; must divide the experts and --dp "
      "(overrides the config)");
  cmd->add_option_function<int64_t>(
         "--zero-stage", [o](int64_t v) { o->overrides.zero_stage = v; },
         "The ZeRO stage: 1 the optimizer state sharded over --dp (Megatron's distributed "
         "optimizer), 2 the gradients too, 3 the weights too, gathered layer by layer (FSDP); "
         "overrides the config")
      ->check(IntBetween(0, 3));
  cmd->add_option_function<int64_t>(
         "--dp-shard", [o](int64_t v) { o->overrides.dp_shard = v; },
         "HSDP: shard over groups of this many --dp ranks, replicated across the others "
         "(overrides the config)")
      ->check(IntAtLeast(1));
  cmd->add_flag_callback(
      "--defer-grad-sync", [o] { o->overrides.zero_defer_grad_sync = true; },
      "ZeRO 2 and 3: reduce-scatter the gradients once a step, as the optimizer's first ops, "
      "the full gradients accumulated until then (overrides the config)");
  cmd->add_option_function<std::string>(
         "--attention", [o](const std::string& v) { o->overrides.attention = v; },
         "standard or flash")
      ->check(CLI::IsMember({"standard", "flash"}));
  cmd->add_option_function<std::string>(
      "--attention-kernel", [o](const std::string& v) { o->overrides.attention_kernel = v; },
      "the fused kernel flash attention runs as, by the name the hardware's "
      "gpu.attention_kernels give its curves (the DGX H100 preset: flash2, cudnn, flash3; the "
      "DGX A100's: flash2); "
      "prices the attention by sequence length and causal mask, changes no op (overrides the "
      "config)");
  cmd->add_option_function<std::string>(
         "--projections", [o](const std::string& v) { o->overrides.projections = v; },
         "fused (Megatron-Core's linear_qkv and linear_fc1) or separate (torchtitan's wq, wk, "
         "wv, w1 and w3; llama family, tp 1); overrides the config")
      ->check(CLI::IsMember({"fused", "separate"}));
  cmd->add_option_function<std::string>(
         "--rotary", [o](const std::string& v) { o->overrides.rotary = v; },
         "fused or complex (torchtitan's eager apply_rotary_emb; llama family); overrides the "
         "config")
      ->check(CLI::IsMember({"fused", "complex"}));
  cmd->add_option_function<std::string>(
         "--gqa", [o](const std::string& v) { o->overrides.gqa = v; },
         "native or repeat (torchtitan's repeat_kv copies; llama family); overrides the config")
      ->check(CLI::IsMember({"native", "repeat"}));
  cmd->add_option_function<std::string>(
         "--norm", [o](const std::string& v) { o->overrides.norm = v; },
         "fused or eager (torchtitan's RMSNorm module; llama family); overrides the config")
      ->check(CLI::IsMember({"fused", "eager"}));
  cmd->add_option_function<std::string>(
         "--grad-dtype", [o](const std::string& v) { o->overrides.grad_dtype = v; },
         "the weight gradients' dtype: fp16, bf16 or fp32 (overrides the config)")
      ->check(CLI::IsMember({"fp16", "bf16", "fp32"}));
  cmd->add_option_function<std::string>(
         "--dtype", [o](const std::string& v) { o->overrides.dtype = v; }, "fp16, bf16 or fp32")
      ->check(CLI::IsMember({"fp16", "bf16", "fp32"}));
  cmd->add_option_function<std::string>(
         "--fp8", [o](const std::string& v) { o->overrides.fp8 = v; },
         "FP8 training under Transformer Engine's recipe: delayed, current, blockwise or mxfp8, "
         "or off (overrides the config)")
      ->check(Fp8Recipe());
  return Verb{cmd, [o, cmd] { return Run(*o, *cmd); }};
}

}  // namespace ssdtrain::app

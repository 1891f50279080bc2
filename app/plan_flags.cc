// ssdtrain plan's flags: every option of the verb, with its help text and
// checks, into PlanCmdOptions (app/plan_input.h); RunPlan (app/plan_cmd.cc)
// runs it.
#include <fmt/format.h>

#include <iterator>
#include <memory>
#include <string>

#include "app/cli_errors.h"
#include "app/command.h"
#include "app/plan_input.h"
#include "models/hf_config.h"
#include "traces/op_scope.h"

namespace ssdtrain::app {

Verb AddPlanCommand(CLI::App& app) {
  auto o = std::make_shared<PlanCmdOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Search micro-batch, pipeline and tensor parallelism and an offload policy");
  cmd->add_option("--model", o->model,
                  fmt::format("model config (configs/models/*.json), or a Hugging Face "
                              "config.json or its folder (model_type {}; seq_len min(max "
                              "positions, 4096), micro-batch 1, dtype its torch_dtype or bf16; "
                              "`ssdtrain trace --summary` shows what is read and assumed); a "
                              "trace file given here is planned as --trace",
                              models::HfSupportedModelTypes()));
  cmd->add_option("--trace", o->trace,
                  "a trace (ssdtrain.capture, ssdtrain trace, a .et file ssdtrain export "
                  "wrote, or a PyTorch execution trace: traces/pytorch_et.h) instead of "
                  "--model: planned at "
                  "its own micro-batch, sequence length, tp and pp, on tp x pp GPUs unless "
                  "--gpus adds data parallelism; a flag that contradicts it is refused");
  cmd->add_option("--hardware", o->hardware, "hardware config (configs/hardware/*.json)")
      ->required();
  cmd->add_option("--gpus", o->gpus, "GPUs in total (default: 1; with --trace, its tp x pp)")
      ->check(IntAtLeast(1));
  cmd->add_option("--policy", o->policy,
                  "keep, recompute-full, recompute-selective, recompute-sac, offload-host, "
                  "offload-ssd, ssdtrain, ssdtrain-paper, megatron-offload, optimal or auto "
                  "(default: auto, the fastest that fits of every policy but ssdtrain-paper, and "
                  "recompute-sac only where the model config has separate projections)")
      ->check(CLI::IsMember({"keep", "recompute-full", "recompute-selective", "recompute-sac",
                             "offload-host", "offload-ssd", "ssdtrain", "ssdtrain-paper",
                             "megatron-offload", "optimal", "auto"}));
  cmd->add_option("--memory-budget", o->memory_budget_GiB,
                  "GPU memory budget in GiB (default: the GPU's usable memory, the hardware "
                  "config's gpu.memory_GiB less gpu.reserved_GiB; above it is refused)");
  cmd->add_option("--micro-batch", o->micro_batch, "fix the micro-batch size (default: search)")
      ->check(IntAtLeast(1));
  cmd->add_option("--seq-len", o->seq_len, "sequence length (overrides the model config)")
      ->check(IntAtLeast(1));
  cmd->add_option("--global-batch", o->global_batch,
                  "sequences per step (default: micro-batch x m x dp; with --compare, 8 per GPU, "
                  "or a multiple of a pinned micro-batch)")
      ->check(IntAtLeast(1));
  cmd->add_option("--tp", o->tp, "fix the tensor-parallel degree (default: search)")
      ->check(IntAtLeast(1));
  cmd->add_option("--cp", o->cp,
                  "fix the context-parallel degree: each rank holds seq-len / cp tokens and "
                  "attention runs as a ring of K/V exchanges over the cp ranks (flash attention, "
                  "dense models; default: search the powers of two leaving each rank at least "
                  "4096 tokens, up to 32)")
      ->check(IntAtLeast(1));
  cmd->add_option("--pp", o->pp, "fix the pipeline depth (default: search)")->check(IntAtLeast(1));
  cmd->add_option("--pp-first-layers", o->pp_first_layers,
                  "with --pp: the blocks on the first stage, the stages between sharing the rest "
                  "evenly (Megatron's --decoder-first-pipeline-num-layers; default: layers / pp, "
                  "or where pp does not divide the layers, fewer on the first and last stages)")
      ->check(IntAtLeast(1));
  cmd->add_option("--pp-last-layers", o->pp_last_layers,
                  "with --pp: the blocks on the last stage (Megatron's "
                  "--decoder-last-pipeline-num-layers)")
      ->check(IntAtLeast(1));
  cmd->add_option("--dp", o->dp, "fix the data-parallel degree (default: search)")
      ->check(IntAtLeast(1));
  cmd->add_option("--num-micro-batches", o->num_micro_batches,
                  "fix the micro-batches per step (default: --global-batch / (micro-batch x "
                  "dp), else 2 x pp)")
      ->check(IntAtLeast(1));
  cmd->add_option("--zero-stage", o->zero_stage,
                  "fix the ZeRO stage: 1 shards the optimizer state over dp (Megatron's "
                  "distributed optimizer), 2 the gradients too, 3 the weights too (FSDP), 0 "
                  "nothing (default: weigh each at every dp > 1; with --trace, how the trace was "
                  "built)")
      ->check(IntBetween(0, 3));
  cmd->add_option("--dp-shard", o->dp_shard,
                  "HSDP: shard inside groups of this many dp ranks and replicate across dp / "
                  "dp-shard (torchtitan's data_parallel_shard_degree; default: one group over "
                  "all of dp)")
      ->check(IntAtLeast(1));
  cmd->add_option("--attention", o->attention,
                  "standard (the scores materialised, s x s per head) or flash (FlashAttention: "
                  "nothing s x s saved, a sliding window's keys skipped); overrides the model "
                  "config (Hugging Face configs read as standard), and the plan records it")
      ->check(CLI::IsMember({"standard", "flash"}));
  cmd->add_option("--projections", o->projections,
                  "fused (Megatron-Core's linear_qkv and linear_fc1) or separate (torchtitan's and "
                  "Hugging Face's wq, wk, wv, w1 and w3 layers; llama family, tp 1 (the config's "
                  "tp taken as 1), where auto and --compare also try recompute-sac); overrides "
                  "the model config, and the plan records it")
      ->check(CLI::IsMember({"fused", "separate"}));
  cmd->add_option("--rotary", o->block_kernels.rotary,
                  "how the llama family's blocks run the rotary embedding: fused (one kernel, "
                  "Megatron-Core's and TE's) or complex (torchtitan's apply_rotary_emb in eager "
                  "PyTorch, through fp32 complex numbers); overrides the model config, and the "
                  "plan records it")
      ->check(CLI::IsMember({"fused", "complex"}));
  cmd->add_option("--gqa", o->block_kernels.gqa,
                  "grouped-query attention as the kernel runs it natively, or repeat (torchtitan's "
                  "repeat_kv: k and v copied to every query head); overrides the model config, "
                  "and the plan records it")
      ->check(CLI::IsMember({"native", "repeat"}));
  cmd->add_option("--norm", o->block_kernels.norm,
                  "the llama family's RMSNorms: fused (one kernel each way) or eager "
                  "(torchtitan's RMSNorm module, each step a kernel); overrides the model "
                  "config, and the plan records it")
      ->check(CLI::IsMember({"fused", "eager"}));
  cmd->add_option("--grad-dtype", o->grad_dtype,
                  "the weight gradients' dtype (default: fp32 with fp32 master weights, as "
                  "Megatron's main_grad and FSDP2's reduce_dtype; models/README.md, \"Gradient "
                  "dtype\"); overrides the model config, and the plan records it")
      ->check(CLI::IsMember({"fp16", "bf16", "fp32"}));
  cmd->add_option("--fp8", o->fp8,
                  "FP8 training as Transformer Engine's recipe does it: delayed, current, "
                  "blockwise or mxfp8 (Blackwell), or off; overrides the model config, and the "
                  "plan records it")
      ->check(Fp8Recipe());
  cmd->add_option("--attention-kernel", o->attention_kernel,
                  "the fused kernel flash attention runs as, by the name the hardware's "
                  "gpu.attention_kernels give its curves (the DGX H100 preset: flash2, cudnn, "
                  "flash3; the DGX A100's: flash2): the attention priced by sequence length and "
                  "causal mask; overrides "
                  "the model config, and the plan records it");
  cmd->add_flag("--sequence-parallel", o->sequence_parallel,
                "Megatron's sequence parallelism wherever tp > 1 (overrides a model config "
                "without it, such as a Hugging Face one); the plan records it");
  cmd->add_flag("--tp-comm-overlap", o->tp_comm_overlap,
                "Transformer Engine's userbuffers overlap of the sequence-parallel collectives "
                "with the GEMMs beside them (Megatron-Core's --tp-comm-overlap, NeMo's "
                "ub_tp_comm_overlap; needs --sequence-parallel or a config with it); overrides "
                "the model config, and the plan records it");
  cmd->add_flag("--no-tp-backward-overlap", o->no_tp_backward_overlap,
                "run each column-parallel layer's backward collectives after its GEMMs, in "
                "order, as Megatron-LM did before 2021-08-30 (the SC21 runs); default: beside "
                "them through NCCL, as Megatron-LM since (cf7efd4f), Megatron-Core and "
                "Transformer Engine do; overrides the model config, and the plan records it");
  cmd->add_flag("--defer-grad-sync", o->defer_grad_sync,
                "at ZeRO 2 and 3, reduce-scatter the gradients once a step, after the last "
                "micro-batch's backward, keeping the full gradients accumulated until then "
                "(FSDP2's set_requires_gradient_sync(False), Automodel's defer_fsdp_grad_sync): "
                "less traffic for more memory (default: every micro-batch's)");
  cmd->add_option("--ep", o->ep,
                  "fix the expert-parallel degree of a MoE model: each rank holds experts / ep "
                  "experts per layer; ep must divide the experts and dp (default: search the "
                  "powers of two that do; a dense model has ep 1)");
  cmd->add_option("--schedule", o->schedule,
                  "fix the pipeline schedule: 1f1b, gpipe or interleaved (Megatron's interleaved "
                  "1F1B; default: weigh 1f1b and interleaved)")
      ->check(CLI::IsMember({"1f1b", "gpipe", "interleaved"}));
  cmd->add_option("--virtual-stages", o->virtual_stages,
                  "with --schedule interleaved: fix the model chunks per stage, v (layers / (pp x "
                  "v) is Megatron's --num-layers-per-virtual-pipeline-stage; default: search)")
      ->check(IntAtLeast(1));
  cmd->add_option("--ddp", o->ddp,
                  "when the data-parallel gradients are all-reduced: overlapped (each bucket "
                  "during backward, as PyTorch DDP and Megatron's --DDP-impl torch; default) or "
                  "local (after the whole backward of the step, Megatron's --DDP-impl local)")
      ->check(CLI::IsMember({"overlapped", "local"}));
  cmd->add_option("-o,--output", o->output, "plan JSON to write")->required();
  cmd->add_option("--timeline", o->timeline, "Chrome/Perfetto trace of the predicted step");
  cmd->add_option("--prediction", o->prediction,
                  "step report of the prediction (ssdtrain-report, for ssdtrain compare)");
  cmd->add_flag("--rok", o->rok, "print the recompute-offload-keep curve");
  cmd->add_flag("--compare", o->compare,
                "every policy at its best layout and one global batch, side by side, with a "
                "verdict on SSD offload; -o gets the fastest plan that fits");
  cmd->add_option("--json", o->compare_json, "with --compare: the table and verdict as JSON");
  cmd->add_flag("--no-host-offload", o->no_host_offload,
                "no offload-host placements (keep pinned host memory out of the plan)");
  cmd->add_option("--recompute-modules", o->recompute_modules,
                  "what recompute-selective rebuilds, as Megatron-Core's --recompute-modules: "
                  "core_attn (the attention scores and softmax; the default) and mla_up_proj "
                  "(multi-head latent attention's up-projected query, key and value)")
      ->delimiter(',')
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(sim::kRecomputeModules),
                                                     std::end(sim::kRecomputeModules))));
  cmd->add_option("--recompute-every", o->recompute_every,
                  "recompute-full rebuilds every N-th block of each stage only (blocks N, 2N, "
                  "...), as torchtitan's selective per-layer checkpointing "
                  "(selective_ac_option = \"N\"); 1, the default: every block")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--offload-modules", o->offload_modules,
                  "what megatron-offload (--policy, or tried by auto) sends to pinned host "
                  "memory, as "
                  "Megatron-Core's --offload-modules: attn_norm, qkv_linear, core_attn, "
                  "attn_proj, mlp_norm, expert_fc1, moe_act (default: core_attn,attn_proj,"
                  "expert_fc1, its documentation's recommendation)")
      ->delimiter(',')
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(traces::kOffloadModules),
                                                     std::end(traces::kOffloadModules))));
  return Verb{cmd, [o] { return RunPlan(*o); }};
}

}  // namespace ssdtrain::app

// The planner's pins (`ssdtrain plan --tp --pp ...`, sim::PlannerOptions)
// checked against one another and the model before any search: a pin no
// layout can satisfy is an error naming the flag and why.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "sim/detail/planner_layouts.h"
#include "sim/pipeline.h"
#include "traces/dp_buckets.h"
#include "traces/layout.h"

namespace ssdtrain::sim::detail {

namespace {

std::string Flag(const char* name, int64_t v) {
  return std::string(name) + " " + std::to_string(v);
}

// --virtual-stages and an interleaved --schedule against the other pins.
Status CheckInterleavedPins(const PlannerOptions& o) {
  const bool interleaved = o.schedule && *o.schedule == "interleaved";
  if (o.virtual_stages && !interleaved) {
    return Status::InvalidArgument(Flag("--virtual-stages", *o.virtual_stages) +
                                   ": needs --schedule interleaved" +
                                   (o.schedule ? ", got --schedule " + *o.schedule : ""));
  }
  if (!interleaved) return Status::Ok();
  std::string what = "--schedule interleaved";
  if (o.virtual_stages) what.append(1, ' ').append(Flag("--virtual-stages", *o.virtual_stages));
  if (o.virtual_stages && *o.virtual_stages < 2) {
    return Status::InvalidArgument(what + ": needs at least 2 model chunks per stage (" +
                                   "--virtual-stages 1 is --schedule 1f1b)");
  }
  if (o.pp && *o.pp < 2) {
    return Status::InvalidArgument(what + ": needs --pp 2 or more, got " + Flag("--pp", *o.pp));
  }
  if (o.pp && o.virtual_stages && o.layers % (*o.pp * *o.virtual_stages) != 0) {
    return Status::InvalidArgument(
        what + ": the model's " + std::to_string(o.layers) + " layers do not divide by " +
        Flag("--pp", *o.pp) + " x " + Flag("--virtual-stages", *o.virtual_stages) + " = " +
        std::to_string(*o.pp * *o.virtual_stages) +
        " (Megatron's --num-layers-per-virtual-pipeline-stage is layers / (pp x v))");
  }
  if (o.pp && o.num_micro_batches && *o.num_micro_batches % *o.pp != 0) {
    return Status::InvalidArgument(what + ": " + Flag("--num-micro-batches", *o.num_micro_batches) +
                                   " is not a multiple of " + Flag("--pp", *o.pp) +
                                   ", as Megatron-LM's interleaved schedule requires");
  }
  return Status::Ok();
}

// --ep against the model and the other pins.
Status CheckExpertPins(const PlannerOptions& o) {
  if (!o.ep || *o.ep == 1) return Status::Ok();
  const std::string ep = Flag("--ep", *o.ep);
  if (o.experts == 0) {
    return Status::InvalidArgument(ep + ": the model is dense (no routed experts to spread)");
  }
  if (o.experts % *o.ep != 0) {
    return Status::InvalidArgument(ep + ": does not divide the model's " +
                                   std::to_string(o.experts) + " experts");
  }
  const int64_t cp = o.cp.value_or(1);
  if (o.dp && (cp * *o.dp) % *o.ep != 0) {
    const std::string ranks =
        cp > 1 ? Flag("--cp", cp) + " x " + Flag("--dp", *o.dp) : Flag("--dp", *o.dp);
    return Status::InvalidArgument(ep + " x tp: does not divide " + ranks +
                                   " x tp (Megatron-Core's expert ranks; the experts are split "
                                   "over tp, so ep must divide " +
                                   (cp > 1 ? "cp x dp)" : "dp)"));
  }
  if (o.gpus % *o.ep != 0) {
    return Status::InvalidArgument(ep + ": does not divide " + Flag("--gpus", o.gpus));
  }
  if (o.dp_shard && (cp * *o.dp_shard) % *o.ep != 0 && (!o.dp || *o.dp_shard != *o.dp)) {
    return Status::InvalidArgument(
        ep + ": does not divide " + (cp > 1 ? Flag("--cp", cp) + " x " : std::string()) +
        Flag("--dp-shard", *o.dp_shard) +
        " (with HSDP the expert-parallel group is taken from one shard group's ranks)");
  }
  return Status::Ok();
}

// Pinned degrees the traces do not model together (traces::Unmodelled).
Status CheckUnmodelledPins(const PlannerOptions& o) {
  if (!o.zero_stage) return Status::Ok();
  traces::Layout l;
  l.ep = o.ep.value_or(1);
  l.zero_stage = *o.zero_stage;
  // HSDP where both are pinned (else the search passes over the layouts).
  l.dp = o.dp.value_or(o.dp_shard.value_or(1));
  l.dp_shard = o.dp_shard.value_or(0);
  const auto u = traces::Unmodelled(l, !o.fp8.empty());
  if (!u) return Status::Ok();
  const std::string other = u->field == "ep"         ? Flag("--ep", l.ep)
                            : u->field == "dp_shard" ? Flag("--dp-shard", l.dp_shard)
                                                     : "--fp8 " + o.fp8;
  return Status::InvalidArgument(other + " with " + Flag("--zero-stage", l.zero_stage) + ": " +
                                 u->why);
}

}  // namespace

// " (pinned: --tp 2 --pp 4)" for the pins that are set, else "".
std::string PinsText(const PlannerOptions& o) {
  std::string pins;
  auto add = [&](const char* name, const std::optional<int64_t>& v) {
    if (!v) return;
    pins.append(1, ' ');
    pins.append(Flag(name, *v));
  };
  add("--tp", o.tp);
  add("--cp", o.cp);
  add("--pp", o.pp);
  add("--pp-first-layers", o.pp_first_layers);
  add("--pp-last-layers", o.pp_last_layers);
  add("--dp", o.dp);
  add("--micro-batch", o.micro_batch);
  add("--num-micro-batches", o.num_micro_batches);
  add("--zero-stage", o.zero_stage);
  add("--dp-shard", o.dp_shard);
  add("--ep", o.ep);
  if (o.global_batch > 0) add("--global-batch", o.global_batch);
  if (o.schedule) pins.append(" --schedule ").append(*o.schedule);
  add("--virtual-stages", o.virtual_stages);
  if (pins.empty()) return pins;
  return std::string(" (pinned:").append(pins).append(")");
}

namespace {

// --cp: a model that runs context-parallel, a sequence it splits evenly.
Status CheckContextPins(const PlannerOptions& o) {
  if (o.cp && *o.cp > 1) {
    if (!o.cp_refusal.empty()) {
      return Status::InvalidArgument(Flag("--cp", *o.cp) + ": " + o.cp_refusal);
    }
    traces::Layout split;
    split.tp = o.tp.value_or(1);
    split.cp = *o.cp;
    const std::string why = traces::SequenceSplitError(split, o.seq_len, o.sequence_parallel);
    if (!why.empty()) return Status::InvalidArgument(Flag("--cp", *o.cp) + ": " + why);
  }
  return Status::Ok();
}

// --zero-stage and --dp-shard.
Status CheckZeroPins(const PlannerOptions& o) {
  if (o.zero_stage && (*o.zero_stage < 0 || *o.zero_stage > 3)) {
    return Status::InvalidArgument(Flag("--zero-stage", *o.zero_stage) +
                                   ": expected 0, 1, 2 or 3 (1: the optimizer state sharded over "
                                   "dp; 2: the gradients too; 3: the weights too)");
  }
  if (o.dp_shard && o.zero_stage && *o.zero_stage == 0) {
    return Status::InvalidArgument(Flag("--dp-shard", *o.dp_shard) +
                                   ": needs --zero-stage 1, 2 or 3 (at 0 nothing is sharded)");
  }
  if (o.dp_shard && o.dp && *o.dp % *o.dp_shard != 0) {
    return Status::InvalidArgument(Flag("--dp-shard", *o.dp_shard) + ": does not divide " +
                                   Flag("--dp", *o.dp));
  }
  return Status::Ok();
}

// --tp: a degree the model splits by, dividing its heads.
Status CheckTensorPins(const PlannerOptions& o) {
  if (o.tp && o.tp_refusal) {
    if (const std::string why = o.tp_refusal(*o.tp); !why.empty()) {
      return Status::InvalidArgument(Flag("--tp", *o.tp) + ": " + why);
    }
  }
  if (o.tp && o.heads > 0 && o.heads % *o.tp != 0) {
    return Status::InvalidArgument(Flag("--tp", *o.tp) + ": does not divide the model's " +
                                   std::to_string(o.heads) + " attention heads");
  }
  return Status::Ok();
}

// --pp with its uneven ends (--pp-first-layers, --pp-last-layers): a split
// the model's layers allow, and that the model runs at.
Status CheckPipelinePins(const PlannerOptions& o) {
  if ((o.pp_first_layers || o.pp_last_layers) && !o.pp) {
    return Status::InvalidArgument(
        Flag(o.pp_first_layers ? "--pp-first-layers" : "--pp-last-layers",
             o.pp_first_layers ? *o.pp_first_layers : *o.pp_last_layers) +
        ": needs --pp (the split of the layers over a pinned pipeline)");
  }
  if ((o.pp_first_layers || o.pp_last_layers) && o.schedule && *o.schedule == "interleaved") {
    return Status::InvalidArgument(
        "--schedule interleaved: not modelled with an uneven pipeline split (--pp-first-layers, "
        "--pp-last-layers); use --schedule 1f1b or gpipe");
  }
  if (o.pp && (o.pp_first_layers || o.pp_last_layers)) {
    traces::Layout split;
    split.pp = *o.pp;
    split.pp_first_layers = o.pp_first_layers.value_or(0);
    split.pp_last_layers = o.pp_last_layers.value_or(0);
    if (o.virtual_stages) split.vp = *o.virtual_stages;
    if (const auto why = traces::PipelineSplitError(split, o.layers)) {
      const std::string field = why->field == "virtual_stages"    ? "--virtual-stages"
                                : why->field == "pp"              ? "--pp"
                                : why->field == "pp_first_layers" ? "--pp-first-layers"
                                                                  : "--pp-last-layers";
      return Status::InvalidArgument(field + ": " + why->why);
    }
  }
  if (o.pp && o.pp_refusal) {
    if (const auto split = SplitFor(o, *o.pp)) {
      traces::Layout l;
      l.pp = *o.pp;
      l.pp_first_layers = split->first;
      l.pp_last_layers = split->second;
      if (o.virtual_stages) l.vp = *o.virtual_stages;
      if (const std::string why = o.pp_refusal(l); !why.empty()) {
        return Status::InvalidArgument(Flag("--pp", *o.pp) + ": " + why);
      }
    }
  }
  if (o.pp && !(o.pp_first_layers || o.pp_last_layers) && !SplitFor(o, *o.pp)) {
    return Status::InvalidArgument(
        Flag("--pp", *o.pp) + ": does not divide the model's " + std::to_string(o.layers) +
        " layers, and no split with fewer blocks on the first and last stages gives each stage "
        "one (pin one with --pp-first-layers and --pp-last-layers)");
  }
  return Status::Ok();
}

// The pinned degrees multiply to a divisor of the GPU count (all three: to it).
Status CheckPinnedProduct(const PlannerOptions& o) {
  const std::string gpus = Flag("--gpus", o.gpus);
  int64_t product = 1;
  std::string named;
  for (auto [name, v] : {std::pair{"--tp", o.tp}, {"--cp", o.cp}, {"--pp", o.pp}, {"--dp", o.dp}}) {
    if (!v) continue;
    product *= *v;
    if (!named.empty()) named += " x ";
    named += Flag(name, *v);
  }
  // An unpinned cp may make up the rest where the model can run context-parallel.
  const bool cp_free = !o.cp && o.cp_refusal.empty() && o.seq_len > 0;
  if (o.tp && o.pp && o.dp && product != o.gpus && !cp_free) {
    return Status::InvalidArgument(named + " = " + std::to_string(product) + " GPUs, but " + gpus +
                                   ": tp x cp x pp x dp must equal the GPUs");
  }
  if (!named.empty() && o.gpus % product != 0) {
    std::string what = named;
    if (named.find(" x ") != std::string::npos) what += " = " + std::to_string(product);
    return Status::InvalidArgument(what + ": does not divide " + gpus);
  }
  return Status::Ok();
}

// --global-batch against pinned --micro-batch, --num-micro-batches and --dp.
Status CheckBatchPins(const PlannerOptions& o) {
  if (o.global_batch > 0 && o.micro_batch && o.num_micro_batches) {
    const int64_t per_replica = *o.micro_batch * *o.num_micro_batches;
    if (o.global_batch % per_replica != 0 || (o.dp && o.global_batch != per_replica * *o.dp)) {
      return Status::InvalidArgument(
          Flag("--global-batch", o.global_batch) +
          ": must be --micro-batch x --num-micro-batches "
          "x dp = " +
          std::to_string(per_replica) + " x dp" +
          (o.dp ? " = " + std::to_string(per_replica * *o.dp) : std::string()));
    }
  }
  return Status::Ok();
}

}  // namespace

// Pins that no layout can satisfy, named by flag with the reason.
Status CheckPins(const PlannerOptions& o) {
  auto positive = [](const char* name, const std::optional<int64_t>& v) -> Status {
    if (v && *v < 1) return Status::InvalidArgument(Flag(name, *v) + ": must be >= 1");
    return Status::Ok();
  };
  SSDTRAIN_RETURN_IF_ERROR(positive("--tp", o.tp));
  SSDTRAIN_RETURN_IF_ERROR(positive("--pp", o.pp));
  SSDTRAIN_RETURN_IF_ERROR(positive("--dp", o.dp));
  SSDTRAIN_RETURN_IF_ERROR(positive("--micro-batch", o.micro_batch));
  SSDTRAIN_RETURN_IF_ERROR(positive("--num-micro-batches", o.num_micro_batches));
  SSDTRAIN_RETURN_IF_ERROR(positive("--ep", o.ep));
  SSDTRAIN_RETURN_IF_ERROR(CheckExpertPins(o));
  SSDTRAIN_RETURN_IF_ERROR(CheckUnmodelledPins(o));
  SSDTRAIN_RETURN_IF_ERROR(positive("--dp-shard", o.dp_shard));
  SSDTRAIN_RETURN_IF_ERROR(positive("--cp", o.cp));
  SSDTRAIN_RETURN_IF_ERROR(CheckContextPins(o));
  SSDTRAIN_RETURN_IF_ERROR(CheckZeroPins(o));
  if (Result<traces::DdpImpl> d = traces::ParseDdpImpl(o.ddp, "--ddp"); !d.ok()) return d.status();
  if (o.schedule) {
    Result<PipelineSchedule> s = ParseSchedule(*o.schedule);
    if (!s.ok()) return s.status().WithPrefix("--schedule");
  }
  SSDTRAIN_RETURN_IF_ERROR(CheckInterleavedPins(o));
  SSDTRAIN_RETURN_IF_ERROR(CheckTensorPins(o));
  SSDTRAIN_RETURN_IF_ERROR(CheckPipelinePins(o));
  SSDTRAIN_RETURN_IF_ERROR(CheckPinnedProduct(o));
  return CheckBatchPins(o);
}

}  // namespace ssdtrain::sim::detail

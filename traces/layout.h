// The parallel layout of a training run, decided here once: its degrees, its
// validation, the rank order that maps a rank to its coordinates, and the
// process groups that follow from it. The trace builder, the simulator, the
// planner, the plan file and the replay all read it; none re-derives a group.
//
// Degrees: tp (tensor), cp (context: the sequence cut over cp ranks), pp
// (pipeline stages, each with vp model chunks under interleaved 1F1B), dp
// (data-parallel replicas) and ep (expert parallelism: the routed experts of
// each MoE layer spread over ep ranks). The world is tp · cp · dp · pp ranks;
// ep does not multiply it: it regroups the cp · dp ranks of one stage and tp
// index (Megatron-Core's expert grid, below).
//
// Rank order: Megatron-Core's default ("tp-cp-ep-dp-pp",
// megatron/core/parallel_state.py, RankGenerator): tp fastest, then cp, then
// dp, then pp:
//     rank = tp_index + tp · (cp_index + cp · (dp_index + dp · stage)).
// A group of some dimensions is the ranks that differ only in them, listed as
// Megatron lists it (generate_masked_orthogonal_rank_groups): the group's own
// coordinates counted fastest-first, which is ascending rank order. So the tp
// group is consecutive ranks, the cp group strided by tp, the dp group by
// tp · cp, the pipeline group by tp · cp · dp.
//
// Experts (ep > 1): Megatron-Core's expert grid has its own order over the
// same ranks, tp-ep-dp-pp with the expert tensor-parallel degree equal to tp
// (ssdtrain splits each expert over tp as the dense MLP). The cp · dp ranks
// of one stage and tp index are the expert grid's ep · (cp·dp/ep): the expert
// index is the combined index (cp_index + cp · dp_index) mod ep, and an ep
// group is ep consecutive combined indices. The experts' data-parallel group
// is the ranks of equal expert index: cp · dp / ep of them.
//
// ZeRO stage (0 to 3) and HSDP. Stage 0: every rank holds the whole weights,
// gradients and optimizer state (DDP); 1: the optimizer state is sharded
// (Megatron's distributed optimizer); 2: the gradients too (FSDP's
// SHARD_GRAD_OP, Megatron-FSDP's optim_grads); 3: the weights too (FULL_SHARD,
// optim_grads_params), gathered per layer before its forward and its backward.
// The dense state is sharded over the shard group: dp_shard data-parallel
// ranks times the cp ranks (both frameworks shard over dp × cp: Megatron's
// intra_dp_cp_group, torchtitan's flattened dp_shard × cp mesh). dp_shard
// (HSDP, torchtitan's data_parallel_shard_degree) divides dp; the
// dp / dp_shard shard groups are replicas of one another (replicate_degree),
// their gradients all-reduced over the replica group at the step's end. 0
// means dp: one shard group over all of dp (no replication). The data-parallel
// index splits as torchtitan's mesh [dp_replicate, dp_shard] does:
//     dp_index = replica_index · dp_shard + shard_index.
// The experts' state is sharded over the ranks of the experts'
// data-parallel group in this rank's shard group (all of it without HSDP:
// cp · dp_shard / ep ranks, torchtitan's dp_shard_mod_ep), which needs ep to
// divide cp · dp_shard; with HSDP the replicas of a shard position hold the
// same experts, so the replica group sums the experts' gradients too.
//
// Pipeline split (Megatron-Core's --decoder-first-pipeline-num-layers and
// --decoder-last-pipeline-num-layers): stage 0 holds pp_first_layers blocks
// where set, the last stage pp_last_layers where set, and the stages between
// split the rest evenly; neither set, every stage holds layers / pp. A model
// whose layers no pp divides (DeepSeek-V3's 61) pipelines so, and the first
// and last stages, which also hold the embedding and the output layer, loss
// and MTP, may take fewer blocks. The stages between are alike, so one of
// them stands for all (sim/stage_plans.h). Not with interleaving (vp > 1).
//
// Thread-safety: value type; const methods are pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "traces/status.h"

namespace ssdtrain::traces {

// One rank's place in the layout.
struct RankCoords {
  int64_t tp = 0, cp = 0, dp = 0, stage = 0;
  bool operator==(const RankCoords&) const = default;
};

// The dimensions a group spans (a bit set: kTpDim | kCpDim, ...).
enum LayoutDim : unsigned {
  kTpDim = 1u << 0,
  kCpDim = 1u << 1,
  kDpDim = 1u << 2,
  kPpDim = 1u << 3,
};

struct Layout {
  int64_t tp = 1;
  int64_t cp = 1;
  int64_t pp = 1;
  int64_t vp = 1;  // model chunks per stage (interleaved 1F1B); 1 otherwise
  int64_t dp = 1;
  int64_t ep = 1;
  int64_t zero_stage = 0;  // 0, 1, 2 or 3
  int64_t dp_shard = 0;    // HSDP: data-parallel ranks of one shard group; 0: dp
  // The pipeline split (see above): blocks on stage 0 and on the last stage;
  // 0: as the stages between.
  int64_t pp_first_layers = 0;
  int64_t pp_last_layers = 0;
  bool operator==(const Layout&) const = default;

  int64_t world() const { return tp * cp * dp * pp; }
  int64_t DpShard() const { return dp_shard > 0 ? dp_shard : dp; }
  // HSDP's replicate degree: dp / dp_shard (1 without HSDP).
  int64_t Replicas() const { return dp / DpShard(); }

  RankCoords CoordsOf(int64_t rank) const;
  int64_t RankOf(const RankCoords& c) const;
  int64_t StageOf(int64_t rank) const { return CoordsOf(rank).stage; }

  // The ranks that differ from `rank` only in the dimensions of `dims`,
  // ascending (Megatron's order within a group); `rank` is among them.
  std::vector<int64_t> GroupOf(int64_t rank, unsigned dims) const;
  std::vector<int64_t> TpGroup(int64_t rank) const { return GroupOf(rank, kTpDim); }
  std::vector<int64_t> CpGroup(int64_t rank) const { return GroupOf(rank, kCpDim); }
  std::vector<int64_t> DpGroup(int64_t rank) const { return GroupOf(rank, kDpDim); }
  // The dense gradients' reduction group: dp × cp.
  std::vector<int64_t> DpCpGroup(int64_t rank) const { return GroupOf(rank, kCpDim | kDpDim); }
  std::vector<int64_t> PpGroup(int64_t rank) const { return GroupOf(rank, kPpDim); }

  // The pipeline neighbours: the same coordinates one stage on (off), the
  // last stage's next being stage 0 and stage 0's previous the last (the
  // interleaved schedule's wrap).
  int64_t NextStageRank(int64_t rank) const;
  int64_t PrevStageRank(int64_t rank) const;

  // Expert parallelism (see above).
  int64_t ExpertIndexOf(int64_t rank) const;
  std::vector<int64_t> EpGroup(int64_t rank) const;
  std::vector<int64_t> ExpertDpGroup(int64_t rank) const;
  int64_t ExpertDp() const { return cp * dp / ep; }
  // The ranks the experts' state is sharded over: the experts' data-parallel
  // ranks of this rank's shard group (see above; this rank alone at stage 0).
  std::vector<int64_t> ExpertShardGroup(int64_t rank) const;
  // The routed experts' gradient buckets' group: the experts' data-parallel
  // group at ZeRO 0 and 1; at 2 and 3, whose traces reduce-scatter those
  // gradients over the expert shard group themselves, the replica group (this
  // rank alone without HSDP), as for the dense ones.
  std::vector<int64_t> ExpertGradientGroup(int64_t rank) const {
    return zero_stage >= 2 ? ReplicaGroup(rank) : ExpertDpGroup(rank);
  }

  // ZeRO and HSDP (see above): the ranks this rank's dense state is sharded
  // over (itself alone at stage 0) and the ranks holding the same shard.
  std::vector<int64_t> ShardGroup(int64_t rank) const;
  std::vector<int64_t> ReplicaGroup(int64_t rank) const;
  // The group the dense gradient buckets (traces/dp_buckets.h) are all-reduced
  // over at the step's end: dp × cp at stages 0 and 1; at 2 and 3, whose
  // traces reduce-scatter the gradients over the shard group themselves, the
  // replica group (this rank alone without HSDP).
  std::vector<int64_t> DenseGradientGroup(int64_t rank) const {
    return zero_stage >= 2 ? ReplicaGroup(rank) : DpCpGroup(rank);
  }
  // How many ways each part of the dense state is split: the shard group's
  // size (dp_shard · cp) where the stage shards it, else 1.
  int64_t OptimizerShards() const { return zero_stage >= 1 ? DpShard() * cp : 1; }
  int64_t GradientShards() const { return zero_stage >= 2 ? DpShard() * cp : 1; }
  int64_t WeightShards() const { return zero_stage >= 3 ? DpShard() * cp : 1; }
  // The experts' state: over the expert shard group, at the same stages
  // (cp · dp_shard / ep ranks; 1 at ep = cp · dp_shard).
  int64_t ExpertShards() const { return cp * DpShard() / ep; }
  int64_t ExpertOptimizerShards() const { return zero_stage >= 1 ? ExpertShards() : 1; }
  int64_t ExpertGradientShards() const { return zero_stage >= 2 ? ExpertShards() : 1; }
  int64_t ExpertWeightShards() const { return zero_stage >= 3 ? ExpertShards() : 1; }

  bool UnevenPipeline() const { return pp_first_layers != 0 || pp_last_layers != 0; }

  // "tp 2 cp 2 pp 2 dp 2 zero 3" style, every degree that is not 1 (and
  // "dp_shard N", "vp N", "ep N" where set, "pp 16 (3|4|2)" with an uneven
  // split: the first stage's, each middle one's and the last's blocks);
  // "tp 1" when all are 1.
  std::string Describe() const;
};

// Positive degrees; zero_stage 0..3; dp_shard 0 or a divisor of dp, and set
// only with a ZeRO stage >= 1 (HSDP shards something); ep divides cp · dp,
// and with HSDP cp · dp_shard.
// Messages name `source` and the field as the user wrote it:
// "<source>: dp_shard: 3 does not divide dp 4". `field_prefix` is put before
// each field name ("--" for command-line flags, "" for file fields).
Status ValidateLayout(const Layout& layout, const std::string& source,
                      const std::string& field_prefix = "");
// A layout the trace builder does not model yet, and why, decided here for
// the model config's validation and the planner's pins and search alike:
// - ZeRO-3 under FP8 (field "fp8"): the FP8 all-gather of the sharded
//   weights (Megatron's --fp8-param-gather) is not built.
// - HSDP at ZeRO-1 (field "dp_shard", dp_shard < dp): the optimizer state
//   would shard over the shard group, but the step's gradient reduction and
//   parameter gather are priced and replayed over all of dp × cp (Megatron's
//   partial distributed optimizer is not built).
// (Every ZeRO stage and HSDP compose with ep: the experts' optimizer state
// (ZeRO 1), gradients (2) and weights (3) shard over the expert shard group,
// the rest over the shard group, as Megatron-Core's distributed optimizer and
// torchtitan's FSDP with expert parallelism, its dp_shard_mod_ep mesh, do.)
// `why` names no field or flag: each caller says which of its own it was.
struct UnmodelledLayout {
  std::string field;  // the config field it is refused under: "fp8"
  std::string why;
};
std::optional<UnmodelledLayout> Unmodelled(const Layout& layout, bool fp8);
// The layout on exactly `gpus` ranks: "tp 2 · cp 2 · dp 2 · pp 1 = 8 ranks, not 16".
Status CheckWorld(const Layout& layout, int64_t gpus, const std::string& source);
// Context parallelism's split of a sequence of `seq_len` tokens: 2·cp chunks
// (the load-balanced split), times tp with sequence parallelism. Empty when it
// divides, else why not.
std::string SequenceSplitError(const Layout& layout, int64_t seq_len, bool sequence_parallel);

// The blocks [first, first + count) of a model's `layers` that pipeline stage
// `stage` holds under `layout`'s split (above); the split must pass
// PipelineSplitError.
struct StageBlocks {
  int64_t first = 0;
  int64_t count = 0;
  bool operator==(const StageBlocks&) const = default;
};
StageBlocks BlocksOfStage(const Layout& layout, int64_t layers, int64_t stage);
// Why `layers` blocks do not split over layout.pp stages as `layout` says
// (nullopt when they do): every stage at least one block, the stages between
// the first and the last alike, the split set only with pp >= 2 and not with
// vp > 1. `field` is the layout field it is refused under ("pp",
// "pp_first_layers", "pp_last_layers" or "virtual_stages"); `why` names no
// flag or file, each caller says which of its own it was.
struct LayoutRefusal {
  std::string field;
  std::string why;
};
std::optional<LayoutRefusal> PipelineSplitError(const Layout& layout, int64_t layers);
// The split a pipeline of `pp` stages gets over `layers` blocks that pp does
// not divide: ceil(layers / pp) blocks on each stage between the first and
// the last, the rest on those two, the first taking the larger half (the last
// also runs the output layer, the loss and MTP). {first, last}; nullopt when
// pp divides layers (the even split) or when that leaves the first or the
// last stage no block or more than a middle one. The planner's choice for
// such a pp, and `plan --pp`'s when no split is pinned.
std::optional<std::pair<int64_t, int64_t>> DefaultUnevenSplit(int64_t layers, int64_t pp);

// Where a group's ranks sit when consecutive ranks fill scale-up domains of
// `domain_ranks` (a node's GPUs, an NVL72 rack): how many domains it spans and
// the most of its ranks in one domain.
struct GroupPlacement {
  int64_t ranks = 0;
  int64_t domains = 0;
  int64_t max_per_domain = 0;
  bool within_one_domain() const { return domains <= 1; }
};
GroupPlacement PlaceGroup(const std::vector<int64_t>& group, int64_t domain_ranks);

}  // namespace ssdtrain::traces

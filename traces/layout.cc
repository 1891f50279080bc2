#include "traces/layout.h"

#include <algorithm>
#include <cassert>

namespace ssdtrain::traces {

namespace {

std::string Str(int64_t v) { return std::to_string(v); }

}  // namespace

RankCoords Layout::CoordsOf(int64_t rank) const {
  assert(rank >= 0 && rank < world());
  RankCoords c;
  c.tp = rank % tp;
  rank /= tp;
  c.cp = rank % cp;
  rank /= cp;
  c.dp = rank % dp;
  c.stage = rank / dp;
  return c;
}

int64_t Layout::RankOf(const RankCoords& c) const {
  return c.tp + tp * (c.cp + cp * (c.dp + dp * c.stage));
}

std::vector<int64_t> Layout::GroupOf(int64_t rank, unsigned dims) const {
  const RankCoords at = CoordsOf(rank);
  // The group's own coordinates, fastest first (Megatron's rank_in_group).
  const int64_t nt = (dims & kTpDim) ? tp : 1, nc = (dims & kCpDim) ? cp : 1,
                nd = (dims & kDpDim) ? dp : 1, ns = (dims & kPpDim) ? pp : 1;
  std::vector<int64_t> group;
  group.reserve(static_cast<size_t>(nt * nc * nd * ns));
  for (int64_t s = 0; s < ns; ++s)
    for (int64_t d = 0; d < nd; ++d)
      for (int64_t c = 0; c < nc; ++c)
        for (int64_t t = 0; t < nt; ++t) {
          RankCoords x = at;
          if (dims & kTpDim) x.tp = t;
          if (dims & kCpDim) x.cp = c;
          if (dims & kDpDim) x.dp = d;
          if (dims & kPpDim) x.stage = s;
          group.push_back(RankOf(x));
        }
  return group;
}

int64_t Layout::NextStageRank(int64_t rank) const {
  RankCoords c = CoordsOf(rank);
  c.stage = (c.stage + 1) % pp;
  return RankOf(c);
}

int64_t Layout::PrevStageRank(int64_t rank) const {
  RankCoords c = CoordsOf(rank);
  c.stage = (c.stage + pp - 1) % pp;
  return RankOf(c);
}

int64_t Layout::ExpertIndexOf(int64_t rank) const {
  const RankCoords c = CoordsOf(rank);
  return (c.cp + cp * c.dp) % ep;
}

namespace {

// The ranks of one stage and tp index whose combined cp·dp index satisfies
// `keep`, ascending.
template <typename Keep>
std::vector<int64_t> CombinedGroup(const Layout& l, int64_t rank, Keep keep) {
  const RankCoords at = l.CoordsOf(rank);
  std::vector<int64_t> group;
  for (int64_t combined = 0; combined < l.cp * l.dp; ++combined) {
    if (!keep(combined)) continue;
    group.push_back(l.RankOf({at.tp, combined % l.cp, combined / l.cp, at.stage}));
  }
  return group;
}

}  // namespace

std::vector<int64_t> Layout::EpGroup(int64_t rank) const {
  const RankCoords at = CoordsOf(rank);
  const int64_t mine = at.cp + cp * at.dp;
  return CombinedGroup(*this, rank, [&](int64_t k) { return k / ep == mine / ep; });
}

std::vector<int64_t> Layout::ExpertDpGroup(int64_t rank) const {
  const int64_t mine = ExpertIndexOf(rank);
  return CombinedGroup(*this, rank, [&](int64_t k) { return k % ep == mine; });
}

std::vector<int64_t> Layout::ExpertShardGroup(int64_t rank) const {
  if (zero_stage == 0) return {rank};
  const int64_t mine = ExpertIndexOf(rank);
  const int64_t replica = CoordsOf(rank).dp / DpShard();
  return CombinedGroup(*this, rank,
                       [&](int64_t k) { return k % ep == mine && k / cp / DpShard() == replica; });
}

std::vector<int64_t> Layout::ShardGroup(int64_t rank) const {
  if (zero_stage == 0) return {rank};
  const RankCoords at = CoordsOf(rank);
  const int64_t shard = DpShard(), replica = at.dp / shard;
  return CombinedGroup(*this, rank, [&](int64_t k) { return k / cp / shard == replica; });
}

std::vector<int64_t> Layout::ReplicaGroup(int64_t rank) const {
  if (zero_stage == 0) return DpCpGroup(rank);
  const RankCoords at = CoordsOf(rank);
  const int64_t shard = DpShard();
  return CombinedGroup(
      *this, rank, [&](int64_t k) { return k % cp == at.cp && (k / cp) % shard == at.dp % shard; });
}

std::string Layout::Describe() const {
  std::string s;
  auto add = [&](const char* name, int64_t v) {
    if (!s.empty()) s += ' ';
    s += name;
    s += ' ';
    s += Str(v);
  };
  if (tp != 1) add("tp", tp);
  if (cp != 1) add("cp", cp);
  if (pp != 1) add("pp", pp);
  if (UnevenPipeline()) {
    // The middle stages' count is not known here: the first's and last's.
    s += " (first " + Str(pp_first_layers) + ", last " + Str(pp_last_layers) + ")";
  }
  if (vp != 1) add("vp", vp);
  if (dp != 1) add("dp", dp);
  if (dp_shard != 0 && dp_shard != dp) add("dp_shard", dp_shard);
  if (ep != 1) add("ep", ep);
  if (zero_stage != 0) add("zero", zero_stage);
  return s.empty() ? "tp 1" : s;
}

Status ValidateLayout(const Layout& l, const std::string& source, const std::string& field_prefix) {
  auto bad = [&](const std::string& field, const std::string& what) {
    return Status::InvalidArgument(source + ": " + field_prefix + field + ": " + what);
  };
  for (auto [field, value] : {std::pair{"tp", l.tp}, std::pair{"cp", l.cp}, std::pair{"pp", l.pp},
                              std::pair{"dp", l.dp}, std::pair{"ep", l.ep}}) {
    if (value < 1) return bad(field, "expected a positive integer, got " + Str(value));
  }
  if (l.vp < 1) return bad("virtual_stages", "expected a positive integer, got " + Str(l.vp));
  if (l.zero_stage < 0 || l.zero_stage > 3) {
    return bad("zero_stage",
               "expected 0, 1, 2 or 3 (1: optimizer state sharded over dp x cp; 2: gradients "
               "too; 3: weights too, FSDP), got " +
                   Str(l.zero_stage));
  }
  if (l.dp_shard < 0) return bad("dp_shard", "expected a positive integer, got " + Str(l.dp_shard));
  if (l.dp_shard > 0) {
    if (l.dp % l.dp_shard != 0) {
      return bad("dp_shard", Str(l.dp_shard) + " does not divide dp " + Str(l.dp) +
                                 " (HSDP shards inside groups of dp_shard ranks and replicates "
                                 "across dp / dp_shard)");
    }
    if (l.zero_stage == 0 && l.dp_shard != l.dp) {
      return bad("dp_shard", Str(l.dp_shard) +
                                 " needs a ZeRO stage of 1 or more (at zero_stage 0 nothing "
                                 "is sharded)");
    }
    // An expert-parallel group inside each shard group, so that the replicas
    // of a shard position hold the same experts (torchtitan's dp_shard_mod_ep).
    const __int128 cp_shard = static_cast<__int128>(l.cp) * l.dp_shard;
    if (l.ep > 1 && l.dp_shard != l.dp && cp_shard % l.ep != 0) {
      return bad("ep", Str(l.ep) + " does not divide cp x dp_shard = " + Str(l.cp) + " x " +
                           Str(l.dp_shard) +
                           " (with HSDP the expert-parallel group is taken from one shard "
                           "group's ranks)");
    }
  }
  const __int128 cp_dp = static_cast<__int128>(l.cp) * l.dp;
  if (cp_dp % l.ep != 0) {
    const std::string product =
        cp_dp <= INT64_MAX ? Str(static_cast<int64_t>(cp_dp)) : Str(l.cp) + " x " + Str(l.dp);
    return bad("ep", Str(l.ep) + " does not divide cp x dp = " + product +
                         " (the expert-parallel group is taken from the cp x dp ranks of a "
                         "stage and tp index, as in Megatron-Core)");
  }
  return Status::Ok();
}

std::optional<UnmodelledLayout> Unmodelled(const Layout& l, bool fp8) {
  if (fp8 && l.zero_stage == 3) {
    return UnmodelledLayout{"fp8",
                            "FP8 with ZeRO-3 is not modelled yet (the FP8 all-gather of the "
                            "sharded weights, --fp8-param-gather); use ZeRO stage 0, 1 or 2"};
  }
  if (l.zero_stage == 1 && l.dp_shard != 0 && l.dp_shard != l.dp) {
    return UnmodelledLayout{
        "dp_shard",
        "HSDP at ZeRO-1 is not modelled yet (Megatron-Core's partial distributed optimizer, "
        "--num-distributed-optimizer-instances: the gradients reduce-scattered in each shard "
        "group and all-reduced across the replicas, the parameters gathered in the shard "
        "group); shard at ZeRO-2 or 3 (FSDP's HSDP), or over all of dp"};
  }
  return std::nullopt;
}

Status CheckWorld(const Layout& l, int64_t gpus, const std::string& source) {
  if (l.world() == gpus) return Status::Ok();
  return Status::InvalidArgument(source + ": tp " + Str(l.tp) + " x cp " + Str(l.cp) + " x dp " +
                                 Str(l.dp) + " x pp " + Str(l.pp) + " = " + Str(l.world()) +
                                 " ranks, not " + Str(gpus));
}

std::string SequenceSplitError(const Layout& l, int64_t seq_len, bool sequence_parallel) {
  // In 128 bits: a config's cp and tp may be any positive 64-bit integers.
  const __int128 split = static_cast<__int128>(l.cp > 1 ? 2 : 1) * std::max<int64_t>(l.cp, 1) *
                         (sequence_parallel ? std::max<int64_t>(l.tp, 1) : 1);
  if (split <= 1 || (split <= seq_len && seq_len % static_cast<int64_t>(split) == 0)) return "";
  std::string why = "sequence " + Str(seq_len) + " does not divide into ";
  if (l.cp > 1) {
    why += "2 x cp = " + (l.cp <= INT64_MAX / 2 ? Str(2 * l.cp) : "2 x " + Str(l.cp)) +
           " chunks (the load-balanced split)";
  }
  if (l.cp > 1 && sequence_parallel && l.tp > 1) why += " of tp " + Str(l.tp) + " pieces each";
  if (l.cp == 1) why += "tp = " + Str(l.tp) + " pieces (sequence parallelism)";
  return why;
}

namespace {

// The stages between the first and the last that take the rest evenly, and
// the rest.
struct MiddleSplit {
  int64_t stages = 0;
  int64_t blocks = 0;
};
MiddleSplit MiddleOf(const Layout& l, int64_t layers) {
  const int64_t fixed = (l.pp_first_layers > 0 ? 1 : 0) + (l.pp_last_layers > 0 ? 1 : 0);
  return {l.pp - fixed, layers - l.pp_first_layers - l.pp_last_layers};
}

}  // namespace

StageBlocks BlocksOfStage(const Layout& l, int64_t layers, int64_t stage) {
  assert(stage >= 0 && stage < l.pp);
  if (!l.UnevenPipeline()) return {stage * (layers / l.pp), layers / l.pp};
  const MiddleSplit mid = MiddleOf(l, layers);
  const int64_t each = mid.stages > 0 ? mid.blocks / mid.stages : 0;
  const int64_t first = l.pp_first_layers > 0 ? l.pp_first_layers : each;
  if (stage == 0) return {0, first};
  if (stage == l.pp - 1 && l.pp_last_layers > 0)
    return {layers - l.pp_last_layers, l.pp_last_layers};
  return {first + (stage - 1) * each, each};
}

std::optional<LayoutRefusal> PipelineSplitError(const Layout& l, int64_t layers) {
  if (l.pp < 1) return LayoutRefusal{"pp", "expected a positive integer, got " + Str(l.pp)};
  if (!l.UnevenPipeline()) {
    if (layers % l.pp == 0) return std::nullopt;
    return LayoutRefusal{"pp", "layers " + Str(layers) + " are not divisible by pp " + Str(l.pp) +
                                   " (each stage holds layers / pp blocks unless the first and "
                                   "last stages' blocks are set)"};
  }
  for (auto [field, value] : {std::pair{"pp_first_layers", l.pp_first_layers},
                              std::pair{"pp_last_layers", l.pp_last_layers}}) {
    if (value < 0) return LayoutRefusal{field, "expected a positive integer, got " + Str(value)};
    if (value > 0 && l.pp < 2) {
      return LayoutRefusal{field, Str(value) +
                                      " needs pp >= 2 (the first and last stages' "
                                      "blocks), pp is " +
                                      Str(l.pp)};
    }
  }
  if (l.vp > 1) {
    return LayoutRefusal{"virtual_stages",
                         Str(l.vp) +
                             " model chunks per stage with an uneven pipeline split "
                             "are not modelled (use the even split or vp 1)"};
  }
  const MiddleSplit mid = MiddleOf(l, layers);
  const std::string split = "first " + Str(l.pp_first_layers) + ", last " + Str(l.pp_last_layers) +
                            " of " + Str(layers) + " layers over pp " + Str(l.pp);
  const char* field = l.pp_last_layers > 0 ? "pp_last_layers" : "pp_first_layers";
  if (mid.stages == 0) {
    if (mid.blocks == 0) return std::nullopt;
    return LayoutRefusal{field, split + ": the two stages hold " +
                                    Str(l.pp_first_layers + l.pp_last_layers) + " blocks, not " +
                                    Str(layers)};
  }
  if (mid.blocks < mid.stages) {
    return LayoutRefusal{field, split + " leaves " + Str(mid.blocks) + " blocks for " +
                                    Str(mid.stages) + (mid.stages == 1 ? " stage" : " stages") +
                                    " (each needs at least one)"};
  }
  if (mid.blocks % mid.stages != 0) {
    return LayoutRefusal{field, split + " leaves " + Str(mid.blocks) + " blocks, which " +
                                    Str(mid.stages) +
                                    " stages do not share evenly (the stages between the first "
                                    "and the last hold the same blocks)"};
  }
  return std::nullopt;
}

std::optional<std::pair<int64_t, int64_t>> DefaultUnevenSplit(int64_t layers, int64_t pp) {
  if (pp < 2 || layers < pp || layers % pp == 0) return std::nullopt;
  const int64_t each = (layers + pp - 1) / pp;
  const int64_t rest = layers - (pp - 2) * each;
  const int64_t first = (rest + 1) / 2, last = rest - first;
  if (last < 1 || first > each) return std::nullopt;
  return std::pair{first, last};
}

GroupPlacement PlaceGroup(const std::vector<int64_t>& group, int64_t domain_ranks) {
  GroupPlacement p;
  p.ranks = static_cast<int64_t>(group.size());
  if (group.empty()) return p;
  const int64_t d = std::max<int64_t>(1, domain_ranks);
  std::vector<int64_t> domains;
  domains.reserve(group.size());
  for (int64_t r : group) domains.push_back(r / d);
  std::sort(domains.begin(), domains.end());
  for (size_t i = 0; i < domains.size();) {
    size_t j = i;
    while (j < domains.size() && domains[j] == domains[i]) ++j;
    ++p.domains;
    p.max_per_domain = std::max<int64_t>(p.max_per_domain, static_cast<int64_t>(j - i));
    i = j;
  }
  return p;
}

}  // namespace ssdtrain::traces

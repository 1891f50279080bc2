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

#include "app/replay_layout.h"

#include <fmt/format.h>

namespace ssdtrain::app {
namespace {

// "tp × cp × pp × dp = 2 × 2 × 1 × 2 = 8".
std::string Ranks(const traces::Layout& l) {
  return fmt::format("tp × cp × pp × dp = {} × {} × {} × {} = {}", l.tp, l.cp, l.pp, l.dp,
                     l.world());
}

}  // namespace

Status CheckRanks(const traces::Plan& plan, const std::string& source, const RankSync& ranks) {
  const traces::Layout l = traces::PlanLayout(plan);
  if (l.world() == ranks.size()) return Status::Ok();
  return Status::InvalidArgument(
      fmt::format("{}: {}, but mpirun started {} ranks; start mpirun -np {}", source, Ranks(l),
                  ranks.size(), l.world()));
}

// One process (no mpirun) runs a plan of one rank; a plan of more ranks
// would run as one shard of one stage of one replica and say nothing
// (--single-rank asks for that).
Status CheckOneProcess(const traces::Plan& plan, const std::string& source) {
  const traces::Layout l = traces::PlanLayout(plan);
  if (l.world() == 1) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "{}: its layout runs on {} ranks, but this replay is one process; run it under `mpirun -np "
      "{} ssdtrain replay ...` (with --model: each rank builds its shard's trace), or pass "
      "--single-rank to replay this trace's shard alone, as one rank",
      source, Ranks(l), l.world()));
}

}  // namespace ssdtrain::app

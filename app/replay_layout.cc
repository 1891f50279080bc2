#include "app/replay_layout.h"

#include <fmt/format.h>

namespace ssdtrain::app {

Status CheckNoContextParallel(const traces::Plan& plan, const std::string& source) {
  if (plan.cp <= 1) return Status::Ok();
  return Status::FailedPrecondition(fmt::format(
      "{}: cp {}: the replay does not yet run context parallelism's K/V ring between ranks "
      "(issue 44); plan with --cp 1 to replay",
      source, plan.cp));
}

// N ranks run a plan of tp × cp × pp × dp = N.
Status CheckRanks(const traces::Plan& plan, const std::string& source, const RankSync& ranks) {
  const traces::Layout l = traces::PlanLayout(plan);
  SSDTRAIN_RETURN_IF_ERROR(CheckNoContextParallel(plan, source));
  if (plan.zero_stage >= 2 && l.GradientShards() > 1) {
    return Status::FailedPrecondition(fmt::format(
        "{}: zero_stage {} over a shard group of {} ranks: the replay does not yet run ZeRO-2/3's "
        "gathers and reduce-scatters between ranks (issue 44); plan with --zero-stage 0 or 1 to "
        "replay on ranks, or replay a ZeRO-{} plan of dp 1 in one process",
        source, plan.zero_stage, l.GradientShards(), plan.zero_stage));
  }
  if (l.world() == ranks.size()) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "{}: tp × pp × dp = {} × {} × {} = {}, but mpirun started {} ranks; start mpirun -np {}",
      source, l.tp, l.pp, l.dp, l.world(), ranks.size(), l.world()));
}

// One process (no mpirun) runs a plan of tp × pp × dp = 1; a plan of more
// ranks would run as one shard of one stage of one replica and say nothing
// (--single-rank asks for that).
Status CheckOneProcess(const traces::Plan& plan, const std::string& source) {
  SSDTRAIN_RETURN_IF_ERROR(CheckNoContextParallel(plan, source));
  const traces::Layout l = traces::PlanLayout(plan);
  if (l.world() == 1) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "{}: its layout runs on tp × pp × dp = {} × {} × {} = {} ranks, but this replay is one "
      "process; run it under `mpirun -np {} ssdtrain replay ...` (with --model: each rank builds "
      "its shard's trace), or pass --single-rank to replay this trace's shard alone, as one rank",
      source, l.tp, l.pp, l.dp, l.world(), l.world()));
}

}  // namespace ssdtrain::app

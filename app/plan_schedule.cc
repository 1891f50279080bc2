#include "app/plan_schedule.h"

#include <fmt/format.h>

#include "traces/layout.h"
#include "traces/whole_step.h"

namespace ssdtrain::app {

std::string ZeroText(const traces::Plan& plan, bool compact) {
  if (plan.zero_stage == 0) return "";
  const traces::Layout l = traces::PlanLayout(plan);
  if (compact) {
    return fmt::format("+Z{}{}{}", plan.zero_stage,
                       plan.dp_shard != 0 ? fmt::format("h{}", l.DpShard()) : "",
                       plan.zero_defer_grad_sync ? "d" : "");
  }
  return fmt::format(
      " ZeRO-{}{}{}", plan.zero_stage,
      plan.dp_shard != 0 ? fmt::format(" HSDP {}x{}", l.Replicas(), l.DpShard()) : "",
      plan.zero_defer_grad_sync ? ", gradients synced once a step" : "");
}

std::string SplitText(const traces::Plan& plan, int64_t layers) {
  const traces::Layout l = traces::PlanLayout(plan);
  if (!l.UnevenPipeline() || layers <= 0 || traces::PipelineSplitError(l, layers)) return "";
  const int64_t first = traces::BlocksOfStage(l, layers, 0).count;
  const int64_t last = traces::BlocksOfStage(l, layers, l.pp - 1).count;
  if (l.pp == 2) return fmt::format(" (blocks {}|{})", first, last);
  if (l.pp == 3) {
    return fmt::format(" (blocks {}|{}|{})", first, traces::BlocksOfStage(l, layers, 1).count,
                       last);
  }
  return fmt::format(" (blocks {}|{}x{}|{})", first, traces::BlocksOfStage(l, layers, 1).count,
                     l.pp - 2, last);
}

std::string ScheduleText(const traces::Plan& plan, int64_t layers) {
  if (plan.schedule != "interleaved") return "";
  std::string text = fmt::format(", interleaved v={}", plan.virtual_stages);
  const int64_t chunks = plan.pp * plan.virtual_stages;
  if (layers > 0 && chunks > 0) {
    const int64_t per_chunk = layers / chunks;
    text += fmt::format(" ({} layer{} per chunk)", per_chunk, per_chunk == 1 ? "" : "s");
  }
  return text;
}

std::string InFlightText(int64_t in_flight, int64_t v) {
  if (v <= 1) return std::to_string(in_flight);
  return fmt::format("{} chunks, {:.1f} micro-batches' worth,", in_flight,
                     static_cast<double>(in_flight) / static_cast<double>(v));
}

std::string ScheduleVerdict(const sim::PlannerResult& r) {
  if (!r.interleaved_vs_1f1b) return "";
  const sim::PlannerResult::ScheduleComparison& c = *r.interleaved_vs_1f1b;
  constexpr double kPercent = 100.0;
  const double gain = c.one_f_one_b_tokens_per_s > 0
                          ? (c.tokens_per_s / c.one_f_one_b_tokens_per_s - 1.0) * kPercent
                          : 0.0;
  const std::string how = gain >= 0 ? fmt::format("beats 1f1b by {:.1f}%", gain)
                                    : fmt::format("is {:.1f}% slower than 1f1b", -gain);
  return fmt::format(
      "interleaved v={} {}: bubble {:.1f}% -> {:.1f}% (1f1b at this layout and policy: {:.0f} "
      "tokens/s{})\n",
      c.virtual_stages, how, c.one_f_one_b_bubble_fraction * kPercent, c.bubble_fraction * kPercent,
      c.one_f_one_b_tokens_per_s, c.one_f_one_b_fits ? "" : ", over the memory budget");
}

}  // namespace ssdtrain::app

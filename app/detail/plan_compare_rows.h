// The rows of `plan --compare` (app/plan_compare.h), read the same way by
// its table and JSON (plan_compare.cc) and its verdict (plan_compare_verdict.cc).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "app/plan_compare.h"
#include "app/plan_schedule.h"
#include "traces/plan.h"

namespace ssdtrain::app::detail {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

inline double GiB(int64_t bytes) { return static_cast<double>(bytes) / kGiB; }
inline const traces::StepMetrics& Metrics(const ComparedPolicy& r) {
  return r.result.prediction.metrics;
}
inline bool Simulated(const ComparedPolicy& r) { return r.result.simulations > 0; }
inline bool WritesSsd(const ComparedPolicy& r) { return Metrics(r).ssd_bytes_written > 0; }
// "micro-batch 2, tp 4, pp 2, dp 8 ep 2, ZeRO-1": a row's layout in words.
inline std::string LayoutText(const traces::Plan& p) {
  return fmt::format("micro-batch {}, tp {}{}, pp {}, dp {}{}{}", p.micro_batch, p.tp,
                     p.cp > 1 ? fmt::format(", cp {}", p.cp) : "", p.pp, p.dp,
                     p.ep > 1 ? fmt::format(" ep {}", p.ep) : "", ZeroText(p));
}

}  // namespace ssdtrain::app::detail

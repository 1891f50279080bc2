// `plan --compare`'s verdict in words (app/plan_compare.h, Verdict): whether
// the fastest plan that fits writes to the SSD, and why or why not.
#include <fmt/format.h>

#include <functional>
#include <string>

#include "app/detail/plan_compare_rows.h"
#include "app/plan_compare.h"

namespace ssdtrain::app {
namespace {

using detail::GiB;
using detail::LayoutText;
using detail::Metrics;
using detail::Simulated;
using detail::WritesSsd;

// The fastest row that fits among those `pick` selects.
const ComparedPolicy* Fastest(const PolicyComparison& c,
                              const std::function<bool(const ComparedPolicy&)>& pick) {
  const ComparedPolicy* best = nullptr;
  for (const ComparedPolicy& r : c.rows) {
    if (!r.result.fits || !pick(r)) continue;
    if (!best || Metrics(r).tokens_per_s > Metrics(*best).tokens_per_s) best = &r;
  }
  return best;
}

// How the plan that writes to the SSD differs from the one that does not.
std::string HowItWins(const traces::Plan& with, const traces::Plan& without) {
  std::vector<std::string> parts;
  if (with.micro_batch > without.micro_batch) {
    parts.push_back(
        fmt::format("fitting micro-batch {} (against {})", with.micro_batch, without.micro_batch));
  }
  if (with.pp < without.pp) {
    parts.push_back(fmt::format("fitting pp {} (against {})", with.pp, without.pp));
  }
  if (with.tp < without.tp) {
    parts.push_back(fmt::format("fitting tp {} (against {})", with.tp, without.tp));
  }
  if (with.zero_stage < without.zero_stage) {
    parts.push_back(
        fmt::format("fitting at ZeRO-{} (against ZeRO-{})", with.zero_stage, without.zero_stage));
  }
  if (with.schedule != without.schedule || with.virtual_stages != without.virtual_stages) {
    auto schedule = [](const traces::Plan& p) {
      return p.schedule == "interleaved" ? fmt::format("interleaved v={}", p.virtual_stages)
                                         : p.schedule;
    };
    parts.push_back(fmt::format("fitting {} (against {})", schedule(with), schedule(without)));
  }
  if (parts.empty()) {
    if (without.policy.rfind("recompute", 0) == 0) {
      return fmt::format("writing to the SSD what {} recomputes", without.policy);
    }
    return "what it offloads, at the same layout";
  }
  std::string out = parts.front();
  for (size_t i = 1; i < parts.size(); ++i) out += " and " + parts[i];
  return out;
}

// The stage of `p` whose offload asks the most write bandwidth.
const sim::Prediction::StagePeak* NeediestStage(const sim::Prediction& p) {
  const sim::Prediction::StagePeak* need = nullptr;
  for (const auto& s : p.stage_peaks) {
    if (!need || s.required_write_GBps > need->required_write_GBps) need = &s;
  }
  return need;
}

std::string NothingFits(const PolicyComparison& c) {
  const ComparedPolicy& low = c.rows[c.chosen];
  if (!Simulated(low)) {
    return fmt::format(
        "Verdict: nothing fits the {:.2f} GiB budget: the weights, gradients and optimizer state "
        "alone need {:.2f} GiB per GPU at the best layout.",
        GiB(c.budget_bytes), GiB(c.budget_bytes + low.result.over_budget_bytes));
  }
  return fmt::format(
      "Verdict: no policy fits the {:.2f} GiB budget at global batch {}: the lowest-memory plan "
      "({} at {}) needs {:.2f} GiB per GPU on its worst stage.",
      GiB(c.budget_bytes), c.global_batch, low.policy, LayoutText(low.result.plan),
      GiB(Metrics(low).peak_gpu_bytes));
}

std::string DoesNotHelp(const ComparedPolicy& without, const ComparedPolicy* with) {
  const sim::Prediction& p = without.result.prediction;
  const sim::Prediction::StagePeak* need = NeediestStage(p);
  const std::string layout = LayoutText(without.result.plan);
  std::string out = "Verdict: SSD offload does not help here: ";
  if (need == nullptr || need->offloadable_bytes == 0) {
    out += "the model has no activation a plan may offload.";
  } else if (need->required_write_GBps > p.array_write_GBps) {
    out += fmt::format(
        "hiding its writes needs {:.1f} GB/s per GPU, the drives give {:.1f}.\n  (At {}, stage "
        "{} saves {:.2f} GiB of activations per micro-batch in {:.1f} ms of forward compute.)",
        need->required_write_GBps, p.array_write_GBps, layout, need->stage,
        GiB(need->offloadable_bytes), static_cast<double>(need->forward_compute_ns) / 1e6);
  } else {
    out += fmt::format(
        "the drives keep pace ({:.1f} GB/s needed per GPU, {:.1f} given), but the fastest plan "
        "fits without them.",
        need->required_write_GBps, p.array_write_GBps);
  }
  out += fmt::format("\n  The best plan is {} at {}, {:.0f} tokens/s", without.policy, layout,
                     Metrics(without).tokens_per_s);
  if (with != nullptr) {
    out += fmt::format("; the fastest that writes to the SSD, {} at {}, reaches {:.2f}x of that",
                       with->policy, LayoutText(with->result.plan),
                       Metrics(*with).tokens_per_s / std::max(1e-9, Metrics(without).tokens_per_s));
  }
  return out + ".";
}

}  // namespace

std::string Verdict(const PolicyComparison& c) {
  const ComparedPolicy* with = Fastest(c, WritesSsd);
  const ComparedPolicy* without = Fastest(c, [](const ComparedPolicy& r) { return !WritesSsd(r); });
  if (with == nullptr && without == nullptr) return NothingFits(c);
  if (without == nullptr) {
    return fmt::format(
        "Verdict: SSD offload is what makes it fit: only plans that write to the SSD fit the "
        "budget; the fastest, {} at {}, runs {:.0f} tokens/s.",
        with->policy, LayoutText(with->result.plan), Metrics(*with).tokens_per_s);
  }
  if (with != nullptr && Metrics(*with).tokens_per_s > Metrics(*without).tokens_per_s) {
    return fmt::format(
        "Verdict: SSD offload buys {:.2f}x over the best plan without it ({} at {}), by {}.\n  "
        "The best plan is {} at {}, {:.0f} tokens/s.",
        Metrics(*with).tokens_per_s / Metrics(*without).tokens_per_s, without->policy,
        LayoutText(without->result.plan), HowItWins(with->result.plan, without->result.plan),
        with->policy, LayoutText(with->result.plan), Metrics(*with).tokens_per_s);
  }
  return DoesNotHelp(*without, with);
}

}  // namespace ssdtrain::app

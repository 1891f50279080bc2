#include "sim/detail/interconnect_json.h"

#include <cstdio>
#include <limits>
#include <string>

namespace ssdtrain::sim::detail {
namespace {

using Sign = traces::detail::ObjectReader::Sign;
using traces::detail::ObjectReader;

// One tier: {GBps, p2p_GBps (optional), latency_us (optional),
// collective_sms (optional; below half of the GPU's `sm_count`)}.
Status ReadTier(const ObjectReader& tier, int sm_count, LinkTier* out) {
  SSDTRAIN_ASSIGN_OR_RETURN(out->GBps, tier.Number("GBps", Sign::kPositive));
  SSDTRAIN_ASSIGN_OR_RETURN(out->p2p_GBps, tier.NumberOr("p2p_GBps", 0, Sign::kPositive));
  SSDTRAIN_ASSIGN_OR_RETURN(out->latency_us, tier.NumberOr("latency_us", 0, Sign::kNonNegative));
  SSDTRAIN_ASSIGN_OR_RETURN(const int64_t sms,
                            tier.IntInOr("collective_sms", 0, 0, std::numeric_limits<int>::max()));
  if (sms > 0 && 2 * sms >= sm_count) {
    return tier.At("collective_sms")
        .Error(sm_count > 0 ? "must be below half of gpu.sm_count (" + std::to_string(sm_count) +
                                  "): two collectives may run beside compute"
                            : "needs gpu.sm_count (the SMs it holds are taken from those)");
  }
  out->collective_sms = static_cast<int>(sms);
  return tier.CheckNoUnknown();
}

}  // namespace

// The topology form {scale_up {domain_gpus, GBps, ...}, scale_out {GBps, ...}},
// or the per-dimension form ssdtrain read before (tp_GBps, pp_GBps, dp_GBps,
// latency_us), converted with a note: tp_GBps was the NVLink figure inside a
// node, dp_GBps (else pp_GBps) the network's, pp_GBps the pipeline's sends.
Status ReadInterconnect(const ObjectReader& ic, HardwareOptions* hw) {
  InterconnectOptions& out = hw->interconnect;
  const bool old_form = ic.Has("tp_GBps") || ic.Has("pp_GBps") || ic.Has("dp_GBps");
  if (!old_form) {
    SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader up, ic.Object("scale_up"));
    SSDTRAIN_ASSIGN_OR_RETURN(const int64_t domain, up.IntInOr("domain_gpus", hw->gpus_per_node, 1,
                                                               std::numeric_limits<int>::max()));
    out.domain_gpus = static_cast<int>(domain);
    SSDTRAIN_RETURN_IF_ERROR(ReadTier(up, hw->gpu.sm_count, &out.scale_up));
    SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader network, ic.Object("scale_out"));
    SSDTRAIN_RETURN_IF_ERROR(ReadTier(network, hw->gpu.sm_count, &out.scale_out));
    return ic.CheckNoUnknown();
  }
  if (ic.Has("scale_up") || ic.Has("scale_out")) {
    return ic.At("scale_up")
        .Error(
            "give either scale_up and scale_out or the older tp_GBps, pp_GBps and dp_GBps, not "
            "both");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(double tp, ic.Number("tp_GBps", Sign::kPositive));
  SSDTRAIN_ASSIGN_OR_RETURN(double pp, ic.Number("pp_GBps", Sign::kPositive));
  SSDTRAIN_ASSIGN_OR_RETURN(double dp, ic.NumberOr("dp_GBps", pp, Sign::kPositive));
  SSDTRAIN_ASSIGN_OR_RETURN(double latency, ic.NumberOr("latency_us", 0, Sign::kNonNegative));
  SSDTRAIN_RETURN_IF_ERROR(ic.CheckNoUnknown());
  out.domain_gpus = hw->gpus_per_node;
  out.scale_up = LinkTier{tp, 0, latency};
  out.scale_out = LinkTier{dp, pp != dp ? pp : 0, latency};
  auto g = [](double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", v);
    return std::string(text);
  };
  hw->notes.push_back(
      ic.At("tp_GBps").source() +
      ": interconnect: tp_GBps, pp_GBps and dp_GBps price links per parallel dimension, which "
      "ssdtrain no longer does; read as scale_up {domain_gpus " +
      std::to_string(out.domain_gpus) + " (gpus_per_node), GBps " + g(tp) +
      "} and scale_out {GBps " + g(dp) + (pp != dp ? ", p2p_GBps " + g(pp) : std::string()) +
      "}, latency_us " + g(latency) +
      " for both: each group is now priced by where its ranks sit (write the file in that form "
      "to silence this)");
  return Status::Ok();
}

namespace {

nlohmann::json TierJson(const LinkTier& t) {
  nlohmann::json j{{"GBps", t.GBps}, {"latency_us", t.latency_us}};
  if (t.p2p_GBps > 0) j["p2p_GBps"] = t.p2p_GBps;
  if (t.collective_sms > 0) j["collective_sms"] = t.collective_sms;
  return j;
}

}  // namespace

nlohmann::json InterconnectJson(const HardwareOptions& hw) {
  nlohmann::json up = TierJson(hw.interconnect.scale_up);
  up["domain_gpus"] = hw.interconnect.domain_gpus;
  return {{"scale_up", up}, {"scale_out", TierJson(hw.interconnect.scale_out)}};
}

}  // namespace ssdtrain::sim::detail

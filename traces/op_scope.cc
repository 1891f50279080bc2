#include "traces/op_scope.h"

#include <array>

#include "traces/dp_buckets.h"

namespace ssdtrain::traces {
namespace {

// The name's component before the first '.', and the one after it.
std::pair<std::string_view, std::string_view> Components(std::string_view name) {
  const size_t dot = name.find('.');
  if (dot == std::string_view::npos) return {name, {}};
  std::string_view rest = name.substr(dot + 1);
  return {name.substr(0, dot), rest.substr(0, rest.find('.'))};
}

}  // namespace

std::string_view UnprefixedName(const Op& op) {
  std::string_view name = op.name;
  if (name.size() > 1 && name[0] == 'L') {
    const size_t dot = name.find('.');
    if (dot != std::string_view::npos && dot > 1 &&
        name.substr(1, dot - 1).find_first_not_of("0123456789") == std::string_view::npos) {
      name.remove_prefix(dot + 1);
    }
  }
  return name;
}

bool InScope(const Op& op, std::string_view scope) {
  const std::string_view name = UnprefixedName(op);
  return name.size() > scope.size() && name.substr(0, scope.size()) == scope &&
         name[scope.size()] == '.';
}

std::string_view OffloadModuleOf(const Op& op) {
  if (op.layer == kNoLayer) return "";
  const auto [first, second] = Components(UnprefixedName(op));
  if (first == "ln1") return "attn_norm";
  if (first == "ln2") return "mlp_norm";
  constexpr std::array<std::string_view, 6> kProjections = {"qkv",  "q_proj",  "q_down",
                                                            "q_up", "kv_down", "kv_up"};
  for (std::string_view p : kProjections) {
    if (first == p) return "qkv_linear";
  }
  if (first == "attn") return "core_attn";
  if (first == "proj") return "attn_proj";
  if (first == kRoutedExperts) {
    if (second == "fc1") return "expert_fc1";
    if (second == "swiglu" || second == "swiglu_clamped") return "moe_act";
  }
  return "";
}

bool ReadOutsideLayer(const Trace& trace, const Tensor& t, int layer) {
  for (OpId c : t.consumers) {
    if (trace.op(c).layer != layer) return true;
  }
  return false;
}

}  // namespace ssdtrain::traces

// Module scopes: the part of an op's name after its layer prefix that names
// the module a recompute option selects by, decided here for the trace
// builder that names the ops and the policies that select them.
// "L3.mla_up.q_rope" is in scope "mla_up".
//
// Thread-safety: pure functions.
#pragma once

#include <string_view>

#include "traces/trace.h"

namespace ssdtrain::traces {

// Multi-head latent attention's up-projection outputs, query, key and value
// (models/mla_config.h): what Megatron-Core's `--recompute-modules
// mla_up_proj` drops after the forward and rebuilds before the attention's
// backward.
inline constexpr std::string_view kMlaUpScope = "mla_up";

// True when `op`'s name, less a leading "L<layer>." prefix, begins with
// `scope` followed by '.'.
inline bool InScope(const Op& op, std::string_view scope) {
  std::string_view name = op.name;
  if (name.size() > 1 && name[0] == 'L') {
    const size_t dot = name.find('.');
    if (dot != std::string_view::npos && dot > 1 &&
        name.substr(1, dot - 1).find_first_not_of("0123456789") == std::string_view::npos) {
      name.remove_prefix(dot + 1);
    }
  }
  return name.size() > scope.size() && name.substr(0, scope.size()) == scope &&
         name[scope.size()] == '.';
}

}  // namespace ssdtrain::traces

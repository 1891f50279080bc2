// A header's and a plan's block kernels (traces::BlockKernels) as JSON: each
// field written where not its default, read back with its value checked.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "traces/detail/json_fields.h"
#include "traces/trace.h"

namespace ssdtrain::traces::detail {

inline void WriteBlockKernels(const BlockKernels& b, nlohmann::json* j) {
  for (const BlockKernel& k : kBlockKernels) {
    if (!(b.*k.member).empty()) (*j)[std::string(k.field)] = b.*k.member;
  }
}

// "<source>: <path>.rotary: unknown value "x"; expected "fused" or "complex"".
inline Status ReadBlockKernels(const ObjectReader& r, BlockKernels* out) {
  for (const BlockKernel& k : kBlockKernels) {
    const std::string field(k.field);
    SSDTRAIN_ASSIGN_OR_RETURN(const std::string value, r.StringOr(field, ""));
    const std::optional<std::string> parsed = ParseBlockKernel(k, value);
    if (!parsed) {
      return r.At(field).Error("unknown value \"" + value + "\"; expected \"" +
                               std::string(k.default_value) + "\" or \"" +
                               std::string(k.other_value) + "\"");
    }
    out->*k.member = *parsed;
  }
  return Status::Ok();
}

}  // namespace ssdtrain::traces::detail

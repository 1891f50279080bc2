// The recompute runs in a timeline, by op: the simulator names its spans
// "recompute:<op>", the executor's replay "recompute <op>".
#pragma once

#include <map>
#include <string>

#include "traces/timeline.h"

namespace ssdtrain::testing {

inline std::map<std::string, int> RecomputeRuns(const traces::Timeline& timeline,
                                                const std::string& prefix) {
  std::map<std::string, int> runs;
  for (const traces::Span& span : timeline.spans) {
    if (span.name.starts_with(prefix)) ++runs[span.name.substr(prefix.size())];
  }
  return runs;
}
inline std::map<std::string, int> SimulatedRecomputes(const traces::Timeline& timeline) {
  return RecomputeRuns(timeline, "recompute:");
}
inline std::map<std::string, int> ReplayedRecomputes(const traces::Timeline& timeline) {
  return RecomputeRuns(timeline, "recompute ");
}

}  // namespace ssdtrain::testing

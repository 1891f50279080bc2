// Structural validation of a trace, with messages that name the source file and
// the JSON path: "t.json: ops[12].inputs[1]: tensor 99 does not exist".
#pragma once

#include <string>

#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::traces {

// Checks ids (row indices), sizes, dangling tensor and op ids, producer and
// consumer lists agreeing with op inputs and outputs, alias chains, dependency
// cycles (data dependencies plus edges), and that every op is listed after the
// producers of its inputs (a backward op never comes before its forward producer).
Status Validate(const Trace& trace, const std::string& source);

}  // namespace ssdtrain::traces

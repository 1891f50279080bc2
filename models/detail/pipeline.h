// Pipeline-parallel boundaries: point-to-point transfers between adjacent stages.
#pragma once

#include <string>
#include <vector>

#include "models/detail/trace_builder.h"

namespace ssdtrain::models::detail {

// A tensor arriving from the neighbouring stage (forward: an activation from the
// previous stage; backward: a gradient from the next one).
TensorId Recv(TraceBuilder& b, const std::string& name, std::vector<int64_t> shape, DType dtype,
              TensorKind kind);
void Send(TraceBuilder& b, const std::string& name, TensorId x);

}  // namespace ssdtrain::models::detail

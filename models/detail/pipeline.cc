#include "models/detail/pipeline.h"

namespace ssdtrain::models::detail {

TensorId Recv(TraceBuilder& b, const std::string& name, std::vector<int64_t> shape, DType dtype,
              TensorKind kind) {
  const TensorId x = kind == TensorKind::kGradient ? b.Gradient(name, std::move(shape), dtype)
                                                   : b.Activation(name, std::move(shape), dtype);
  b.Op(name + ".recv", OpKind::kRecv, {}, {x}, 0);
  return x;
}

void Send(TraceBuilder& b, const std::string& name, TensorId x) {
  b.Op(name + ".send", OpKind::kSend, {x}, {}, 0);
}

}  // namespace ssdtrain::models::detail

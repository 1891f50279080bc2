#include "traces/status.h"

namespace ssdtrain {

const char* CodeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk:
      return "OK";
    case Status::Code::kInvalidArgument:
      return "invalid argument";
    case Status::Code::kNotFound:
      return "not found";
    case Status::Code::kIoError:
      return "I/O error";
    case Status::Code::kCorruption:
      return "corruption";
    case Status::Code::kResourceExhausted:
      return "resource exhausted";
    case Status::Code::kFailedPrecondition:
      return "failed precondition";
    case Status::Code::kUnavailable:
      return "unavailable";
    case Status::Code::kInternal:
      return "internal error";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code())) + ": " + message();
}

Status Status::WithPrefix(const std::string& prefix) const {
  if (ok()) return *this;
  return Status(code(), prefix + ": " + message());
}

}  // namespace ssdtrain

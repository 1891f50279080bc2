// Status and Result<T>: expected failures as values (LevelDB's shape).
//
// A Status is cheap when OK (no allocation) and otherwise carries a code and a
// message that names the file, the JSON path or the errno. Exceptions are used
// only at the process edge (the CLI and tests).
//
// Both types are [[nodiscard]]: a call whose Status or Result is dropped does not
// compile (-Werror). Where a failure truly changes nothing, say so with a
// `(void)` cast and a comment giving the reason.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace ssdtrain {

class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument,     // bad user input: a config, a trace, a flag
    kNotFound,            // a file or an id that does not exist
    kIoError,             // a failed read or write; message names the file and errno
    kCorruption,          // data read back does not match what was written
    kResourceExhausted,   // out of device memory, disk space or staging buffers
    kFailedPrecondition,  // inputs that do not fit together (a plan for another trace)
    kUnavailable,         // a backend or feature this machine does not have
    kInternal,            // a broken invariant that reached the user
  };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return Status(Code::kInvalidArgument, std::move(msg));
  }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status IoError(std::string msg) { return Status(Code::kIoError, std::move(msg)); }
  static Status Corruption(std::string msg) { return Status(Code::kCorruption, std::move(msg)); }
  static Status ResourceExhausted(std::string msg) {
    return Status(Code::kResourceExhausted, std::move(msg));
  }
  static Status FailedPrecondition(std::string msg) {
    return Status(Code::kFailedPrecondition, std::move(msg));
  }
  static Status Unavailable(std::string msg) { return Status(Code::kUnavailable, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(Code::kInternal, std::move(msg)); }

  bool ok() const { return state_ == nullptr; }
  Code code() const { return state_ ? state_->code : Code::kOk; }
  const std::string& message() const {
    static const std::string kEmpty;
    return state_ ? state_->message : kEmpty;
  }
  // "OK" or "<code name>: <message>".
  std::string ToString() const;

  // Returns a copy whose message is "<prefix>: <message>" (adds context on the way up).
  Status WithPrefix(const std::string& prefix) const;

 private:
  struct State {
    Code code;
    std::string message;
  };
  Status(Code code, std::string msg)
      : state_(std::make_shared<const State>(State{code, std::move(msg)})) {}
  std::shared_ptr<const State> state_;
};

const char* CodeName(Status::Code code);

// Result<T>: a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace ssdtrain

#define SSDTRAIN_CONCAT_INNER(a, b) a##b
#define SSDTRAIN_CONCAT(a, b) SSDTRAIN_CONCAT_INNER(a, b)

// Returns the status from the enclosing function when it is not OK.
#define SSDTRAIN_RETURN_IF_ERROR(expr)                   \
  do {                                                   \
    ::ssdtrain::Status ssdtrain_status_ = (expr);        \
    if (!ssdtrain_status_.ok()) return ssdtrain_status_; \
  } while (0)

// Declares `lhs` from a Result-returning expression, or returns its status.
#define SSDTRAIN_ASSIGN_OR_RETURN(lhs, expr)                     \
  auto SSDTRAIN_CONCAT(ssdtrain_result_, __LINE__) = (expr);     \
  if (!SSDTRAIN_CONCAT(ssdtrain_result_, __LINE__).ok())         \
    return SSDTRAIN_CONCAT(ssdtrain_result_, __LINE__).status(); \
  lhs = std::move(SSDTRAIN_CONCAT(ssdtrain_result_, __LINE__)).value()

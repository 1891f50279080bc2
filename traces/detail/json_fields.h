// Typed field access on nlohmann::json with messages that name the source file
// and the JSON path: "t.json: ops[3].flops: expected an integer, got string".
// Used by every reader of our JSON formats (traces, plans, configs).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "traces/status.h"

namespace ssdtrain::traces::detail {

// Where a value sits: the source file and a JSON path.
class JsonPath {
 public:
  JsonPath(std::string source, std::string path)
      : source_(std::move(source)), path_(std::move(path)) {}
  JsonPath Field(const std::string& name) const {
    return JsonPath(source_, path_.empty() ? name : path_ + "." + name);
  }
  JsonPath Index(size_t i) const {
    return JsonPath(source_, path_ + "[" + std::to_string(i) + "]");
  }
  // "<source>: <path>: <what>" (or "<source>: <what>" at the root).
  Status Error(const std::string& what) const;
  const std::string& path() const { return path_; }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::string path_;
};

// Name of a JSON value's type for messages: "string", "integer", "object", ...
std::string TypeName(const nlohmann::json& j);

// An object's fields, read with type checks. Remembers which fields were read so
// that CheckNoUnknown() can reject typos.
class ObjectReader {
 public:
  // Fails when `j` is not an object.
  static Result<ObjectReader> Make(const nlohmann::json& j, JsonPath at);

  Result<int64_t> Int(const std::string& name) const;
  Result<int64_t> IntOr(const std::string& name, int64_t fallback) const;
  Result<double> Number(const std::string& name) const;
  Result<double> NumberOr(const std::string& name, double fallback) const;
  Result<bool> Bool(const std::string& name) const;
  Result<bool> BoolOr(const std::string& name, bool fallback) const;
  Result<std::string> String(const std::string& name) const;
  Result<std::string> StringOr(const std::string& name, const std::string& fallback) const;

  // Bounded numbers, for options files: finite and > 0 (kPositive) or >= 0
  // (kNonNegative); "must be > 0, got 0" names the value. *Or returns the
  // fallback unchecked when the field is absent.
  enum class Sign { kNonNegative, kPositive };
  Result<double> Number(const std::string& name, Sign sign) const;
  Result<double> NumberOr(const std::string& name, double fallback, Sign sign) const;
  // Integers in [min, max]: "must be >= 1, got 0".
  Result<int64_t> IntIn(const std::string& name, int64_t min, int64_t max) const;
  Result<int64_t> IntInOr(const std::string& name, int64_t fallback, int64_t min,
                          int64_t max) const;
  // A nested object: required ("missing (expected an object)" when absent), or
  // optional (an empty object when absent, so its fields take their fallbacks).
  Result<ObjectReader> Object(const std::string& name) const;
  Result<ObjectReader> ObjectOrEmpty(const std::string& name) const;
  Result<std::vector<int64_t>> IntArray(const std::string& name) const;
  // null or absent -> nullopt.
  Result<std::optional<int64_t>> OptionalInt(const std::string& name) const;
  // The raw value; fails when absent.
  Result<const nlohmann::json*> Value(const std::string& name) const;
  bool Has(const std::string& name) const;
  // Marks an optional field as known without reading it.
  void Skip(const std::string& name) const { seen_.push_back(name); }

  // Fails naming the first field that no accessor asked for.
  Status CheckNoUnknown() const;
  JsonPath At(const std::string& name) const { return at_.Field(name); }
  const JsonPath& at() const { return at_; }

 private:
  ObjectReader(const nlohmann::json* j, JsonPath at) : j_(j), at_(std::move(at)) {}
  Result<const nlohmann::json*> Get(const std::string& name) const;
  const nlohmann::json* j_;
  JsonPath at_;
  mutable std::vector<std::string> seen_;
};

}  // namespace ssdtrain::traces::detail

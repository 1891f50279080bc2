// A small helper for reading options structs from JSON with messages that name
// the file and the field: "<source>: <path>: <what was expected>".
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

#include "traces/status.h"

namespace ssdtrain::sim::detail {

class JsonReader {
 public:
  JsonReader(const nlohmann::json& j, std::string source, std::string path)
      : j_(j), source_(std::move(source)), path_(std::move(path)) {}

  bool Has(const std::string& key) const { return j_.is_object() && j_.contains(key); }
  std::string FieldPath(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
  }
  Status Error(const std::string& key, const std::string& what) const {
    return Status::InvalidArgument(source_ + ": " + FieldPath(key) + ": " + what);
  }
  // A child object reader; the field must be an object when present.
  Result<JsonReader> Object(const std::string& key, bool required) const;

  // Optional numeric field (keeps *out when absent) with an inclusive lower
  // bound; `positive` requires > 0 instead.
  Status Number(const std::string& key, double* out, bool positive, bool required = false) const;
  Status Int(const std::string& key, int64_t* out, int64_t min, bool required = false) const;
  Status Int(const std::string& key, int* out, int64_t min, bool required = false) const;
  Status String(const std::string& key, std::string* out, bool required = false) const;
  Status Bool(const std::string& key, bool* out) const;

  // Rejects keys not in `known` (catches typos such as "write_GBPs").
  Status OnlyKeys(std::initializer_list<const char*> known) const;

  const nlohmann::json& json() const { return j_; }
  const std::string& source() const { return source_; }
  const std::string& path() const { return path_; }

 private:
  const nlohmann::json& j_;
  std::string source_;
  std::string path_;
};

}  // namespace ssdtrain::sim::detail

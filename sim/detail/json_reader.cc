#include "sim/detail/json_reader.h"

#include <cmath>

namespace ssdtrain::sim::detail {

Result<JsonReader> JsonReader::Object(const std::string& key, bool required) const {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  if (!Has(key)) {
    if (required) return Error(key, "missing (expected an object)");
    return JsonReader(kEmpty, source_, FieldPath(key));
  }
  const nlohmann::json& child = j_.at(key);
  if (!child.is_object()) return Error(key, "expected an object");
  return JsonReader(child, source_, FieldPath(key));
}

Status JsonReader::Number(const std::string& key, double* out, bool positive, bool required) const {
  if (!Has(key)) return required ? Error(key, "missing (expected a number)") : Status::Ok();
  const nlohmann::json& v = j_.at(key);
  if (!v.is_number()) return Error(key, "expected a number, got " + v.dump());
  const double x = v.get<double>();
  if (!std::isfinite(x)) return Error(key, "expected a finite number");
  if (positive && !(x > 0)) return Error(key, "must be > 0, got " + v.dump());
  if (!positive && x < 0) return Error(key, "must be >= 0, got " + v.dump());
  *out = x;
  return Status::Ok();
}

Status JsonReader::Int(const std::string& key, int64_t* out, int64_t min, bool required) const {
  if (!Has(key)) return required ? Error(key, "missing (expected an integer)") : Status::Ok();
  const nlohmann::json& v = j_.at(key);
  if (!v.is_number_integer()) return Error(key, "expected an integer, got " + v.dump());
  const int64_t x = v.get<int64_t>();
  if (x < min) return Error(key, "must be >= " + std::to_string(min) + ", got " + v.dump());
  *out = x;
  return Status::Ok();
}

Status JsonReader::Int(const std::string& key, int* out, int64_t min, bool required) const {
  int64_t x = *out;
  SSDTRAIN_RETURN_IF_ERROR(Int(key, &x, min, required));
  if (x > INT32_MAX) return Error(key, "too large");
  *out = static_cast<int>(x);
  return Status::Ok();
}

Status JsonReader::String(const std::string& key, std::string* out, bool required) const {
  if (!Has(key)) return required ? Error(key, "missing (expected a string)") : Status::Ok();
  const nlohmann::json& v = j_.at(key);
  if (!v.is_string()) return Error(key, "expected a string, got " + v.dump());
  *out = v.get<std::string>();
  return Status::Ok();
}

Status JsonReader::OnlyKeys(std::initializer_list<const char*> known) const {
  if (!j_.is_object()) return Status::Ok();
  for (auto it = j_.begin(); it != j_.end(); ++it) {
    bool found = false;
    for (const char* k : known) found = found || it.key() == k;
    if (!found) return Error(it.key(), "unknown field");
  }
  return Status::Ok();
}

Status JsonReader::Bool(const std::string& key, bool* out) const {
  if (!Has(key)) return Status::Ok();
  const nlohmann::json& v = j_.at(key);
  if (!v.is_boolean()) return Error(key, "expected true or false, got " + v.dump());
  *out = v.get<bool>();
  return Status::Ok();
}

}  // namespace ssdtrain::sim::detail

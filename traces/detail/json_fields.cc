#include "traces/detail/json_fields.h"

#include <algorithm>
#include <cmath>

namespace ssdtrain::traces::detail {

Status JsonPath::Error(const std::string& what) const {
  if (path_.empty()) return Status::InvalidArgument(source_ + ": " + what);
  return Status::InvalidArgument(source_ + ": " + path_ + ": " + what);
}

std::string TypeName(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::object:
      return "object";
    case nlohmann::json::value_t::array:
      return "array";
    case nlohmann::json::value_t::string:
      return "string";
    case nlohmann::json::value_t::boolean:
      return "boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return "integer";
    case nlohmann::json::value_t::number_float:
      return "number";
    case nlohmann::json::value_t::binary:
      return "binary";
    case nlohmann::json::value_t::discarded:
      return "discarded";
  }
  return "unknown";
}

Result<ObjectReader> ObjectReader::Make(const nlohmann::json& j, JsonPath at) {
  if (!j.is_object()) return at.Error("expected an object, got " + TypeName(j));
  return ObjectReader(&j, std::move(at));
}

bool ObjectReader::Has(const std::string& name) const {
  auto it = j_->find(name);
  return it != j_->end() && !it->is_null();
}

Result<const nlohmann::json*> ObjectReader::Get(const std::string& name) const {
  seen_.push_back(name);
  auto it = j_->find(name);
  if (it == j_->end()) return at_.Field(name).Error("missing required field");
  return &*it;
}

Result<const nlohmann::json*> ObjectReader::Value(const std::string& name) const {
  return Get(name);
}

Result<int64_t> ObjectReader::Int(const std::string& name) const {
  SSDTRAIN_ASSIGN_OR_RETURN(const nlohmann::json* v, Get(name));
  if (v->is_number_unsigned()) {
    if (v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return At(name).Error("integer out of range");
    }
    return static_cast<int64_t>(v->get<uint64_t>());
  }
  if (v->is_number_integer()) return v->get<int64_t>();
  return At(name).Error("expected an integer, got " + TypeName(*v));
}

Result<int64_t> ObjectReader::IntOr(const std::string& name, int64_t fallback) const {
  if (!Has(name)) {
    seen_.push_back(name);
    return fallback;
  }
  return Int(name);
}

Result<double> ObjectReader::Number(const std::string& name) const {
  SSDTRAIN_ASSIGN_OR_RETURN(const nlohmann::json* v, Get(name));
  if (!v->is_number()) return At(name).Error("expected a number, got " + TypeName(*v));
  return v->get<double>();
}

Result<double> ObjectReader::NumberOr(const std::string& name, double fallback) const {
  if (!Has(name)) {
    seen_.push_back(name);
    return fallback;
  }
  return Number(name);
}

Result<bool> ObjectReader::Bool(const std::string& name) const {
  SSDTRAIN_ASSIGN_OR_RETURN(const nlohmann::json* v, Get(name));
  if (!v->is_boolean()) return At(name).Error("expected true or false, got " + TypeName(*v));
  return v->get<bool>();
}

Result<bool> ObjectReader::BoolOr(const std::string& name, bool fallback) const {
  if (!Has(name)) {
    seen_.push_back(name);
    return fallback;
  }
  return Bool(name);
}

Result<std::string> ObjectReader::String(const std::string& name) const {
  SSDTRAIN_ASSIGN_OR_RETURN(const nlohmann::json* v, Get(name));
  if (!v->is_string()) return At(name).Error("expected a string, got " + TypeName(*v));
  return v->get<std::string>();
}

Result<std::string> ObjectReader::StringOr(const std::string& name,
                                           const std::string& fallback) const {
  if (!Has(name)) {
    seen_.push_back(name);
    return fallback;
  }
  return String(name);
}

Result<double> ObjectReader::Number(const std::string& name, Sign sign) const {
  SSDTRAIN_ASSIGN_OR_RETURN(const double x, Number(name));
  const std::string got = ", got " + j_->at(name).dump();
  if (!std::isfinite(x)) return At(name).Error("expected a finite number" + got);
  if (sign == Sign::kPositive && !(x > 0)) return At(name).Error("must be > 0" + got);
  if (sign == Sign::kNonNegative && x < 0) return At(name).Error("must be >= 0" + got);
  return x;
}

Result<double> ObjectReader::NumberOr(const std::string& name, double fallback, Sign sign) const {
  if (!Has(name)) {
    seen_.push_back(name);
    return fallback;
  }
  return Number(name, sign);
}

Result<int64_t> ObjectReader::IntIn(const std::string& name, int64_t min, int64_t max) const {
  SSDTRAIN_ASSIGN_OR_RETURN(const int64_t x, Int(name));
  const std::string got = ", got " + j_->at(name).dump();
  if (x < min) return At(name).Error("must be >= " + std::to_string(min) + got);
  if (x > max) return At(name).Error("must be <= " + std::to_string(max) + got);
  return x;
}

Result<int64_t> ObjectReader::IntInOr(const std::string& name, int64_t fallback, int64_t min,
                                      int64_t max) const {
  if (!Has(name)) {
    seen_.push_back(name);
    return fallback;
  }
  return IntIn(name, min, max);
}

Result<ObjectReader> ObjectReader::Object(const std::string& name) const {
  if (j_->find(name) == j_->end()) {
    seen_.push_back(name);
    return At(name).Error("missing (expected an object)");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(const nlohmann::json* v, Get(name));
  return Make(*v, At(name));
}

Result<ObjectReader> ObjectReader::ObjectOrEmpty(const std::string& name) const {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  if (!Has(name)) {
    seen_.push_back(name);
    return ObjectReader(&kEmpty, At(name));
  }
  return Object(name);
}

Result<std::vector<int64_t>> ObjectReader::IntArray(const std::string& name) const {
  SSDTRAIN_ASSIGN_OR_RETURN(const nlohmann::json* v, Get(name));
  if (!v->is_array()) return At(name).Error("expected an array of integers, got " + TypeName(*v));
  std::vector<int64_t> out;
  out.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    const nlohmann::json& e = (*v)[i];
    if (!e.is_number_integer()) {
      return At(name).Index(i).Error("expected an integer, got " + TypeName(e));
    }
    out.push_back(e.get<int64_t>());
  }
  return out;
}

Result<std::optional<int64_t>> ObjectReader::OptionalInt(const std::string& name) const {
  seen_.push_back(name);
  auto it = j_->find(name);
  if (it == j_->end() || it->is_null()) return std::optional<int64_t>();
  if (!it->is_number_integer()) {
    return At(name).Error("expected an integer or null, got " + TypeName(*it));
  }
  return std::optional<int64_t>(it->get<int64_t>());
}

Status ObjectReader::CheckNoUnknown() const {
  for (auto it = j_->begin(); it != j_->end(); ++it) {
    if (std::find(seen_.begin(), seen_.end(), it.key()) == seen_.end()) {
      return at_.Field(it.key()).Error("unknown field");
    }
  }
  return Status::Ok();
}

}  // namespace ssdtrain::traces::detail

// Enum <-> name tables for the formats' string-valued fields: one table per
// enum, looked up both ways. Tables are tiny, so a linear scan is the lookup.
#pragma once

#include <array>
#include <optional>
#include <string_view>
#include <utility>

namespace ssdtrain::traces::detail {

template <typename E, size_t N>
using NameTable = std::array<std::pair<E, std::string_view>, N>;

// The table's name for `v`, or "?" for a value the table lacks.
template <typename E, size_t N>
std::string_view NameOf(const NameTable<E, N>& table, E v) {
  for (const auto& [value, name] : table) {
    if (value == v) return name;
  }
  return "?";
}

template <typename E, size_t N>
std::optional<E> ParseName(const NameTable<E, N>& table, std::string_view s) {
  for (const auto& [value, name] : table) {
    if (name == s) return value;
  }
  return std::nullopt;
}

}  // namespace ssdtrain::traces::detail

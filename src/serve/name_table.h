// An enum's names for flags and startup lines: a table of {name, value} rows, where a value's
// first row gives its name and later rows are aliases accepted on input.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tf::serve {

template <typename E, size_t N>
using NameTable = std::pair<const char*, E>[N];

template <typename E, size_t N>
std::optional<E> value_named(const NameTable<E, N>& table, std::string_view name) {
  for (const auto& [n, v] : table)
    if (name == n) return v;
  return std::nullopt;
}

template <typename E, size_t N>
std::vector<std::string> names_of(const NameTable<E, N>& table) {
  std::vector<std::string> names;
  for (const auto& [n, v] : table) names.emplace_back(n);
  return names;
}

template <typename E, size_t N>
const char* name_of(const NameTable<E, N>& table, E value) {
  for (const auto& [n, v] : table)
    if (v == value) return n;
  return table[0].first;
}

}  // namespace tf::serve

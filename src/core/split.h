// Splitting a flag's comma-separated list ("q8_0,q4_0", "wanda,flap"), and reading integers
// out of flags and keys.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tf {

// The items of `s` between `sep`s, in order, empty ones left out: "a,,b," gives {"a", "b"},
// "" gives {}. No trimming: " a" stays " a".
std::vector<std::string> split_list(std::string_view s, char sep = ',');

// The whole of `s` as a decimal integer in [min, max]; nullopt on anything else ("4x", "+4",
// " 4", "", out of range).
std::optional<int64_t> parse_int(std::string_view s, int64_t min = INT64_MIN, int64_t max = INT64_MAX);

// A flag's comma-separated list of integers in [min, max]: "1,2,4" gives {1, 2, 4}. Throws
// tf::Error naming `flag` and the item on anything else ("4x", "+4", " 4", out of range), and on
// a list with no items.
std::vector<int64_t> parse_int_list(std::string_view s, std::string_view flag, int64_t min,
                                    int64_t max = INT64_MAX);

}  // namespace tf

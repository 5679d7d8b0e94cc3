// Splitting a flag's comma-separated list ("q8_0,q4_0", "wanda,flap").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tf {

// The items of `s` between `sep`s, in order, empty ones left out: "a,,b," gives {"a", "b"},
// "" gives {}. No trimming: " a" stays " a".
std::vector<std::string> split_list(std::string_view s, char sep = ',');

}  // namespace tf

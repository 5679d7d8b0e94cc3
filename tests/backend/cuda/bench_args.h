// Command-line lists of the device micro-benchmarks (bench_quant_gemm, bench_decode_attention).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/split.h"

namespace tf {

// A comma-separated list of integers, each at least `min`: "1,2,4" gives {1, 2, 4}. Throws,
// naming `flag` and the item, on anything else.
inline std::vector<int64_t> parse_counts(const std::string& s, const char* flag, int64_t min) {
  std::vector<int64_t> v;
  for (const std::string& t : split_list(s)) {
    size_t used = 0;
    long long n = 0;
    try {
      n = std::stoll(t, &used);
    } catch (const std::logic_error&) {
    }
    if (used != t.size() || n < min)
      throw std::runtime_error(std::string(flag) + ": '" + t + "' is not an integer >= " + std::to_string(min));
    v.push_back(n);
  }
  return v;
}

}  // namespace tf

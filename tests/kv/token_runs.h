// Token id runs for the KV manager and scheduler tests: distinct runs share no prefix, so the
// prefix cache hits exactly where a test repeats one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

namespace tf::test {

// n tokens starting at `first`: distinct runs for distinct `first`.
inline std::vector<int32_t> toks(int32_t n, int32_t first) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

inline std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The first n tokens of v.
inline std::vector<int32_t> head(const std::vector<int32_t>& v, size_t n) {
  return {v.begin(), v.begin() + std::ptrdiff_t(n)};
}

}  // namespace tf::test

#include "bench/bench_util.h"

#include <algorithm>

namespace tf::bench {

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size() - 1) + 0.5))];
}

std::vector<int32_t> random_prompt(Rng& rng, int64_t n_vocab, int32_t len) {
  std::vector<int32_t> ids;
  ids.reserve(size_t(len));
  for (int32_t i = 0; i < len; ++i) ids.push_back(int32_t(16 + rng.next_u64() % uint64_t(n_vocab - 16)));
  return ids;
}

}  // namespace tf::bench

#include "prune/importance.h"

#include <cmath>

#include "core/error.h"

namespace tf {

std::string_view prune_score_name(PruneScore s) { return s == PruneScore::Wanda ? "wanda" : "flap"; }

PruneScore parse_prune_score(std::string_view name, std::string_view flag) {
  if (name == "wanda") return PruneScore::Wanda;
  if (name == "flap") return PruneScore::Flap;
  fail("{}: unknown score '{}' (expected wanda or flap)", flag, name);
}

std::vector<double> column_scores(PruneScore s, const float* w, int64_t m, int64_t k, const float* x, int64_t n) {
  TF_ASSERT(n > 0, "column_scores: no calibration rows");
  // Per column: sum and sum of squares of the input; per column: |W| sum and W^2 sum.
  std::vector<double> xs(size_t(k), 0.0), xss(size_t(k), 0.0), wa(size_t(k), 0.0), wss(size_t(k), 0.0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const double v = x[r * k + j];
      xs[size_t(j)] += v;
      xss[size_t(j)] += v * v;
    }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < k; ++j) {
      const double v = w[i * k + j];
      wa[size_t(j)] += std::fabs(v);
      wss[size_t(j)] += v * v;
    }
  std::vector<double> out(static_cast<size_t>(k));
  for (size_t j = 0; j < size_t(k); ++j) {
    if (s == PruneScore::Wanda) {
      out[j] = wa[j] * std::sqrt(xss[j]);
    } else {
      const double mean = xs[j] / double(n);
      const double var = std::max(0.0, xss[j] / double(n) - mean * mean);
      out[j] = var * wss[j];
    }
  }
  return out;
}

std::vector<double> group_sums(const std::vector<double>& cols, int64_t group) {
  TF_ASSERT(group > 0 && int64_t(cols.size()) % group == 0, "group_sums: {} columns in groups of {}", cols.size(), group);
  std::vector<double> out(cols.size() / size_t(group), 0.0);
  for (size_t j = 0; j < cols.size(); ++j) out[j / size_t(group)] += cols[j];
  return out;
}

}  // namespace tf

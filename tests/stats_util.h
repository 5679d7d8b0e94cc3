// Statistics for tests that check sampled distributions: the chi-square survival function and
// a goodness-of-fit statistic that pools sparse cells.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace tf::test {

// Regularised upper incomplete gamma Q(a, x) (Numerical Recipes 6.2: series below a + 1,
// Lentz's continued fraction above).
inline double gamma_q(double a, double x) {
  if (x <= 0.0) return 1.0;
  const double log_prefactor = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1.0) {
    double ap = a, term = 1.0 / a, sum = term;
    for (int n = 0; n < 10000 && std::abs(term) > std::abs(sum) * 1e-16; ++n) {
      ap += 1.0;
      term *= x / ap;
      sum += term;
    }
    return 1.0 - sum * std::exp(log_prefactor);
  }
  const double tiny = 1e-300;
  double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::abs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1.0) < 1e-16) break;
  }
  return std::exp(log_prefactor) * h;
}

// P(X >= x) for X ~ chi-square with df degrees of freedom.
inline double chi_square_survival(double x, int df) { return gamma_q(df / 2.0, x / 2.0); }

// Pearson's goodness of fit of `counts` (n draws) to `probs`: cells expected fewer than 5
// times are pooled into one (dropped if the pool itself stays under 5), and a count in a
// cell of probability 0 makes the fit fail outright (p = 0). Returns the p-value.
inline double chi_square_fit(const std::vector<int64_t>& counts, const std::vector<double>& probs) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  double stat = 0.0, pooled_expected = 0.0;
  int64_t pooled_count = 0;
  int df = -1;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = probs[i] * double(n);
    if (probs[i] == 0.0 && counts[i] > 0) return 0.0;
    if (e < 5.0) {
      pooled_expected += e;
      pooled_count += counts[i];
      continue;
    }
    stat += (double(counts[i]) - e) * (double(counts[i]) - e) / e;
    ++df;
  }
  if (pooled_expected >= 5.0) {
    stat += (double(pooled_count) - pooled_expected) * (double(pooled_count) - pooled_expected) / pooled_expected;
    ++df;
  }
  return df > 0 ? chi_square_survival(stat, df) : 1.0;
}

}  // namespace tf::test

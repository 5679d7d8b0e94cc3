// Statistical check of Sampler::sample: empirical histograms of 200000 seeded draws against
// the distribution computed here from the definition (tests/sample/sampling_reference.h), by
// a chi-square goodness-of-fit test at significance 0.001.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "sample/sampler.h"
#include "sampling_reference.h"
#include "stats_util.h"

namespace tf {
namespace {

using test::chi_square_survival;

TEST(SampleChiSquareHelper, MatchesTabulatedQuantiles) {
  // 0.999 quantiles from standard tables.
  const struct { int df; double q; } table[] = {
      {1, 10.828}, {2, 13.816}, {4, 18.467}, {10, 29.588}, {20, 45.315}, {30, 59.703}};
  for (const auto& t : table) {
    EXPECT_NEAR(chi_square_survival(t.q, t.df), 0.001, 0.00002) << "df " << t.df;
  }
  EXPECT_NEAR(chi_square_survival(4.0, 4), std::exp(-2.0) * 3.0, 1e-12);  // closed form, df 4
}

std::vector<float> random_logits(size_t n, uint64_t seed, double scale) {
  std::mt19937_64 gen(seed);
  std::vector<float> logits(n);
  for (float& l : logits) {  // uniform in [-scale, scale) from raw 53-bit outputs
    l = static_cast<float>(scale * (2.0 * static_cast<double>(gen() >> 11) * 0x1.0p-53 - 1.0));
  }
  return logits;
}

struct Case {
  const char* name;
  SamplingParams params;
  std::vector<int32_t> history;
  bool truncates;  // some tokens must be dropped
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class SampleStats : public testing::TestWithParam<Case> {};

TEST_P(SampleStats, HistogramMatchesDefinition) {
  const Case& c = GetParam();
  const size_t n_vocab = 50;
  const int n_draws = 200000;
  const std::vector<float> logits = random_logits(n_vocab, 2024, 4.0);
  const std::vector<double> expected = test::reference_distribution(logits, c.history, c.params);

  size_t n_kept = 0;
  for (double p : expected) n_kept += p > 0.0;
  if (c.truncates) {
    EXPECT_GT(n_kept, 1u);
    EXPECT_LT(n_kept, n_vocab);
  }

  // distribution() must be the same distribution.
  Sampler sampler(c.params);
  const std::vector<float> d = sampler.distribution(logits, c.history);
  for (size_t i = 0; i < n_vocab; ++i) {
    EXPECT_NEAR(d[i], expected[i], 1e-6) << "id " << i;
    EXPECT_EQ(d[i] > 0.0f, expected[i] > 0.0) << "id " << i;
  }

  std::vector<int64_t> counts(n_vocab, 0);
  for (int i = 0; i < n_draws; ++i) {
    std::vector<float> row = logits;  // sample() penalises in place
    const int32_t id = sampler.sample(row, c.history);
    ASSERT_GE(id, 0);
    ASSERT_LT(static_cast<size_t>(id), n_vocab);
    ++counts[static_cast<size_t>(id)];
  }

  // Tokens outside the kept set are never drawn.
  for (size_t i = 0; i < n_vocab; ++i) {
    if (expected[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "dropped token " << i << " was drawn";
    }
  }

  // Bins: each kept token with expected count >= 5 alone; the smallest ones pooled together
  // until the pool's expected count reaches 5.
  std::vector<size_t> kept;
  for (size_t i = 0; i < n_vocab; ++i) {
    if (expected[i] > 0.0) kept.push_back(i);
  }
  std::sort(kept.begin(), kept.end(), [&](size_t a, size_t b) { return expected[a] < expected[b]; });
  std::vector<std::pair<double, double>> bins;  // (expected count, observed count)
  double pool_e = 0.0, pool_o = 0.0;
  for (size_t i : kept) {
    const double e = expected[i] * n_draws;
    if (e < 5.0 || pool_e < 5.0) {
      pool_e += e;
      pool_o += static_cast<double>(counts[i]);
    } else {
      bins.push_back({e, static_cast<double>(counts[i])});
    }
  }
  bins.push_back({pool_e, pool_o});
  double chi2 = 0.0;
  for (const auto& [e, o] : bins) chi2 += (o - e) * (o - e) / e;
  const int df = static_cast<int>(bins.size()) - 1;
  ASSERT_GE(df, 1);
  const double p_value = chi_square_survival(chi2, df);
  std::printf("%s: kept %zu, chi2 %.2f, df %d, p %.3f\n", c.name, n_kept, chi2, df, p_value);
  EXPECT_GT(p_value, 0.001) << "chi2 " << chi2 << " df " << df;
}

INSTANTIATE_TEST_SUITE_P(
    Configs, SampleStats,
    testing::Values(
        Case{"temperature_0.7", {.temperature = 0.7f, .seed = 1}, {}, false},
        Case{"top_k_5", {.temperature = 1.0f, .top_k = 5, .seed = 2}, {}, true},
        Case{"top_p_0.9", {.temperature = 1.0f, .top_p = 0.9f, .seed = 3}, {}, true},
        Case{"min_p_0.05", {.temperature = 1.0f, .min_p = 0.05f, .seed = 4}, {}, true},
        Case{"combined",
             {.temperature = 0.8f, .top_k = 20, .top_p = 0.9f, .min_p = 0.05f,
              .repetition_penalty = 1.3f, .seed = 5},
             {3, 7, 7, 11, 42},
             true}),
    [](const testing::TestParamInfo<Case>& info) {
      std::string name = info.param.name;
      std::replace(name.begin(), name.end(), '.', '_');
      return name;
    });

}  // namespace
}  // namespace tf

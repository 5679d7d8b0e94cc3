// Rng, greedy, repetition penalty, seeding, hand-computed distributions, validation.
#include "sample/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <random>
#include <set>
#include <string>

#include "core/error.h"
#include "sampling_reference.h"

namespace tf {
namespace {

// ---- Rng -------------------------------------------------------------------------------------

TEST(SampleRng, MatchesReferenceValues) {
  // From an independent Python implementation of SplitMix64 seeding + xoshiro256**.
  Rng r0(0);
  EXPECT_EQ(r0.next_u64(), 0x99ec5f36cb75f2b4ull);
  EXPECT_EQ(r0.next_u64(), 0xbf6e1f784956452aull);
  EXPECT_EQ(r0.next_u64(), 0x1a5f849d4933e6e0ull);
  EXPECT_EQ(r0.next_u64(), 0x6aa594f1262d2d2cull);
  Rng r42(42);
  EXPECT_EQ(r42.next_u64(), 0x15780b2e0c2ec716ull);
  EXPECT_EQ(r42.next_u64(), 0x6104d9866d113a7eull);
  Rng u42(42);
  EXPECT_EQ(u42.uniform(), static_cast<double>(0x15780b2e0c2ec716ull >> 11) * 0x1.0p-53);
  EXPECT_NEAR(u42.uniform(), 0.3789802506626686, 1e-16);
}

TEST(SampleRng, SameSeedSameSequence) {
  Rng a(1234), b(1234);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(a.next_u64(), b.next_u64()) << "draw " << i;
}

TEST(SampleRng, DifferentSeedsDiffer) {
  Rng a(1), b(2);
  int n_equal = 0;
  for (int i = 0; i < 1000; ++i) n_equal += a.next_u64() == b.next_u64();
  EXPECT_EQ(n_equal, 0);
}

TEST(SampleRng, UniformInUnitIntervalWithMeanHalf) {
  Rng r(7);
  const int n = 100000;
  double sum = 0.0, sum_sq = 0.0;
  double lo = 1.0, hi = 0.0;
  for (int i = 0; i < n; ++i) {
    const double u = r.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
    sum_sq += u * u;
  }
  // Standard error of the mean is sqrt(1/12/n) ~ 0.0009: allow ~5.5 sigma.
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_NEAR(sum_sq / n - (sum / n) * (sum / n), 1.0 / 12.0, 0.002);
  EXPECT_LT(lo, 0.001);
  EXPECT_GT(hi, 0.999);
}

// ---- greedy and repetition penalty -------------------------------------------------------------

TEST(SampleGreedy, ArgmaxTiesGoToLowestId) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f, 3.0f};
  EXPECT_EQ(argmax(logits), 1);
  EXPECT_EQ(argmax(std::vector<float>{-INFINITY, -5.0f, -5.0f}), 1);
  EXPECT_EQ(argmax(std::vector<float>{NAN, 1.0f, 2.0f}), 2);
  EXPECT_EQ(argmax(std::vector<float>{0.5f}), 0);
}

TEST(SampleGreedy, SamplerIsArgmaxAndDistributionIsOneHot) {
  Sampler s(SamplingParams{.temperature = 0.0f, .top_k = 2, .top_p = 0.5f, .seed = 9});
  std::vector<float> logits = {0.1f, 2.5f, -1.0f, 2.5f, 2.4f};
  const std::vector<float> original = logits;
  for (int i = 0; i < 20; ++i) {
    std::vector<float> row = original;
    EXPECT_EQ(s.sample(row, {}), 1);
  }
  const std::vector<float> d = s.distribution(logits, {});
  EXPECT_EQ(d, (std::vector<float>{0.0f, 1.0f, 0.0f, 0.0f, 0.0f}));
  EXPECT_EQ(logits, original);  // distribution does not modify its input
}

TEST(SampleRepetitionPenalty, MatchesFormulaOncePerDistinctId) {
  std::vector<float> logits = {2.0f, 1.5f, -1.0f, 0.5f, 0.0f};
  const std::vector<int32_t> history = {0, 0, 2, 0, 4};
  apply_repetition_penalty(logits, history, 2.0f);
  // 0: positive, divided once (not three times); 2: negative, multiplied; 4: zero stays zero.
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 1.5f, -2.0f, 0.5f, 0.0f}));

  std::vector<float> odd = {3.0f, -0.7f, 0.9f};
  apply_repetition_penalty(odd, std::vector<int32_t>{1, 2}, 1.3f);
  EXPECT_EQ(odd[0], 3.0f);
  EXPECT_EQ(odd[1], -0.7f * 1.3f);
  EXPECT_EQ(odd[2], 0.9f / 1.3f);

  // A penalty below 1 rewards repeats.
  std::vector<float> reward = {1.0f, 2.0f};
  apply_repetition_penalty(reward, std::vector<int32_t>{0}, 0.25f);
  EXPECT_EQ(reward, (std::vector<float>{4.0f, 2.0f}));
}

TEST(SampleRepetitionPenalty, ChangesGreedyChoice) {
  const std::vector<float> original = {2.0f, 1.5f, -1.0f, 0.5f};
  const std::vector<int32_t> history = {0, 0, 2};
  Sampler plain(SamplingParams{.temperature = 0.0f});
  Sampler penalised(SamplingParams{.temperature = 0.0f, .repetition_penalty = 2.0f});
  std::vector<float> a = original, b = original;
  EXPECT_EQ(plain.sample(a, history), 0);
  EXPECT_EQ(penalised.sample(b, history), 1);  // 2.0 / 2 = 1.0 < 1.5
  EXPECT_EQ(b, (std::vector<float>{1.0f, 1.5f, -2.0f, 0.5f}));  // applied in place
}

TEST(SampleRepetitionPenalty, AppliesBeforeTemperatureInDistribution) {
  const std::vector<float> logits = {2.0f, 1.5f, -1.0f, 0.5f};
  Sampler s(SamplingParams{.temperature = 0.5f, .repetition_penalty = 2.0f});
  const std::vector<float> d = s.distribution(logits, std::vector<int32_t>{0, 0, 2});
  // softmax({1.0, 1.5, -2.0, 0.5} / 0.5)
  const double e[4] = {std::exp(2.0), std::exp(3.0), std::exp(-4.0), std::exp(1.0)};
  const double sum = e[0] + e[1] + e[2] + e[3];
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(d[i], e[i] / sum, 1e-6) << "id " << i;
}

// OpenAI's presence and frequency penalties count only the generated tokens (history past
// n_prompt), after the repetition penalty has run over the whole history.
TEST(SamplePresenceFrequency, MatchFormulaOverGeneratedTokens) {
  const std::vector<float> original = {1.0f, 2.0f, -1.0f, 0.5f, 3.0f};
  const std::vector<int32_t> history = {0, 4, /* generated: */ 3, 3, 2, 3};
  std::vector<float> l = original;
  adjust_logits(l, history, 2, {.presence_penalty = 0.5f, .frequency_penalty = 0.25f});
  // 0 and 4 are only in the prompt; 3 three times: 0.5 - 0.75 - 0.5; 2 once: -1 - 0.25 - 0.5.
  EXPECT_EQ(l, (std::vector<float>{1.0f, 2.0f, -1.75f, -0.75f, 3.0f}));

  l = original;
  adjust_logits(l, history, 2, {.repetition_penalty = 2.0f, .presence_penalty = 0.5f, .frequency_penalty = 0.25f});
  EXPECT_EQ(l, (std::vector<float>{0.5f, 2.0f, -2.75f, -1.0f, 1.5f}));

  // Negative values reward repeats; a history no longer than the prompt changes nothing.
  l = original;
  adjust_logits(l, history, 2, {.presence_penalty = -1.0f});
  EXPECT_EQ(l, (std::vector<float>{1.0f, 2.0f, 0.0f, 1.5f, 3.0f}));
  l = original;
  adjust_logits(l, history, history.size(), {.presence_penalty = 2.0f, .frequency_penalty = 2.0f});
  EXPECT_EQ(l, original);
}

TEST(SampleLogitBias, AddedBeforeThePenalties) {
  std::vector<float> l = {1.0f, 2.0f, -1.0f};
  adjust_logits(l, std::vector<int32_t>{0, 2}, 1, {.repetition_penalty = 2.0f, .logit_bias = {{0, 3.0f}, {1, -100.0f}}});
  // 0: (1 + 3) / 2 (prompt, repetition only); 1: biased, not in history; 2: -1 * 2 (generated, no
  // presence or frequency penalty set).
  EXPECT_EQ(l, (std::vector<float>{2.0f, -98.0f, -2.0f}));
  std::vector<float> g = {1.0f, 2.0f, -1.0f};
  EXPECT_EQ(Sampler({.temperature = 0.0f, .logit_bias = {{2, 3.5f}}}).sample(g, {}), 2);
}

TEST(SamplePresenceFrequency, SamplerSkipsThePrompt) {
  const std::vector<float> original = {2.0f, 1.5f, -1.0f};
  const std::vector<int32_t> history = {0, 0, 1};  // prompt {0, 0}, generated {1}
  std::vector<float> a = original, b = original;
  // Counted over the prompt too, id 0 would fall to 2 - 2 - 1 = -1 and id 1 win.
  EXPECT_EQ(Sampler({.temperature = 0.0f, .presence_penalty = 1.0f, .frequency_penalty = 1.0f}, 2).sample(a, history), 0);
  EXPECT_EQ(a, (std::vector<float>{2.0f, -0.5f, -1.0f}));
  EXPECT_EQ(Sampler({.temperature = 0.0f, .presence_penalty = 1.0f, .frequency_penalty = 1.0f}, 0).sample(b, history), 1);
  const std::vector<float> d =
      Sampler({.temperature = 1.0f, .frequency_penalty = 1.5f}, 2).distribution(original, history);
  const double e[3] = {std::exp(2.0), std::exp(0.0), std::exp(-1.0)};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(d[size_t(i)], e[i] / (e[0] + e[1] + e[2]), 1e-6) << "id " << i;
}

// ---- seeding ---------------------------------------------------------------------------------

std::vector<float> random_logits(size_t n, uint64_t seed, double scale) {
  std::mt19937_64 gen(seed);
  std::vector<float> logits(n);
  for (size_t i = 0; i < n; i += 2) {  // Box-Muller on 53-bit uniforms from raw outputs
    const double u1 = (static_cast<double>(gen() >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(gen() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    logits[i] = static_cast<float>(scale * r * std::cos(2.0 * std::numbers::pi * u2));
    if (i + 1 < n) logits[i + 1] = static_cast<float>(scale * r * std::sin(2.0 * std::numbers::pi * u2));
  }
  return logits;
}

std::vector<int32_t> draw_sequence(const SamplingParams& params, const std::vector<float>& logits,
                                   int n) {
  Sampler s(params);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    std::vector<float> row = logits;
    out.push_back(s.sample(row, {}));
  }
  return out;
}

TEST(SampleSeeding, SameSeedSameTokensDifferentSeedDifferent) {
  const std::vector<float> logits = random_logits(50, 5, 1.0);
  const SamplingParams p{.temperature = 1.0f, .top_k = 40, .top_p = 0.95f, .seed = 42};
  SamplingParams q = p;
  q.seed = 43;
  const std::vector<int32_t> a = draw_sequence(p, logits, 200);
  const std::vector<int32_t> b = draw_sequence(p, logits, 200);
  const std::vector<int32_t> c = draw_sequence(q, logits, 200);
  EXPECT_EQ(a, b);
  int n_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) n_diff += a[i] != c[i];
  EXPECT_GT(n_diff, 100);  // ~50 roughly equiprobable tokens: almost every position differs
  std::set<int32_t> distinct(a.begin(), a.end());
  EXPECT_GT(distinct.size(), 20u);  // it really samples
}

// sample() is the inverse CDF of distribution() in id order at one uniform from Rng(seed):
// replay the uniforms here and check every token (skipping draws within 1e-6 of a boundary,
// where the float probabilities cannot decide).
TEST(SampleSeeding, SampleIsInverseCdfOfDistributionInIdOrder) {
  const std::vector<float> logits = random_logits(3000, 8, 2.0);
  const std::vector<int32_t> history = {1, 2, 3, 2999};
  const SamplingParams configs[] = {
      {.temperature = 1.0f, .seed = 1},
      {.temperature = 0.6f, .top_k = 50, .seed = 2},
      {.temperature = 1.0f, .top_p = 0.8f, .seed = 3},
      {.temperature = 1.2f, .min_p = 0.05f, .seed = 4},
      {.temperature = 0.9f, .top_k = 1500, .top_p = 0.9f, .min_p = 0.01f,
       .repetition_penalty = 1.5f, .seed = 5},
  };
  for (const SamplingParams& p : configs) {
    Sampler s(p);
    const std::vector<float> d = s.distribution(logits, history);
    std::vector<double> cdf(d.size());
    double cum = 0.0;
    for (size_t i = 0; i < d.size(); ++i) cdf[i] = cum += d[i];
    Rng rng(p.seed);
    int n_checked = 0;
    for (int it = 0; it < 2000; ++it) {
      std::vector<float> row = logits;
      const int32_t got = s.sample(row, history);
      const double u = rng.uniform() * cum;
      const size_t want = static_cast<size_t>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
      const double lo = want == 0 ? 0.0 : cdf[want - 1];
      if (want >= cdf.size() || u - lo < 1e-6 || cdf[want] - u < 1e-6) continue;
      ASSERT_EQ(got, static_cast<int32_t>(want)) << "seed " << p.seed << " draw " << it;
      ++n_checked;
    }
    EXPECT_GT(n_checked, 1980) << "seed " << p.seed;
  }
}

// ---- hand-computed distributions ---------------------------------------------------------------

// Logits log(w) for w a permutation of 1..10, so softmax gives w / 55 and temperature 0.5 gives
// w^2 / 385.
constexpr double kW[10] = {3, 10, 1, 7, 5, 2, 9, 4, 8, 6};
std::vector<float> weight_logits() {
  std::vector<float> logits;
  for (double w : kW) logits.push_back(static_cast<float>(std::log(w)));
  return logits;
}

void expect_distribution(const SamplingParams& params, const std::vector<double>& expected) {
  const std::vector<float> d = Sampler(params).distribution(weight_logits(), {});
  ASSERT_EQ(d.size(), expected.size());
  for (size_t i = 0; i < d.size(); ++i) {
    EXPECT_NEAR(d[i], expected[i], 1e-6) << "id " << i;
    EXPECT_EQ(d[i] == 0.0f, expected[i] == 0.0) << "id " << i << " kept/dropped wrongly";
  }
}

TEST(SampleDistribution, TemperatureOne) {
  std::vector<double> e;
  for (double w : kW) e.push_back(w / 55.0);
  expect_distribution({.temperature = 1.0f}, e);
}

TEST(SampleDistribution, TemperatureScaling) {
  std::vector<double> e;
  for (double w : kW) e.push_back(w * w / 385.0);
  expect_distribution({.temperature = 0.5f}, e);
  e.clear();
  double sum = 0.0;
  for (double w : kW) sum += std::pow(w, 0.5);
  for (double w : kW) e.push_back(std::pow(w, 0.5) / sum);
  expect_distribution({.temperature = 2.0f}, e);
}

TEST(SampleDistribution, TopKKeepsExactlyTheKLargest) {
  // w = 10, 9, 8 are ids 1, 6, 8.
  std::vector<double> e(10, 0.0);
  e[1] = 10.0 / 27;
  e[6] = 9.0 / 27;
  e[8] = 8.0 / 27;
  expect_distribution({.temperature = 1.0f, .top_k = 3}, e);
}

TEST(SampleDistribution, TopKTiesAtTheBoundaryKeepLowestIds) {
  const std::vector<float> logits = {1.0f, 2.0f, 2.0f, 2.0f, 0.0f};
  const std::vector<float> d = Sampler({.temperature = 1.0f, .top_k = 2}).distribution(logits, {});
  EXPECT_EQ(d, (std::vector<float>{0.0f, 0.5f, 0.5f, 0.0f, 0.0f}));
  // top_k >= n_vocab is off.
  const std::vector<float> all = Sampler({.top_k = 5}).distribution(logits, {});
  for (float p : all) EXPECT_GT(p, 0.0f);
}

TEST(SampleDistribution, TopKTieEvictsHighestIdAmongTheWorst) {
  // k = 2: id 3 (3.0), and of the tied ids 0 and 1 (2.0) the lower one, although the tie is
  // with a token that is not the boundary's last.
  const std::vector<float> logits = {2.0f, 2.0f, 1.0f, 3.0f};
  const std::vector<float> d = Sampler({.temperature = 1.0f, .top_k = 2}).distribution(logits, {});
  const double e = std::exp(-1.0);
  EXPECT_NEAR(d[0], e / (1.0 + e), 1e-6);
  EXPECT_EQ(d[1], 0.0f);
  EXPECT_EQ(d[2], 0.0f);
  EXPECT_NEAR(d[3], 1.0 / (1.0 + e), 1e-6);
}

TEST(SampleDistribution, TopKTiesInLargeVocabulary) {
  // Every logit 0 except the last: top-k keeps that one and the lowest k - 1 ids, for small
  // and large k, in a vocabulary large enough for the sampled threshold.
  const size_t n = 20000;
  std::vector<float> logits(n, 0.0f);
  logits[n - 1] = 1.0f;
  for (int32_t k : {7, 1000, 5000, 19999}) {
    const std::vector<float> d = Sampler({.temperature = 1.0f, .top_k = k}).distribution(logits, {});
    const double mass = std::exp(1.0) + (k - 1);
    EXPECT_NEAR(d[n - 1], std::exp(1.0) / mass, 1e-6) << "k " << k;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (i < static_cast<size_t>(k - 1)) {
        ASSERT_NEAR(d[i], 1.0 / mass, 1e-6) << "k " << k << " id " << i;
      } else {
        ASSERT_EQ(d[i], 0.0f) << "k " << k << " id " << i;
      }
    }
  }
}

TEST(SampleDistribution, TopPKeepsShortestPrefixReachingP) {
  // Sorted w: 10 9 8 7 6 | 5 ...; cumulative 40/55 = 0.727 < 0.8 <= 45/55 = 0.818.
  std::vector<double> e(10, 0.0);
  for (size_t i = 0; i < 10; ++i) {
    if (kW[i] >= 5) e[i] = kW[i] / 45.0;
  }
  expect_distribution({.temperature = 1.0f, .top_p = 0.8f}, e);
  // A tiny top_p still keeps the most likely token.
  std::vector<double> one(10, 0.0);
  one[1] = 1.0;
  expect_distribution({.temperature = 1.0f, .top_p = 1e-6f}, one);
}

TEST(SampleDistribution, TopPTiesKeepLowestIdsAndReachingPIsEnough) {
  // Ten equal tokens: top_p 0.5 keeps exactly 5 (cumulative 0.5 >= 0.5), the lowest ids;
  // top_p 0.35 needs 4.
  const std::vector<float> logits(10, 0.0f);
  const std::vector<float> half = Sampler({.temperature = 1.0f, .top_p = 0.5f}).distribution(logits, {});
  const std::vector<float> most = Sampler({.temperature = 1.0f, .top_p = 0.35f}).distribution(logits, {});
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(half[i], i < 5 ? 0.2f : 0.0f) << "id " << i;
    EXPECT_EQ(most[i], i < 4 ? 0.25f : 0.0f) << "id " << i;
  }
}

TEST(SampleDistribution, MinPKeepsTokensAboveFractionOfMax) {
  // p >= 0.35 * p_max  <=>  w >= 3.5: w = 4..10, total 49.
  std::vector<double> e(10, 0.0);
  for (size_t i = 0; i < 10; ++i) {
    if (kW[i] >= 4) e[i] = kW[i] / 49.0;
  }
  expect_distribution({.temperature = 1.0f, .min_p = 0.35f}, e);
  // min_p = 1 keeps only the maximum.
  std::vector<double> one(10, 0.0);
  one[1] = 1.0;
  expect_distribution({.temperature = 1.0f, .min_p = 1.0f}, one);
}

TEST(SampleDistribution, MinPBoundary) {
  // p / p_max = 0.52 is kept and 0.48 dropped at min_p = 0.5.
  const std::vector<float> logits = {0.0f, std::log(0.52f), std::log(0.48f)};
  const std::vector<float> d = Sampler({.temperature = 1.0f, .min_p = 0.5f}).distribution(logits, {});
  EXPECT_NEAR(d[0], 1.0 / 1.52, 1e-6);
  EXPECT_NEAR(d[1], 0.52 / 1.52, 1e-6);
  EXPECT_EQ(d[2], 0.0f);
}

TEST(SampleDistribution, WeightsAreAccurateOverTheWholeRange) {
  // Two tokens {0, z}: p1 / p0 = exp(z), relative error well under 1e-6 for z down to -80.
  for (float z = -80.0f; z <= 0.0f; z += 0.37f) {
    const std::vector<float> logits = {0.0f, z};
    const std::vector<float> d = Sampler({.temperature = 1.0f}).distribution(logits, {});
    const double ratio = static_cast<double>(d[1]) / d[0];
    EXPECT_NEAR(ratio / std::exp(static_cast<double>(z)), 1.0, 1e-6) << "z " << z;
  }
  // Below float's normal range a token weighs nothing.
  const std::vector<float> far = {0.0f, -200.0f};
  EXPECT_EQ(Sampler({.temperature = 1.0f}).distribution(far, {})[1], 0.0f);
}

TEST(SampleDistribution, Combined) {
  // T = 0.5: weights w^2. top-k 5: 100 81 64 49 36 (sum 330). top-p 0.7 on those:
  // 100/330 = .303, 181/330 = .548, 245/330 = .742 >= 0.7 -> 100 81 64. min-p 0.7: keep
  // w^2 >= 70 -> 100 (id 1), 81 (id 6).
  std::vector<double> e(10, 0.0);
  e[1] = 100.0 / 181;
  e[6] = 81.0 / 181;
  expect_distribution({.temperature = 0.5f, .top_k = 5, .top_p = 0.7f, .min_p = 0.7f}, e);
}

TEST(SampleDistribution, MaskedTokensAreNeverDrawn) {
  const std::vector<float> logits = {-INFINITY, 0.0f, -INFINITY, 1.0f, -INFINITY};
  for (const SamplingParams& p : {SamplingParams{.seed = 1}, SamplingParams{.top_k = 4, .seed = 2},
                                  SamplingParams{.top_p = 0.999f, .seed = 3}}) {
    Sampler s(p);
    const std::vector<float> d = s.distribution(logits, {});
    EXPECT_NEAR(d[3], std::exp(1.0) / (1.0 + std::exp(1.0)), 1e-6);
    EXPECT_EQ(d[0] + d[2] + d[4], 0.0f);
    int counts[5] = {};
    for (int i = 0; i < 5000; ++i) {
      std::vector<float> row = logits;
      ++counts[s.sample(row, {})];
    }
    EXPECT_EQ(counts[0] + counts[2] + counts[4], 0);
    EXPECT_GT(counts[1], 1000);
  }
}

// ---- large vocabulary ------------------------------------------------------------------------

// A token the definition drops must have probability 0; one it keeps must have a positive
// probability unless it is below 1e-30 (weights under float's normal range count as 0).
bool dropped_mismatch(float got, double want) {
  return (want == 0.0 && got != 0.0f) || (want > 1e-30 && got == 0.0f);
}

TEST(SampleDistribution, LargeVocabularyMatchesReference) {
  const std::vector<float> logits = random_logits(128000, 11, 3.0);
  const std::vector<int32_t> history = {5, 17, 99999, 5, 127999};
  const SamplingParams configs[] = {
      {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.02f},
      {.temperature = 1.0f, .top_k = 2000},
      {.temperature = 0.7f, .top_p = 0.9f},  // top-p alone: long prefix
      {.temperature = 1.0f, .min_p = 0.1f, .repetition_penalty = 1.2f},
      {.temperature = 1.3f},
  };
  // Sorted logits: the worst order for a top-k heap, and a check of the sampled threshold.
  std::vector<float> sorted = logits;
  std::sort(sorted.begin(), sorted.end());
  const SamplingParams sorted_configs[] = {{.temperature = 1.0f, .top_k = 50},
                                           {.temperature = 0.5f, .top_k = 3000, .top_p = 0.5f}};
  for (const SamplingParams& p : sorted_configs) {
    const std::vector<float> d = Sampler(p).distribution(sorted, {});
    const std::vector<double> ref = test::reference_distribution(sorted, {}, p);
    for (size_t i = 0; i < d.size(); ++i) {
      ASSERT_NEAR(d[i], ref[i], 1e-6) << "sorted, top_k " << p.top_k << " id " << i;
      ASSERT_FALSE(dropped_mismatch(d[i], ref[i])) << "sorted, top_k " << p.top_k << " id " << i;
    }
  }

  // A row whose large entries sit exactly on top-k's sampling stride (128000 / 4096 -> 31):
  // the sampled threshold is too high for k = 5000 and top-k must fall back to the whole row.
  std::vector<float> strided = logits;
  for (size_t i = 0; i < strided.size(); ++i) {
    strided[i] = i % 31 == 0 ? 10.0f + 0.001f * static_cast<float>(i % 7) : logits[i] * 0.1f;
  }
  for (int32_t k : {100, 5000}) {
    const SamplingParams p{.temperature = 1.0f, .top_k = k};
    const std::vector<float> d = Sampler(p).distribution(strided, {});
    const std::vector<double> ref = test::reference_distribution(strided, {}, p);
    size_t n_kept = 0;
    for (size_t i = 0; i < d.size(); ++i) {
      ASSERT_NEAR(d[i], ref[i], 1e-6) << "strided, top_k " << k << " id " << i;
      ASSERT_FALSE(dropped_mismatch(d[i], ref[i])) << "strided, top_k " << k << " id " << i;
      n_kept += d[i] > 0.0f;
    }
    EXPECT_EQ(n_kept, static_cast<size_t>(k));
  }

  for (const SamplingParams& p : configs) {
    Sampler s(p);
    const std::vector<float> d = s.distribution(logits, history);
    const std::vector<double> ref = test::reference_distribution(logits, history, p);
    size_t n_kept = 0, n_mismatch = 0;
    double sum = 0.0;
    for (size_t i = 0; i < d.size(); ++i) {
      n_kept += d[i] > 0.0f;
      sum += d[i];
      if (std::abs(d[i] - ref[i]) > 1e-6 || dropped_mismatch(d[i], ref[i])) ++n_mismatch;
    }
    EXPECT_EQ(n_mismatch, 0u) << "top_k " << p.top_k << " top_p " << p.top_p;
    EXPECT_NEAR(sum, 1.0, 1e-4);

    // Time sample() (reported, not asserted: the machine is shared).
    const int n_iter = 100;
    std::vector<float> row;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n_iter; ++i) {
      row = logits;
      const int32_t id = s.sample(row, history);
      ASSERT_GT(d[static_cast<size_t>(id)], 0.0f);
    }
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    std::printf("n_vocab 128000 T %.1f top_k %d top_p %.2f min_p %.2f: kept %zu, %.0f us/sample\n",
                p.temperature, p.top_k, p.top_p, p.min_p, n_kept, us / n_iter);
  }
}

// ---- validation ------------------------------------------------------------------------------

void expect_rejected(const SamplingParams& p, const std::string& field) {
  try {
    validate(p);
    ADD_FAILURE() << "accepted bad " << field;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
  EXPECT_THROW(Sampler{p}, Error) << field;
}

TEST(SampleValidate, EachBadFieldThrowsNamingIt) {
  expect_rejected({.temperature = -0.1f}, "temperature");
  expect_rejected({.temperature = NAN}, "temperature");
  expect_rejected({.top_k = -1}, "top_k");
  expect_rejected({.top_p = 0.0f}, "top_p");
  expect_rejected({.top_p = 1.5f}, "top_p");
  expect_rejected({.top_p = NAN}, "top_p");
  expect_rejected({.min_p = -0.01f}, "min_p");
  expect_rejected({.min_p = 1.01f}, "min_p");
  expect_rejected({.repetition_penalty = 0.0f}, "repetition_penalty");
  expect_rejected({.repetition_penalty = -1.0f}, "repetition_penalty");
  expect_rejected({.presence_penalty = 2.5f}, "presence_penalty");
  expect_rejected({.presence_penalty = NAN}, "presence_penalty");
  expect_rejected({.frequency_penalty = -2.01f}, "frequency_penalty");
  expect_rejected({.frequency_penalty = INFINITY}, "frequency_penalty");
  expect_rejected({.logit_bias = {{3, 100.5f}}}, "logit_bias");
  expect_rejected({.logit_bias = {{3, NAN}}}, "logit_bias");
  expect_rejected({.logit_bias = {{-1, 1.0f}}}, "logit_bias");
}

TEST(SampleValidate, AcceptsBoundaryValues) {
  EXPECT_NO_THROW(validate({}));
  EXPECT_NO_THROW(validate({.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f}));
  EXPECT_NO_THROW(validate({.top_p = 1e-6f, .min_p = 1.0f, .repetition_penalty = 0.5f}));
  EXPECT_NO_THROW(validate({.presence_penalty = -2.0f, .frequency_penalty = 2.0f, .logit_bias = {{0, -100.0f}, {7, 100.0f}}}));
}

}  // namespace
}  // namespace tf

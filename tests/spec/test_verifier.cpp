// The verifier: greedy verification gives the greedy tokens; modified rejection sampling
// gives the target's distribution, checked by chi-square goodness of fit (significance 0.001,
// fixed seeds) on the joint distribution of the first 3 tokens of a synthetic context-
// dependent target p and draft q over 6 tokens, where about half the proposals are rejected.
// (Acceptance per proposal is 0.17 to 0.77 across the four cases.)
// The same test rejects two broken verifiers (resampling from p instead of the residual;
// keeping every proposal), so it has the power to see such errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "spec/verifier.h"
#include "stats_util.h"

namespace tf {
namespace {

constexpr int32_t kVocab = 6;
constexpr int32_t kOut = 3;  // tokens per trial: cells of the joint = kVocab^3

// A distribution over kVocab tokens that depends on the whole prefix: softmax of hashed
// logits. The draft sees the same logits plus its own hashed noise, so it agrees with the
// target in part.
std::vector<float> dist(const std::vector<int32_t>& prefix, bool draft) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (int32_t t : prefix) h = (h ^ uint64_t(t + 1)) * 0xbf58476d1ce4e5b9ull;
  std::vector<double> l(kVocab);
  double sum = 0;
  for (int32_t i = 0; i < kVocab; ++i) {
    uint64_t x = (h + uint64_t(i) * 0x94d049bb133111ebull) * 0xd6e8feb86659fd93ull;
    l[size_t(i)] = 3.0 * double(x >> 11) * 0x1.0p-53;
    if (draft) l[size_t(i)] += 2.5 * double((x * 0x2545f4914f6cdd1dull) >> 11) * 0x1.0p-53;
    sum += std::exp(l[size_t(i)]);
  }
  std::vector<float> p(kVocab);
  for (int32_t i = 0; i < kVocab; ++i) p[size_t(i)] = float(std::exp(l[size_t(i)]) / sum);
  if (!draft && prefix.size() == 1) p[size_t(prefix[0] % kVocab)] = 0.0f;  // a truncated token
  double s = 0;
  for (float x : p) s += x;
  for (float& x : p) x = float(x / s);
  return p;
}

// Exact probability of each kOut-token sequence under the target.
std::vector<double> exact_joint() {
  std::vector<double> out;
  for (int32_t c = 0; c < kVocab * kVocab * kVocab; ++c) {
    std::vector<int32_t> seq = {c / (kVocab * kVocab), c / kVocab % kVocab, c % kVocab};
    double pr = 1.0;
    for (int32_t i = 0; i < kOut; ++i)
      pr *= dist(std::vector<int32_t>(seq.begin(), seq.begin() + i), false)[size_t(seq[size_t(i)])];
    out.push_back(pr);
  }
  return out;
}

using Verify = std::function<VerifyResult(std::span<const int32_t>, const DistributionFn&, const DistributionFn&, Rng&)>;

// Speculative generation of kOut tokens with k proposals per step; returns counts per joint
// cell and the acceptance rate. point_mass: proposals are the draft's argmax (q = point mass).
std::vector<int64_t> run_trials(const Verify& verify, int32_t n_trials, int32_t k, bool point_mass, uint64_t seed,
                                double* acceptance = nullptr) {
  Rng rng(seed);
  std::vector<int64_t> counts(size_t(kVocab * kVocab * kVocab), 0);
  int64_t n_proposed = 0, n_accepted = 0;
  for (int32_t trial = 0; trial < n_trials; ++trial) {
    std::vector<int32_t> out;
    while (int32_t(out.size()) < kOut) {
      std::vector<int32_t> drafts;
      std::vector<std::vector<float>> qs;
      std::vector<int32_t> ctx = out;
      for (int32_t j = 0; j < k; ++j) {
        std::vector<float> q = dist(ctx, true);
        const int32_t d = point_mass ? int32_t(std::max_element(q.begin(), q.end()) - q.begin()) : draw_from(q, rng.uniform());
        drafts.push_back(d);
        qs.push_back(std::move(q));
        ctx.push_back(d);
      }
      std::vector<std::vector<float>> ps;
      for (int32_t i = 0; i <= k; ++i) {
        std::vector<int32_t> c = out;
        c.insert(c.end(), drafts.begin(), drafts.begin() + i);
        ps.push_back(dist(c, false));
      }
      DistributionFn q_fn;
      if (!point_mass) q_fn = [&](int32_t i) -> std::span<const float> { return qs[size_t(i)]; };
      const VerifyResult v = verify(drafts, [&](int32_t i) -> std::span<const float> { return ps[size_t(i)]; }, q_fn, rng);
      n_proposed += k;
      n_accepted += v.n_accepted;
      out.insert(out.end(), drafts.begin(), drafts.begin() + v.n_accepted);
      out.push_back(v.token);
    }
    ++counts[size_t((out[0] * kVocab + out[1]) * kVocab + out[2])];
  }
  if (acceptance) *acceptance = double(n_accepted) / double(n_proposed);
  return counts;
}

// Broken on purpose: on a rejection, draws from p instead of the residual max(0, p - q).
VerifyResult resample_from_p(std::span<const int32_t> d, const DistributionFn& p, const DistributionFn& q, Rng& rng) {
  for (int32_t i = 0; i < int32_t(d.size()); ++i) {
    const double qd = q ? double(q(i)[size_t(d[size_t(i)])]) : 1.0;
    if (rng.uniform() * qd < double(p(i)[size_t(d[size_t(i)])])) continue;
    return {.n_accepted = i, .token = draw_from(p(i), rng.uniform())};
  }
  return {.n_accepted = int32_t(d.size()), .token = draw_from(p(int32_t(d.size())), rng.uniform())};
}

// Broken on purpose: keeps every proposal.
VerifyResult keep_all(std::span<const int32_t> d, const DistributionFn& p, const DistributionFn&, Rng& rng) {
  return {.n_accepted = int32_t(d.size()), .token = draw_from(p(int32_t(d.size())), rng.uniform())};
}

constexpr int32_t kTrials = 120000;

TEST(Verifier, SampledOutputHasTheTargetDistribution) {
  const std::vector<double> exact = exact_joint();
  for (bool point_mass : {false, true}) {
    for (int32_t k : {1, 3}) {
      SCOPED_TRACE(std::string(point_mass ? "point-mass" : "sampled") + " proposals, k " + std::to_string(k));
      double acceptance = 0;
      const auto counts = run_trials(verify_sampled, kTrials, k, point_mass, 17 + uint64_t(k), &acceptance);
      EXPECT_GT(acceptance, 0.1) << "the case must accept proposals";
      EXPECT_LT(acceptance, 0.9) << "the case must reject proposals too";
      EXPECT_GT(test::chi_square_fit(counts, exact), 0.001);
    }
  }
}

TEST(Verifier, TheDistributionTestCatchesBrokenVerifiers) {
  const std::vector<double> exact = exact_joint();
  EXPECT_LT(test::chi_square_fit(run_trials(resample_from_p, kTrials, 3, false, 5), exact), 1e-6);
  EXPECT_LT(test::chi_square_fit(run_trials(keep_all, kTrials, 3, false, 6), exact), 1e-6);
  EXPECT_LT(test::chi_square_fit(run_trials(keep_all, kTrials, 3, true, 7), exact), 1e-6);
}

TEST(Verifier, SameSeedSameTokens) {
  const auto a = run_trials(verify_sampled, 2000, 3, false, 99), b = run_trials(verify_sampled, 2000, 3, false, 99);
  EXPECT_EQ(a, b);
}

// Target distribution with zeros (a truncated token): a proposal there is always rejected and
// never comes back as the residual draw.
TEST(Verifier, ProposalOutsideTheTargetsSupportIsAlwaysRejected) {
  const std::vector<float> p = {0.5f, 0.5f, 0.0f, 0.0f}, q = {0.1f, 0.1f, 0.4f, 0.4f};
  Rng rng(3);
  const std::vector<int32_t> d = {2};
  for (int i = 0; i < 1000; ++i) {
    const VerifyResult v = verify_sampled(d, [&](int32_t) -> std::span<const float> { return p; },
                                          [&](int32_t) -> std::span<const float> { return q; }, rng);
    EXPECT_EQ(v.n_accepted, 0);
    EXPECT_TRUE(v.token == 0 || v.token == 1) << v.token;
  }
}

TEST(Verifier, GreedyKeepsProposalsWhileTheyAreTheArgmax) {
  const std::vector<int32_t> argmaxes = {4, 7, 1, 9};  // the target's greedy token after i proposals
  auto target = [&](int32_t i) { return argmaxes[size_t(i)]; };
  const std::vector<int32_t> all = {4, 7, 1}, second_wrong = {4, 8, 1}, first_wrong = {5};
  EXPECT_EQ(verify_greedy(all, target).n_accepted, 3);
  EXPECT_EQ(verify_greedy(all, target).token, 9) << "bonus token";
  EXPECT_EQ(verify_greedy(second_wrong, target).n_accepted, 1);
  EXPECT_EQ(verify_greedy(second_wrong, target).token, 7);
  EXPECT_EQ(verify_greedy(first_wrong, target).n_accepted, 0);
  EXPECT_EQ(verify_greedy(first_wrong, target).token, 4);
  EXPECT_EQ(verify_greedy({}, target).token, 4);
}

TEST(Verifier, DrawFromIsTheInverseCdfInIdOrder) {
  const std::vector<float> w = {0.0f, 2.0f, 0.0f, 1.0f, 1.0f};  // need not sum to 1
  EXPECT_EQ(draw_from(w, 0.0), 1);
  EXPECT_EQ(draw_from(w, 0.4999), 1);
  EXPECT_EQ(draw_from(w, 0.5), 3);
  EXPECT_EQ(draw_from(w, 0.75), 4);
  EXPECT_EQ(draw_from(w, 0.9999999), 4);
}

}  // namespace
}  // namespace tf

// Recovery of a projection with input columns removed (src/prune/recover.h), on hand-made
// rows: nothing removed is the input bit for bit; bias compensation is exact for a constant
// column; the least-squares refit is exact for a column the kept ones predict, and on random
// rows none >= bias >= lsq in output error.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "prune/recover.h"
#include "test_util.h"

namespace tf {
namespace {

struct Case {
  int64_t m, k, n;
  std::vector<float> w, b, x;
};

Case random_case(int64_t m, int64_t k, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0, 1);
  Case c{m, k, n, std::vector<float>(size_t(m * k)), std::vector<float>(size_t(m)), std::vector<float>(size_t(n * k))};
  for (float& v : c.w) v = g(rng);
  for (float& v : c.b) v = g(rng);
  for (float& v : c.x) v = g(rng) + 0.5f;
  return c;
}

// Mean squared difference of x W^T + b and x[:, keep] W'^T + b' over the rows.
double output_error(const Case& c, const std::vector<int32_t>& keep, const ShrunkProjection& s) {
  double err = 0;
  const size_t kk = keep.size();
  for (int64_t r = 0; r < c.n; ++r)
    for (int64_t i = 0; i < c.m; ++i) {
      double full = c.b[size_t(i)], cut = s.bias.empty() ? 0.0 : s.bias[size_t(i)];
      for (int64_t j = 0; j < c.k; ++j) full += double(c.w[size_t(i * c.k + j)]) * c.x[size_t(r * c.k + j)];
      for (size_t j = 0; j < kk; ++j) cut += double(s.w[size_t(i) * kk + j]) * c.x[size_t(r * c.k + keep[j])];
      err += (full - cut) * (full - cut);
    }
  return err / double(c.n * c.m);
}

ProjectionRows rows_of(const Case& c) {
  return {.w = c.w.data(), .m = c.m, .k = c.k, .bias = c.b.data(), .x = c.x.data(), .n = c.n};
}

TEST(PruneRecover, NothingRemovedIsTheInputBitForBit) {
  const Case c = random_case(5, 8, 32, 1);
  const std::vector<int32_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  for (Recovery r : {Recovery::None, Recovery::Bias, Recovery::Lsq}) {
    const ShrunkProjection s = shrink_projection(rows_of(c), all, r);
    EXPECT_EQ(s.w, c.w) << recovery_name(r);
    EXPECT_EQ(s.bias, c.b) << recovery_name(r);
  }
  ProjectionRows no_bias = rows_of(c);
  no_bias.bias = nullptr;
  EXPECT_TRUE(shrink_projection(no_bias, all, Recovery::Lsq).bias.empty());
}

TEST(PruneRecover, BiasCompensationIsExactForAConstantColumn) {
  Case c = random_case(4, 6, 40, 2);
  for (int64_t r = 0; r < c.n; ++r) c.x[size_t(r * c.k + 2)] = 1.75f;  // column 2 constant
  const std::vector<int32_t> keep = {0, 1, 3, 4, 5};
  EXPECT_GT(output_error(c, keep, shrink_projection(rows_of(c), keep, Recovery::None)), 0.1);
  EXPECT_LT(output_error(c, keep, shrink_projection(rows_of(c), keep, Recovery::Bias)), 1e-10);
  ProjectionRows no_bias = rows_of(c);
  no_bias.bias = nullptr;
  EXPECT_EQ(shrink_projection(no_bias, keep, Recovery::Bias).bias.size(), 4u);  // a bias appears
}

TEST(PruneRecover, LeastSquaresRecoversAPredictableColumn) {
  Case c = random_case(4, 6, 200, 3);
  for (int64_t r = 0; r < c.n; ++r)  // column 5 = 2 x0 - x3 + 0.25
    c.x[size_t(r * c.k + 5)] = 2 * c.x[size_t(r * c.k)] - c.x[size_t(r * c.k + 3)] + 0.25f;
  const std::vector<int32_t> keep = {0, 1, 2, 3, 4};
  const double bias = output_error(c, keep, shrink_projection(rows_of(c), keep, Recovery::Bias));
  const double lsq = output_error(c, keep, shrink_projection(rows_of(c), keep, Recovery::Lsq, 1e-9));
  EXPECT_GT(bias, 0.1);
  EXPECT_LT(lsq, 1e-6);
}

TEST(PruneRecover, OnRandomRowsEachRecoveryDoesNoWorse) {
  const Case c = random_case(16, 32, 256, 4);
  const std::vector<int32_t> keep = {0, 2, 3, 5, 7, 8, 11, 13, 17, 19, 23, 24, 25, 29, 30, 31};
  const double none = output_error(c, keep, shrink_projection(rows_of(c), keep, Recovery::None));
  const double bias = output_error(c, keep, shrink_projection(rows_of(c), keep, Recovery::Bias));
  const double lsq = output_error(c, keep, shrink_projection(rows_of(c), keep, Recovery::Lsq));
  EXPECT_LT(bias, none);
  EXPECT_LE(lsq, bias * (1 + 1e-9));
  EXPECT_CONTAINS(test::error_of([] { parse_recovery("ridge", "--recover"); }), "--recover");
}

TEST(PruneRecover, InputStatsAreTheCentredCovarianceAndRefitFromThemIsTheSame) {
  const Case c = random_case(5, 7, 40, 11);
  const InputStats st = input_stats(c.x.data(), c.n, c.k);
  for (int64_t a = 0; a < c.k; ++a) {
    double ma = 0;
    for (int64_t r = 0; r < c.n; ++r) ma += c.x[size_t(r * c.k + a)];
    ma /= double(c.n);
    EXPECT_NEAR(st.mean[size_t(a)], ma, 1e-12);
    for (int64_t b = 0; b < c.k; ++b) {
      double mb = 0, cov = 0;
      for (int64_t r = 0; r < c.n; ++r) mb += c.x[size_t(r * c.k + b)];
      mb /= double(c.n);
      for (int64_t r = 0; r < c.n; ++r) cov += (c.x[size_t(r * c.k + a)] - ma) * (c.x[size_t(r * c.k + b)] - mb);
      EXPECT_NEAR(st.cov[size_t(a * c.k + b)], cov, 1e-9 * c.n) << a << " " << b;
    }
  }
  const std::vector<int32_t> keep = {0, 2, 3, 6};
  for (Recovery r : {Recovery::Bias, Recovery::Lsq}) {
    const ShrunkProjection own = shrink_projection(rows_of(c), keep, r, 0.3);
    ProjectionRows no_rows = rows_of(c);
    no_rows.x = nullptr;
    no_rows.n = 0;
    const ShrunkProjection given = shrink_projection(no_rows, keep, r, 0.3, &st);
    EXPECT_EQ(own.w, given.w);
    EXPECT_EQ(own.bias, given.bias);
  }
}

}  // namespace
}  // namespace tf

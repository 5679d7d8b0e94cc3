// rms_norm and the residual add of the CPU backend against the reference, over rows
// around the CPU backend's threading threshold (8 rows), widths around the vector width,
// norm weights F32/BF16/F16, two epsilons, and rows whose scale spans 1e-3..1e3 so that eps
// matters for some rows and not for others.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "op_test_util.h"

namespace tf {
namespace {

using test::BackendPair;
using test::GuardedOut;
using test::HostTensor;
using test::Rng;

constexpr int64_t kRows[] = {1, 2, 3, 5, 8, 9, 16, 33};
constexpr int64_t kWidths[] = {1, 3, 16, 17, 64, 100, 576, 2048};
constexpr float kEps[] = {1e-5f, 1e-6f};

// Tolerance: the reference sums squares in double; the CPU backend sums them in F32 across
// vector lanes (all terms positive, so the relative error of the sum is at most about
// 2^-24 * d / lanes and typically 2^-24 * sqrt(d)), then multiplies x * inv * w in F32 (two
// roundings). The output's relative error is therefore a few 1e-7 at d = 2048 (measured
// worst 2.4e-7); 5e-6 leaves room for the worst case of the F32 sum, and a wrong element or
// a wrong eps placement gives errors of 1e-3 or more (the rows scaled to 1e-3 have
// mean(x^2) ~ eps).
constexpr double kTol = 5e-6;

// x [rows, d] of normal values, row r scaled by 10^u with u uniform in [-3, 3].
std::vector<float> scaled_rows(Rng& rng, int64_t rows, int64_t d) {
  std::vector<float> x = test::randn(rng, rows * d);
  for (int64_t r = 0; r < rows; ++r) {
    const double scale = std::pow(10.0, rng.uniform() * 6.0 - 3.0);
    for (int64_t i = 0; i < d; ++i) x[size_t(r * d + i)] = float(x[size_t(r * d + i)] * scale);
  }
  return x;
}

class NormSweep : public ::testing::TestWithParam<DType> {};

TEST_P(NormSweep, RmsNormCpuMatchesRef) {
  const DType w_dtype = GetParam();
  double worst = 0;
  for (int64_t rows : kRows) {
    for (int64_t d : kWidths) {
      for (float eps : kEps) {
        SCOPED_TRACE("rows=" + std::to_string(rows) + " d=" + std::to_string(d) +
                     " eps=" + std::to_string(eps));
        Rng rng(test::seed_of({rows, d, int64_t(eps * 1e7f), int64_t(w_dtype), 1}));
        const std::vector<float> x = scaled_rows(rng, rows, d);
        // Norm weights are normal too (never all ones), so a backend that ignored w would fail.
        const HostTensor w = test::make_host(test::randn(rng, d), w_dtype, {d});
        BackendPair be;
        std::vector<float> outs[2];
        int i = 0;
        for (Backend* b : {be.ref.get(), be.cpu.get()}) {
          const TensorView xd = test::to_device(*b, x, rows, d);
          GuardedOut out(*b, rows, d);
          b->rms_norm(xd, b->upload(w.view(), w_dtype), eps, out.view());
          EXPECT_TRUE(out.guard_intact()) << b->name() << " wrote past its output";
          EXPECT_TRUE(test::bitwise_equal(test::to_host_f32(*b, xd), x)) << b->name() << " changed x";
          outs[i++] = out.values();
        }
        EXPECT_TRUE(test::close_rel_l2(outs[1], outs[0], kTol));
        worst = std::max(worst, test::error_stats(outs[1], outs[0]).rel_l2);
      }
    }
  }
  std::printf("worst rel L2 error over the sweep: %.3g (tolerance %.0e)\n", worst, kTol);
}

// The residual add: residual + delta is one IEEE F32 addition per element on both backends,
// so the updated residual must be bit-identical to this host-side sum (delta untouched).
TEST(OpsAdd, CpuAndRefSumBitwise) {
  for (int64_t rows : kRows) {
    for (int64_t d : kWidths) {
      SCOPED_TRACE("rows=" + std::to_string(rows) + " d=" + std::to_string(d));
      Rng rng(test::seed_of({rows, d, 2}));
      const std::vector<float> residual = scaled_rows(rng, rows, d), delta = scaled_rows(rng, rows, d);
      std::vector<float> summed(residual.size());
      for (size_t j = 0; j < summed.size(); ++j) summed[j] = residual[j] + delta[j];
      BackendPair be;
      for (Backend* b : {be.ref.get(), be.cpu.get()}) {
        const TensorView rd = test::to_device(*b, residual, rows, d);
        const TensorView dd = test::to_device(*b, delta, rows, d);
        b->add(rd, dd);
        EXPECT_TRUE(test::bitwise_equal(test::to_host_f32(*b, rd), summed)) << b->name() << ": residual";
        EXPECT_TRUE(test::bitwise_equal(test::to_host_f32(*b, dd), delta)) << b->name() << " changed delta";
      }
    }
  }
}

// An independent check of the reference's semantics on one row, in double precision:
// out = x / sqrt(mean(x^2) + eps) * w, with eps inside the square root.
TEST(OpsRmsNorm, RefMatchesDirectFormula) {
  Rng rng(11);
  const int64_t d = 6;
  std::vector<float> x = test::randn(rng, d, 1e-3), w = test::randn(rng, d);
  const float eps = 1e-6f;
  auto ref = make_backend(BackendKind::Ref);
  const TensorView xd = test::to_device(*ref, x, 1, d), wd = test::to_device(*ref, w, 1, d);
  TensorView out = ref->alloc(DType::F32, {1, d});
  ref->rms_norm(xd, make_view(wd.data, DType::F32, {d}), eps, out);
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  std::vector<float> want(static_cast<size_t>(d));
  for (int64_t i = 0; i < d; ++i)
    want[size_t(i)] = float(x[size_t(i)] / std::sqrt(ss / double(d) + double(eps)) * w[size_t(i)]);
  EXPECT_TRUE(test::close_rel_l2(test::to_host_f32(*ref, out), want, 1e-6));
}

std::string dtype_param_name(const ::testing::TestParamInfo<DType>& info) {
  std::string name = "W";  // appended, not "W" + ...: GCC 12 warns falsely (-Wrestrict) on that
  name += dtype_name(info.param);
  return name;
}

INSTANTIATE_TEST_SUITE_P(Ops, NormSweep, ::testing::Values(DType::F32, DType::BF16, DType::F16),
                         dtype_param_name);

}  // namespace
}  // namespace tf

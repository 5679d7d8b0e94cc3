// src/quant quantizers: RTN on hand-checked cases, and AWQ and GPTQ against RTN on synthetic
// layers whose inputs have outlier channels (as LLM activations do): both must give a lower
// output error than RTN, measured on the calibration rows and on held-out rows drawn the same
// way. The errors are printed; the assertions are on the measured values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "backend/op_test_util.h"
#include "core/dtype.h"
#include "quant/quantizer.h"

namespace tf {
namespace {

using test::Rng;

// RTN by hand: W8 row [0.1, -0.4, 0.25, 0.3]: scale = 0.4 / 127; 0.1 / scale = 31.75 -> 32,
// 0.25 / scale = 79.375 -> 79, 0.3 / scale = 95.25 -> 95.
TEST(Rtn, HandCheckedW8) {
  const std::vector<float> w = {0.1f, -0.4f, 0.25f, 0.3f};
  const QuantizedWeight q = quantize_rtn(w.data(), 1, 4, QuantSpec{.format = DType::W8}, "w");
  EXPECT_EQ(q.params(0, 0).scale, 0.4f / 127.0f);
  EXPECT_EQ(int8_t(q.code(0, 0)), 32);
  EXPECT_EQ(int8_t(q.code(0, 1)), -127);
  EXPECT_EQ(int8_t(q.code(0, 2)), 79);
  EXPECT_EQ(int8_t(q.code(0, 3)), 95);
}

// W4 group of 32: [-1, 2, 0.5, 0.26, 0 ...]: lo = -1, hi = 2, scale = F16(3 / 15) =
// 0.199951171875, zero = round(1 / scale) = round(5.0012) = 5; codes: -1 -> -5.0012 -> 0,
// 2 -> 10.0024 -> 15, 0.5 -> 2.5006 -> 3 + 5 = 8, 0.26 -> 1.3003 -> 6, 0 -> 5.
TEST(Rtn, HandCheckedW4) {
  std::vector<float> w(32, 0.0f);
  w[0] = -1.0f, w[1] = 2.0f, w[2] = 0.5f, w[3] = 0.26f;
  const QuantizedWeight q = quantize_rtn(w.data(), 1, 32, QuantSpec{.format = DType::W4, .group_size = 32}, "w");
  EXPECT_EQ(q.params(0, 0).scale, 0.199951171875f);
  EXPECT_EQ(q.params(0, 0).zero, 5);
  const int want[] = {0, 15, 8, 6, 5};
  for (int j = 0; j < 5; ++j) EXPECT_EQ(q.code(0, j), want[j]) << j;
  const std::vector<float> d = dequantize(q.view());
  EXPECT_EQ(d[0], -5 * 0.199951171875f);
  EXPECT_EQ(d[1], 10 * 0.199951171875f);
}

// A layer y = x w^T with weights N(0, 1 / k) and inputs shaped like LLM activations:
// correlated channels (a mix of r = k / 8 latent factors plus 10% noise, so x^T x is far from
// diagonal, which is what GPTQ's compensation exploits) of which a few carry 20x the
// activation of the rest (outlier channels, which AWQ's scaling exploits). Calibration and
// held-out rows are drawn alike.
struct Layer {
  int64_t m, k, n;
  std::vector<float> w, x_calib, x_test;
};
Layer make_layer(uint64_t seed, int64_t m, int64_t k, int64_t n) {
  Rng rng(seed);
  Layer l{m, k, n, test::randn(rng, m * k, 1.0 / std::sqrt(double(k))), {}, {}};
  const int64_t r = k / 8;
  const std::vector<float> mix = test::randn(rng, r * k, 1.0 / std::sqrt(double(r)));
  std::vector<float> channel_scale(static_cast<size_t>(k), 1.0f);
  for (int i = 0; i < 6; ++i) channel_scale[size_t(rng.uniform_int(0, k - 1))] = 20.0f;
  for (auto* x : {&l.x_calib, &l.x_test}) {
    *x = test::randn(rng, n * k, 0.1);
    for (int64_t t = 0; t < n; ++t) {
      const std::vector<float> z = test::randn(rng, r);
      for (int64_t j = 0; j < k; ++j) {
        float v = (*x)[size_t(t * k + j)];
        for (int64_t f = 0; f < r; ++f) v += z[size_t(f)] * mix[size_t(f * k + j)];
        (*x)[size_t(t * k + j)] = v * channel_scale[size_t(j)];
      }
    }
  }
  return l;
}

struct Errors {
  double calib, test;
};
Errors errors_of(const Layer& l, const std::vector<float>& w_eff) {
  return {relative_output_error(l.w.data(), w_eff.data(), l.m, l.k, CalibRows{l.x_calib.data(), l.n}),
          relative_output_error(l.w.data(), w_eff.data(), l.m, l.k, CalibRows{l.x_test.data(), l.n})};
}

std::string spec_name(const QuantSpec& s) {
  std::string name(quant_format_name(s.format));  // appended piecewise: GCC 12 warns falsely (-Wrestrict) on a + chain
  if (s.format == DType::W4) name += " g" + std::to_string(s.group_size);
  if (s.symmetric) name += " sym";
  return name;
}

TEST(Quantizers, AwqAndGptqBeatRtnOnOutlierChannels) {
  // GPTQ fits H = x^T x: with rows not much more than k it overfits the calibration rows
  // (measured: below RTN on them, above on held-out rows at n = 1.5 k), so n = 8 k here.
  const Layer l = make_layer(42, 32, 128, 1024);
  const CalibRows calib{l.x_calib.data(), l.n};
  for (const QuantSpec& spec : {QuantSpec{.format = DType::W4, .group_size = 128},
                                QuantSpec{.format = DType::W4, .group_size = 32},
                                QuantSpec{.format = DType::W4, .group_size = 128, .symmetric = true},
                                QuantSpec{.format = DType::W8}, QuantSpec{.format = DType::FP8}}) {
    SCOPED_TRACE(spec_name(spec));
    const Errors rtn = errors_of(l, dequantize(quantize_rtn(l.w.data(), l.m, l.k, spec, "w").view()));

    const AwqResult awq = quantize_awq(l.w.data(), l.m, l.k, calib, spec, "w");
    std::vector<float> awq_eff = dequantize(awq.weight.view());
    for (int64_t i = 0; i < l.m; ++i)
      for (int64_t j = 0; j < l.k; ++j) awq_eff[size_t(i * l.k + j)] /= awq.input_scales[size_t(j)];
    const Errors a = errors_of(l, awq_eff);

    const Errors g = errors_of(l, dequantize(quantize_gptq(l.w.data(), l.m, l.k, calib, spec, "w").view()));
    std::printf("%-12s output error calib / held-out: RTN %.4f / %.4f  AWQ (alpha %.2f) %.4f / %.4f  GPTQ %.4f / %.4f\n",
                spec_name(spec).c_str(), rtn.calib, rtn.test, awq.alpha, a.calib, a.test, g.calib, g.test);
    EXPECT_LT(a.calib, rtn.calib);
    EXPECT_LT(a.test, rtn.test);
    EXPECT_LT(g.calib, rtn.calib);
    EXPECT_LT(g.test, rtn.test);
  }
}

// GPTQ with a Hessian of one dead input (a channel that is always zero): that column is
// zeroed, the rest still quantize, nothing is NaN.
TEST(Quantizers, GptqHandlesDeadInputs) {
  Layer l = make_layer(7, 8, 64, 64);
  for (int64_t t = 0; t < l.n; ++t) l.x_calib[size_t(t * l.k + 5)] = 0.0f;
  const QuantizedWeight q = quantize_gptq(l.w.data(), l.m, l.k, CalibRows{l.x_calib.data(), l.n},
                                          QuantSpec{.format = DType::W4, .group_size = 32}, "w");
  const std::vector<float> d = dequantize(q.view());
  for (int64_t i = 0; i < l.m; ++i) EXPECT_EQ(d[size_t(i * l.k + 5)], 0.0f);
  for (float v : d) ASSERT_TRUE(std::isfinite(v));
}

// GPTQ's variants on the same layers: act-order (columns by decreasing H_jj, groups' parameters
// fixed beforehand), static groups in column order, and the H-weighted clip search of the
// static groups. Each still beats RTN on held-out rows, and with one column order and no
// clipping, static and dynamic groups differ only in where the parameters come from.
TEST(Quantizers, GptqActOrderAndStaticGroupsBeatRtn) {
  const Layer l = make_layer(42, 32, 128, 1024);
  const CalibRows calib{l.x_calib.data(), l.n};
  for (const QuantSpec& spec : {QuantSpec{.format = DType::W4, .group_size = 32},
                                QuantSpec{.format = DType::W4, .group_size = 128}, QuantSpec{.format = DType::W8}}) {
    SCOPED_TRACE(spec_name(spec));
    const Errors rtn = errors_of(l, dequantize(quantize_rtn(l.w.data(), l.m, l.k, spec, "w").view()));
    for (const GptqParams& gp : {GptqParams{.act_order = true}, GptqParams{.static_groups = true},
                                 GptqParams{.act_order = true, .n_clip = 6}}) {
      const Errors g = errors_of(l, dequantize(quantize_gptq(l.w.data(), l.m, l.k, calib, spec, "w", gp).view()));
      std::printf("%-12s GPTQ act-order %d static %d clips %d: calib / held-out %.4f / %.4f (RTN %.4f / %.4f)\n",
                  spec_name(spec).c_str(), int(gp.act_order), int(gp.static_groups), gp.n_clip, g.calib, g.test,
                  rtn.calib, rtn.test);
      EXPECT_LT(g.calib, rtn.calib);
      EXPECT_LT(g.test, rtn.test);
    }
  }
}

// H = 2 x^T x / n of the calibration rows, [k, k].
std::vector<float> hessian_of(const Layer& l) {
  std::vector<float> h(size_t(l.k * l.k), 0.0f);
  for (int64_t a = 0; a < l.k; ++a)
    for (int64_t b = 0; b < l.k; ++b) {
      double s = 0;
      for (int64_t t = 0; t < l.n; ++t) s += double(l.x_calib[size_t(t * l.k + a)]) * l.x_calib[size_t(t * l.k + b)];
      h[size_t(a * l.k + b)] = float(2.0 * s / double(l.n));
    }
  return h;
}

// The refit of W4 scales and zero points on RTN's codes: the codes stay, no row's H-weighted
// error grows, the returned errors are the rows' errors, and on these layers (correlated
// inputs, so H is far from diagonal and min/max parameters are far from the least-squares
// ones) the total falls.
TEST(Refit, NeverIncreasesARowsErrorAndHelpsOnCorrelatedInputs) {
  const Layer l = make_layer(42, 32, 128, 1024);
  const std::vector<float> h = hessian_of(l);
  for (const QuantSpec& spec : {QuantSpec{.format = DType::W4, .group_size = 32},
                                QuantSpec{.format = DType::W4, .group_size = 128},
                                QuantSpec{.format = DType::W4, .group_size = 32, .symmetric = true}}) {
    SCOPED_TRACE(spec_name(spec));
    const QuantizedWeight rtn = quantize_rtn(l.w.data(), l.m, l.k, spec, "w");
    QuantizedWeight q = rtn;
    const std::vector<double> after = refit_w4_params(l.w.data(), h.data(), q, spec.symmetric);
    EXPECT_EQ(q.data, rtn.data);
    if (spec.symmetric) {
      for (uint8_t z : q.zeros) EXPECT_EQ(z, 8);
    }
    double sum_before = 0, sum_after = 0;
    for (int64_t i = 0; i < l.m; ++i) {
      const double before = h_weighted_row_error(l.w.data() + i * l.k, h.data(), rtn, i);
      const double now = h_weighted_row_error(l.w.data() + i * l.k, h.data(), q, i);
      EXPECT_LE(now, before) << "row " << i;
      EXPECT_NEAR(after[size_t(i)], now, 1e-9 * before) << "row " << i;
      sum_before += before;
      sum_after += now;
    }
    const Errors r = errors_of(l, dequantize(rtn.view())), f = errors_of(l, dequantize(q.view()));
    std::printf("%-12s refit of RTN's codes: H-weighted error %.4g -> %.4g; output error calib / held-out %.4f / %.4f "
                "-> %.4f / %.4f\n",
                spec_name(spec).c_str(), sum_before, sum_after, r.calib, r.test, f.calib, f.test);
    EXPECT_LT(sum_after, 0.9 * sum_before);
    EXPECT_LT(f.test, r.test);
  }
}

// Codes of a row that are exactly 0.1 (c - 3) for one group and 0.05 (c - 9) for the other,
// stored with wrong parameters: the refit recovers the exact ones (as F16 keeps them), and
// the error falls to what the F16 rounding of the scales leaves.
TEST(Refit, RecoversExactParametersOfTheCodes) {
  const int64_t k = 64;
  QuantizedWeight q = QuantizedWeight::zeros_like(DType::W4, 1, k, 32);
  std::vector<float> w(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) {
    const uint8_t c = uint8_t((j * 7) % 16);
    q.set_code(0, j, c);
    w[size_t(j)] = j < 32 ? 0.1f * float(c - 3) : 0.05f * float(c - 9);
  }
  q.set_params(0, 0, GroupParams{.scale = 0.12f, .zero = 5});
  q.set_params(0, 1, GroupParams{.scale = 0.04f, .zero = 7});
  std::vector<float> h(size_t(k * k), 0.0f);  // a tridiagonal positive definite H
  for (int64_t j = 0; j < k; ++j) {
    h[size_t(j * k + j)] = 2.0f;
    if (j + 1 < k) h[size_t(j * k + j + 1)] = h[size_t((j + 1) * k + j)] = 0.5f;
  }
  const double before = h_weighted_row_error(w.data(), h.data(), q, 0);
  const std::vector<double> after = refit_w4_params(w.data(), h.data(), q, false);
  EXPECT_EQ(q.params(0, 0).zero, 3);
  EXPECT_EQ(q.params(0, 1).zero, 9);
  EXPECT_EQ(q.params(0, 0).scale, f16_to_f32(f32_to_f16(0.1f)));
  EXPECT_EQ(q.params(0, 1).scale, f16_to_f32(f32_to_f16(0.05f)));
  EXPECT_LT(after[0], 1e-6 * before);
}

// GPTQ with the refit (one round: GPTQ's codes with refitted parameters; two and three: GPTQ
// rerun on the refitted groups, each row the best round): the output error on the
// calibration rows (the refit's objective summed over rows) is never above GPTQ's alone, and
// held-out rows still beat RTN.
TEST(Refit, GptqWithRefitNeverAboveGptqOnCalibrationRows) {
  const Layer l = make_layer(42, 32, 128, 1024);
  const CalibRows calib{l.x_calib.data(), l.n};
  for (const QuantSpec& spec : {QuantSpec{.format = DType::W4, .group_size = 32},
                                QuantSpec{.format = DType::W4, .group_size = 128}}) {
    SCOPED_TRACE(spec_name(spec));
    const Errors rtn = errors_of(l, dequantize(quantize_rtn(l.w.data(), l.m, l.k, spec, "w").view()));
    for (const bool act_order : {false, true}) {
      const GptqParams base{.act_order = act_order, .n_clip = act_order ? 6 : 1};
      const Errors g = errors_of(l, dequantize(quantize_gptq(l.w.data(), l.m, l.k, calib, spec, "w", base).view()));
      for (int rounds = 1; rounds <= 3; ++rounds) {
        GptqParams gp = base;
        gp.refit_rounds = rounds;
        const Errors f = errors_of(l, dequantize(quantize_gptq(l.w.data(), l.m, l.k, calib, spec, "w", gp).view()));
        std::printf("%-12s GPTQ act-order %d refit %d: calib / held-out %.5f / %.5f (GPTQ %.5f / %.5f)\n",
                    spec_name(spec).c_str(), int(act_order), rounds, f.calib, f.test, g.calib, g.test);
        EXPECT_LE(f.calib, g.calib * (1 + 1e-6));
        EXPECT_LT(f.test, rtn.test);
      }
    }
  }
}

// Coordinate descent on W4 codes with the parameters fixed: no row's H-weighted error
// (h_weighted_row_error) grows, codes stay in 0..15 and the parameters stay; on RTN's codes of
// correlated inputs (where rounding each weight alone ignores H's off-diagonal) the total falls
// strictly; and at the end no single code of a row can be changed to lower its error (each
// of the 16 codes of each column tried by brute force).
TEST(CoordinateDescent, NeverIncreasesARowsErrorAndEndsAtACodewiseMinimum) {
  const Layer l = make_layer(42, 32, 128, 1024);
  const std::vector<float> h = hessian_of(l);
  for (const QuantSpec& spec : {QuantSpec{.format = DType::W4, .group_size = 32},
                                QuantSpec{.format = DType::W4, .group_size = 128},
                                QuantSpec{.format = DType::W4, .group_size = 32, .symmetric = true}}) {
    SCOPED_TRACE(spec_name(spec));
    const QuantizedWeight rtn = quantize_rtn(l.w.data(), l.m, l.k, spec, "w");
    QuantizedWeight q = rtn;
    const int64_t moved = descend_w4_codes(l.w.data(), h.data(), q, 100);
    EXPECT_GT(moved, 0);
    EXPECT_EQ(q.scales, rtn.scales);
    EXPECT_EQ(q.zeros, rtn.zeros);
    double sum_before = 0, sum_after = 0;
    for (int64_t i = 0; i < l.m; ++i) {
      const float* w = l.w.data() + i * l.k;
      const double before = h_weighted_row_error(w, h.data(), rtn, i);
      const double now = h_weighted_row_error(w, h.data(), q, i);
      EXPECT_LE(now, before) << "row " << i;
      sum_before += before;
      sum_after += now;
      for (int64_t j = 0; j < l.k; ++j) {
        ASSERT_LE(q.code(i, j), 15);
        if (i % 8 != 0) continue;  // the brute-force check on every 8th row
        QuantizedWeight t = q;
        for (int c = 0; c < 16; ++c) {
          t.set_code(i, j, uint8_t(c));
          EXPECT_GE(h_weighted_row_error(w, h.data(), t, i), now * (1 - 1e-9)) << "row " << i << " col " << j;
        }
      }
    }
    const Errors r = errors_of(l, dequantize(rtn.view())), f = errors_of(l, dequantize(q.view()));
    std::printf("%-12s descent on RTN's codes: H-weighted error %.4g -> %.4g; output error calib / held-out "
                "%.4f / %.4f -> %.4f / %.4f\n",
                spec_name(spec).c_str(), sum_before, sum_after, r.calib, r.test, f.calib, f.test);
    EXPECT_LT(sum_after, 0.9 * sum_before);
  }
}

// A row whose weights the codes and parameters represent exactly has error 0 and no code
// moves; a built case needs the descent: two inputs that are always equal (H = 2 [[1, 1],
// [1, 1]] on them), so only the sum of their two weights matters. Weights 0.17 and 0.17 with
// scale 0.125 (exact in F16) each round to 0.125 (sum error 0.09); the descent moves one code
// so the sum is 0.375 (error 0.035): 0.25 + 0.125.
TEST(CoordinateDescent, ExactRowsStayAndCorrelatedPairMoves) {
  const int64_t k = 32;
  std::vector<float> h(size_t(k * k), 0.0f);
  for (int64_t j = 0; j < k; ++j) h[size_t(j * k + j)] = 2.0f;
  h[size_t(0 * k + 1)] = h[size_t(1 * k + 0)] = 2.0f;
  const GroupParams p{.scale = 0.125f, .zero = 8};
  QuantizedWeight q = QuantizedWeight::zeros_like(DType::W4, 2, k, 32);
  std::vector<float> w(size_t(2 * k));
  for (int64_t j = 0; j < k; ++j) {
    const uint8_t c = uint8_t((j * 5) % 16);
    q.set_code(0, j, c);
    w[size_t(j)] = dequantize_value(DType::W4, c, p);  // row 0: exactly its codes
    w[size_t(k + j)] = j < 2 ? 0.17f : dequantize_value(DType::W4, c, p);
    q.set_code(1, j, j < 2 ? quantize_value(DType::W4, 0.17f, p) : c);
  }
  q.set_params(0, 0, p);
  q.set_params(1, 0, p);
  ASSERT_EQ(q.code(1, 0), 9);  // 0.17 rounds to 0.125
  const QuantizedWeight before = q;
  EXPECT_EQ(h_weighted_row_error(w.data(), h.data(), q, 0), 0.0);
  const double e1 = h_weighted_row_error(w.data() + k, h.data(), q, 1);
  EXPECT_NEAR(e1, 2 * 0.09 * 0.09, 1e-6);
  const int64_t moved = descend_w4_codes(w.data(), h.data(), q, 8);
  EXPECT_EQ(moved, 1);
  for (int64_t j = 0; j < k; ++j) EXPECT_EQ(q.code(0, j), before.code(0, j));
  EXPECT_EQ(q.code(1, 0) + q.code(1, 1), 9 + 10);
  EXPECT_NEAR(h_weighted_row_error(w.data() + k, h.data(), q, 1), 2 * 0.035 * 0.035, 1e-6);
}

// GPTQ with coordinate-descent rounds (each followed by the refit) on top of its refit: the
// output error on the calibration rows (the objective) is never above GPTQ with the refit
// alone, and held-out rows still beat RTN.
TEST(CoordinateDescent, GptqWithDescentNeverAboveGptqOnCalibrationRows) {
  const Layer l = make_layer(42, 32, 128, 1024);
  const CalibRows calib{l.x_calib.data(), l.n};
  for (const QuantSpec& spec : {QuantSpec{.format = DType::W4, .group_size = 32},
                                QuantSpec{.format = DType::W4, .group_size = 128}}) {
    SCOPED_TRACE(spec_name(spec));
    const Errors rtn = errors_of(l, dequantize(quantize_rtn(l.w.data(), l.m, l.k, spec, "w").view()));
    const GptqParams base{.act_order = true, .n_clip = 6, .refit_rounds = 3};
    const Errors g = errors_of(l, dequantize(quantize_gptq(l.w.data(), l.m, l.k, calib, spec, "w", base).view()));
    for (int rounds = 1; rounds <= 3; ++rounds) {
      GptqParams gp = base;
      gp.cd_rounds = rounds;
      const Errors f = errors_of(l, dequantize(quantize_gptq(l.w.data(), l.m, l.k, calib, spec, "w", gp).view()));
      std::printf("%-12s GPTQ act-order refit 3, descent %d: calib / held-out %.5f / %.5f (without %.5f / %.5f)\n",
                  spec_name(spec).c_str(), rounds, f.calib, f.test, g.calib, g.test);
      EXPECT_LE(f.calib, g.calib * (1 + 1e-6));
      EXPECT_LT(f.test, rtn.test);
    }
  }
}

// Act-order permutes the columns GPTQ visits, never where a code is stored: with a Hessian
// that is diagonal (independent inputs) there is no error to spread, so every order gives
// round-to-nearest of each group's static parameters, i.e. RTN's codes.
TEST(Quantizers, GptqActOrderOnIndependentInputsIsRtn) {
  const int64_t m = 4, k = 64, n = 64;
  Rng rng(3);
  const std::vector<float> w = test::randn(rng, m * k, 1.0);
  std::vector<float> x(size_t(n * k), 0.0f);
  for (int64_t t = 0; t < n; ++t) x[size_t(t * k + t % k)] = float(1 + t % 7);  // one input per row: x^T x diagonal
  const QuantSpec spec{.format = DType::W4, .group_size = 32};
  const QuantizedWeight r = quantize_rtn(w.data(), m, k, spec, "w");
  const QuantizedWeight g =
      quantize_gptq(w.data(), m, k, CalibRows{x.data(), n}, spec, "w", GptqParams{.damp = 0, .act_order = true});
  EXPECT_EQ(g.data, r.data);
  EXPECT_EQ(g.scales, r.scales);
  EXPECT_EQ(g.zeros, r.zeros);
}

}  // namespace
}  // namespace tf

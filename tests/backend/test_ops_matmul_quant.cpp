// matmul on quantized weights (W8, W4 asymmetric at group sizes 32 and 128 and symmetric,
// FP8): the reference backend (dequantize, then the float matmul: the ground truth) against
// its definition; the CPU backend's dequantizing path (CpuBackend::matmul_dequant,
// matmul_quant.cpp: the dequantization fused into the GEMM, F32 activations) against the
// reference, over shapes with every tail: rows 1..17 (the 4-token micro-tile, its
// remainders), odd m (the 4-row weight block), k at group boundaries and across the
// kernel's 512-element slices (a bias on odd row counts); and CpuBackend::matmul's dispatch
// between that path and the integer kernels (matmul_quant_fast, tested in
// test_ops_matmul_quant_fast.cpp). Weights reach both backends through upload() of the host view.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "op_test_util.h"
#include "quant_test_util.h"
#include "quant/quantized_weight.h"
#include "quant/quantizer.h"

namespace tf {
namespace {

using test::Rng;


// x = the identity [k, k]: row t of the output is column t of the weight, one product and
// k - 1 exact zeros, so out^T must equal the dequantized weight bit for bit on both backends
// (the CPU path's dequantization is the reference's).
TEST(OpsMatmulQuant, IdentityInputGivesTheDequantizedWeightExactly) {
  for (const test::QuantFormat& f : test::kQuantFormats) {
    SCOPED_TRACE(f.name);
    const int64_t m = 5, k = 256;
    Rng rng(test::seed_of({31, int64_t(f.spec.format), f.spec.group_size}));
    const QuantizedWeight q = test::random_quantized(rng, m, k, f.spec);
    const std::vector<float> want = dequantize(q.view());
    std::vector<float> eye(static_cast<size_t>(k * k), 0.0f);
    for (int64_t i = 0; i < k; ++i) eye[size_t(i * k + i)] = 1.0f;
    for (BackendKind kind : {BackendKind::Ref, BackendKind::Cpu}) {
      auto be = make_backend(kind);
      TensorView out = be->alloc(DType::F32, {k, m});
      const TensorView xv = test::to_device(*be, eye, k, k), wv = be->upload(q.view(), q.dtype);
      if (kind == BackendKind::Cpu)
        static_cast<CpuBackend&>(*be).matmul_dequant(xv, wv, TensorView{}, out);
      else
        be->matmul(xv, wv, TensorView{}, out);
      const std::vector<float> got = test::to_host_f32(*be, out);
      std::vector<float> got_t(got.size());
      for (int64_t t = 0; t < k; ++t)
        for (int64_t j = 0; j < m; ++j) got_t[size_t(j * k + t)] = got[size_t(t * m + j)];
      EXPECT_TRUE(test::bitwise_equal(got_t, want)) << be->name();
    }
  }
}

// The reference's result against out = x @ dequant(w)^T + bias computed here in double.
TEST(OpsMatmulQuant, RefIsDequantizeThenMatmul) {
  for (const test::QuantFormat& f : test::kQuantFormats) {
    SCOPED_TRACE(f.name);
    const int64_t n = 3, m = 7, k = 256;
    Rng rng(test::seed_of({32, int64_t(f.spec.format), f.spec.group_size}));
    const QuantizedWeight q = test::random_quantized(rng, m, k, f.spec);
    const std::vector<float> x = test::randn(rng, n * k), bias = test::randn(rng, m), wd = dequantize(q.view());
    std::vector<float> want(static_cast<size_t>(n * m));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < m; ++j) {
        double acc = bias[size_t(j)];
        for (int64_t i = 0; i < k; ++i) acc += double(x[size_t(t * k + i)]) * wd[size_t(j * k + i)];
        want[size_t(t * m + j)] = float(acc);
      }
    auto ref = make_backend(BackendKind::Ref);
    TensorView out = ref->alloc(DType::F32, {n, m});
    ref->matmul(test::to_device(*ref, x, n, k), ref->upload(q.view(), q.dtype), test::to_device(*ref, bias, 1, m),
                out);
    EXPECT_TRUE(test::close_rel_l2(test::to_host_f32(*ref, out), want, 1e-7));
  }
}

// GGUF blocks on the reference backend: Q4_0 gives bit for bit what its exact W4 repack gives
// (the same dequantized values, the same sums), Q8_0 what d * q multiplied out here in double.
TEST(OpsMatmulQuant, RefTakesGgufQ4_0AndQ8_0) {
  const int64_t n = 3, m = 4, k = 96;
  Rng rng(34);
  std::vector<uint8_t> q4(size_t(m * (k / 32) * 18)), q8(size_t(m * (k / 32) * 34));
  std::vector<float> d8(size_t(m * (k / 32)));
  for (size_t b = 0; b < d8.size(); ++b) {
    const uint16_t d4 = f32_to_f16(float(0.01 + 0.1 * rng.uniform())), d = f32_to_f16(float(0.01 + 0.1 * rng.uniform()));
    d8[b] = f16_to_f32(d);
    std::memcpy(&q4[18 * b], &d4, 2);
    std::memcpy(&q8[34 * b], &d, 2);
    for (int e = 0; e < 16; ++e) q4[18 * b + 2 + size_t(e)] = uint8_t(rng.uniform_int(0, 255));
    for (int e = 0; e < 32; ++e) q8[34 * b + 2 + size_t(e)] = uint8_t(rng.uniform_int(0, 255));
  }
  const TensorView w4_0 = make_view(q4.data(), DType::Q4_0, {m, k}), w8_0 = make_view(q8.data(), DType::Q8_0, {m, k});
  const QuantizedWeight repacked = repack_q4_0_to_w4(w4_0);
  const std::vector<float> x = test::randn(rng, n * k);
  auto ref = make_backend(BackendKind::Ref);
  auto run = [&](const TensorView& w) {
    TensorView out = ref->alloc(DType::F32, {n, m});
    ref->matmul(test::to_device(*ref, x, n, k), w, TensorView{}, out);
    return test::to_host_f32(*ref, out);
  };
  EXPECT_TRUE(test::bitwise_equal(run(w4_0), run(repacked.view())));
  std::vector<float> want(size_t(n * m));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < m; ++j) {
      double acc = 0;
      for (int64_t i = 0; i < k; ++i)
        acc += double(x[size_t(t * k + i)]) * double(d8[size_t(j * (k / 32) + i / 32)] *
                                                      float(int8_t(q8[size_t((j * (k / 32) + i / 32) * 34 + 2 + i % 32)])));
      want[size_t(t * m + j)] = float(acc);
    }
  EXPECT_TRUE(test::close_rel_l2(run(w8_0), want, 1e-7));
}

// Tolerance: both backends multiply the same F32 activations by the same dequantized F32
// weights (bit-identical, see the identity test), so they differ only in summation order, as
// the float matmul sweep (test_ops_matmul.cpp) argues: scaled L2 1e-5.
TEST(OpsMatmulQuant, CpuMatchesRefOverEveryTail) {
  const int64_t kKs[] = {32, 96, 128, 160, 544, 1056};  // group boundaries; 544, 1056 cross 512-wide slices
  const int64_t kMs[] = {1, 3, 13};
  const int64_t kNs[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17};
  for (const test::QuantFormat& f : test::kQuantFormats) {
    double worst = 0;
    for (int64_t k : kKs) {
      if (f.spec.format == DType::W4 && k % f.spec.group_size != 0) continue;
      for (int64_t m : kMs) {
        for (int64_t n : kNs) {
          {
            const bool with_bias = n % 2 == 1;
            SCOPED_TRACE(std::string(f.name) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                         " m=" + std::to_string(m) + (with_bias ? " bias" : ""));
            Rng rng(test::seed_of({33, int64_t(f.spec.format), f.spec.group_size, f.spec.symmetric, k, m, n}));
            const QuantizedWeight q = test::random_quantized(rng, m, k, f.spec);
            const std::vector<float> x = test::randn(rng, n * k), bias = test::randn(rng, m);
            test::BackendPair be;
            std::vector<float> outs[2];
            int i = 0;
            for (Backend* b : {be.ref.get(), be.cpu.get()}) {
              test::GuardedOut out(*b, n, m);
              const TensorView xv = test::to_device(*b, x, n, k), wv = b->upload(q.view(), q.dtype);
              const TensorView bv = with_bias ? test::to_device(*b, bias, 1, m) : TensorView{};
              if (b == be.cpu.get())
                static_cast<CpuBackend&>(*b).matmul_dequant(xv, wv, bv, out.view());
              else
                b->matmul(xv, wv, bv, out.view());
              EXPECT_TRUE(out.guard_intact()) << b->name() << " wrote past its output";
              outs[i++] = out.values();
            }
            // each output's natural scale: sqrt(sum_i (x_i w_i)^2 + bias^2)
            const std::vector<float> wd = dequantize(q.view());
            std::vector<double> scale(static_cast<size_t>(n * m));
            for (int64_t t = 0; t < n; ++t)
              for (int64_t j = 0; j < m; ++j) {
                double ss = with_bias ? double(bias[size_t(j)]) * bias[size_t(j)] : 0.0;
                for (int64_t c = 0; c < k; ++c) {
                  const double p = double(x[size_t(t * k + c)]) * wd[size_t(j * k + c)];
                  ss += p * p;
                }
                scale[size_t(t * m + j)] = std::sqrt(ss);
              }
            EXPECT_TRUE(test::close_scaled_l2(outs[1], outs[0], scale, 1e-5));
            worst = std::max(worst, test::scaled_l2(outs[1], outs[0], scale));
          }
        }
      }
    }
    std::printf("%-9s worst scaled L2 error, cpu vs ref: %.3g (tolerance 1e-05)\n", f.name, worst);
  }
}

// CpuBackend::matmul on a quantized weight gives bit for bit what the path it dispatches to
// gives: the integer kernels where they cover the weight (W8 and W4 at groups of 32 and
// 128 with k a multiple of 32), the dequantizing path otherwise (FP8, k = 48 for W8).
TEST(OpsMatmulQuant, CpuMatmulDispatchesToTheIntegerKernelsWhereTheyCover) {
  struct Case {
    QuantSpec spec;
    int64_t k;
    bool fast;
  };
  const Case cases[] = {{{.format = DType::W8}, 96, true},
                        {{.format = DType::W8}, 48, false},
                        {{.format = DType::W4, .group_size = 32}, 96, true},
                        {{.format = DType::W4, .group_size = 128}, 256, true},
                        {{.format = DType::FP8}, 96, false}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.spec.format)) + " k=" + std::to_string(c.k));
    const int64_t n = 5, m = 7;
    Rng rng(test::seed_of({35, int64_t(c.spec.format), c.spec.group_size, c.k}));
    const QuantizedWeight q = test::random_quantized(rng, m, c.k, c.spec);
    const std::vector<float> x = test::randn(rng, n * c.k), bias = test::randn(rng, m);
    CpuBackend cpu;
    const TensorView xv = test::to_device(cpu, x, n, c.k), wv = cpu.upload(q.view(), q.dtype);
    const TensorView bv = test::to_device(cpu, bias, 1, m);
    TensorView got = cpu.alloc(DType::F32, {n, m}), want = cpu.alloc(DType::F32, {n, m});
    cpu.matmul(xv, wv, bv, got);
    if (c.fast)
      ASSERT_TRUE(cpu.matmul_quant_fast(xv, wv, bv, want));
    else
      cpu.matmul_dequant(xv, wv, bv, want);
    EXPECT_TRUE(test::bitwise_equal(test::to_host_f32(cpu, got), test::to_host_f32(cpu, want)));
  }
}

}  // namespace
}  // namespace tf

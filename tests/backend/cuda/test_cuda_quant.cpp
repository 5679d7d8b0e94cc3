// The CUDA backend on quantized weights (W8, W4 asymmetric at group sizes 32 and 128 and
// symmetric, FP8) against the reference backend's matmul on the same weights (dequantize,
// then multiply in double: src/backend/ref), with BF16-rounded activations on both sides as
// in test_cuda_ops.cpp. Shapes cover every tail: rows 1..17 and beyond (the GEMV's R rows,
// the tensor-core kernel's 16-row tiles), odd m (the 8-feature tiles, features past m), k at
// group boundaries and k the tensor-core kernel does not take (the dequantize-then-cuBLAS
// fallback). Each kernel is also run through its launcher directly, so a shape the backend's
// dispatch sends elsewhere is still covered.
//
// Tolerances (rel L2 against the reference; one BF16 rounding is <= 2^-8 = 3.9e-3):
//   GEMV, W8 tensor-core kernel: codes and scales are exact in FP32 (W8: exact BF16 integers
//     with the row scale on the FP32 sum), so only FP32 summation and the BF16 output
//     rounding remain: 5e-3, as the BF16 matmul.
//   W4 tensor-core kernel: the group scale is rounded to BF16 and so is each (q - zero) *
//     scale: two more roundings of ~2^-9 per weight, averaged over k: 8e-3.
//   dequantize-then-cuBLAS: the weight rounded once to BF16, then the BF16 matmul: 8e-3.
//   FP8 W8A8 (cuBLASLt): the activations are quantized to E4M3 per token by design, so the
//     reference gets the same quantized activations (quantize_row_kv_fp8 is the same rule:
//     scale = max|row| / 448, round to nearest even): then 5e-3. Against the unquantized
//     activations the error is E4M3's ~2.6% RMS relative rounding per activation (half an
//     ulp, 2^-4 of the binade, uniform): recorded with tol 6e-2.
//   fused GEMV (norm prologue, add / SwiGLU epilogues): as the BF16 fused test, 8e-3 and 1.2e-2.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_util.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/quant_gemm.cuh"
#include "cuda_test_report.h"
#include "cuda_test_util.h"
#include "op_test_util.h"
#include "quant_test_util.h"
#include "quant/kv_fp8.h"
#include "quant/quantized_weight.h"
#include "quant/quantizer.h"

namespace tf {
namespace {

using test::Rng;


// The activations an FP8 W8A8 GEMM sees: each row quantized to E4M3 with its own scale, back
// to F32.
std::vector<float> fp8_rows(const std::vector<float>& x, int64_t rows, int64_t k) {
  std::vector<float> out(x.size());
  std::vector<uint8_t> q(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    const float s = quantize_row_kv_fp8(x.data() + r * k, k, q.data());
    for (int64_t j = 0; j < k; ++j) out[size_t(r * k + j)] = dequantize_kv_fp8(q[size_t(j)], s);
  }
  return out;
}

// out = x @ dequant(w)^T (+ bias) on the reference backend.
std::vector<float> ref_matmul(Backend& ref, const std::vector<float>& x, const QuantizedWeight& w,
                              const std::vector<float>* bias, int64_t rows) {
  TensorView out = ref.alloc(DType::F32, {rows, w.m});
  TensorView b{};
  if (bias) b = test::to_device(ref, *bias, 1, w.m);
  ref.matmul(test::to_device(ref, x, rows, w.k), ref.upload(w.view(), w.dtype), b, out);
  return test::to_host_f32(ref, out);
}

// Which path CudaBackend::matmul takes (cuda_quant.cpp), for the tolerance and the report.
std::string path_of(DType dtype, int64_t rows, int64_t k, int64_t m, int32_t group) {
  if (rows <= cuda::kGemvMaxRows && k % (dtype == DType::W4 ? 32 : 16) == 0) return "gemv";
  if (dtype == DType::FP8) return k % 16 == 0 && m % 16 == 0 ? "fp8 w8a8" : "dequant+cublas";
  if (dtype == DType::W4 ? k % 128 == 0 && k % group == 0 : k % 64 == 0) return "tensor-core";
  return "dequant+cublas";
}

TEST(CudaQuant, MatmulMatchesRef) {
  TF_REQUIRE_CUDA_DEVICE();
  test::Backends be;
  for (const test::QuantFormat& f : test::kQuantFormats) {
    for (int64_t rows : {1, 2, 3, 5, 8, 9, 16, 17, 33, 64, 256}) {
      for (int64_t k : {128, 1024, 96, 160}) {
        if (f.spec.format == DType::W4 && k % f.spec.group_size != 0) continue;
        for (int64_t m : {37, 64, 130}) {
          const bool with_bias = (rows + m) % 2 == 1;
          const std::string path = path_of(f.spec.format, rows, k, m, f.spec.group_size);
          SCOPED_TRACE(std::string(f.name) + " rows=" + std::to_string(rows) + " k=" + std::to_string(k) +
                       " m=" + std::to_string(m) + " " + path);
          Rng rng(test::seed_of({40, int64_t(f.spec.format), f.spec.group_size, f.spec.symmetric, rows, k, m}));
          const QuantizedWeight w = test::random_quantized(rng, m, k, f.spec);
          const std::vector<float> x = test::round_bf16(test::randn(rng, rows * k));
          const std::vector<float> bias = test::round_bf16(test::randn(rng, m));
          const std::vector<float> want = ref_matmul(*be.ref, path == "fp8 w8a8" ? fp8_rows(x, rows, k) : x, w,
                                                     with_bias ? &bias : nullptr, rows);
          test::GuardedBf16 got(*be.cuda, rows, m);
          TensorView b{};
          if (with_bias) b = be.cuda->upload(test::make_host(bias, DType::BF16, {m}).view(), DType::BF16);
          be.cuda->matmul(test::to_cuda_bf16(*be.cuda, x, rows, k), be.cuda->upload(w.view(), w.dtype), b, got.view());
          const double tol = path == "dequant+cublas" || (path == "tensor-core" && f.spec.format == DType::W4) ? 8e-3 : 5e-3;
          test::expect_close("quant matmul " + std::string(f.name) + " (" + path + ")", got.values(), want, tol,
                             got.guard_intact());
          if (path == "fp8 w8a8") {
            const std::vector<float> exact = ref_matmul(*be.ref, x, w, with_bias ? &bias : nullptr, rows);
            const double err = test::error_stats(got.values(), exact).rel_l2;
            EXPECT_LE(err, 6e-2) << "W8A8 against unquantized activations";
            test::record("quant matmul FP8 W8A8 vs BF16 x", "rel L2", err, 6e-2, err <= 6e-2);
          }
        }
      }
    }
  }
}

// Each kernel through its launcher, on shapes the backend's dispatch would send elsewhere.
TEST(CudaQuant, KernelsMatchRef) {
  TF_REQUIRE_CUDA_DEVICE();
  test::Backends be;
  cudaStream_t stream = dynamic_cast<cuda::CudaBackend&>(*be.cuda).stream();
  for (const test::QuantFormat& f : test::kQuantFormats) {
    for (int64_t rows = 1; rows <= 17; ++rows) {
      for (int64_t k : {128, 256}) {
        const int64_t m = 45;
        SCOPED_TRACE(std::string(f.name) + " rows=" + std::to_string(rows) + " k=" + std::to_string(k));
        Rng rng(test::seed_of({41, int64_t(f.spec.format), f.spec.group_size, f.spec.symmetric, rows, k}));
        const QuantizedWeight w = test::random_quantized(rng, m, k, f.spec);
        const std::vector<float> x = test::round_bf16(test::randn(rng, rows * k));
        const std::vector<float> want = ref_matmul(*be.ref, x, w, nullptr, rows);
        const TensorView wd = be.cuda->upload(w.view(), w.dtype), xd = test::to_cuda_bf16(*be.cuda, x, rows, k);
        auto args = [&](const TensorView& out) {
          return cuda::GemmArgs{.x = cuda::detail::bf(xd), .out = out.data, .rows = rows, .k = k, .m = m,
                                .wq = cuda::detail::quant_args(wd)};
        };
        if (rows <= cuda::kGemvMaxRows) {
          test::GuardedBf16 got(*be.cuda, rows, m);
          cuda::launch_gemv(args(got.view()), stream);
          test::expect_close("quant gemv " + std::string(f.name), got.values(), want, 5e-3, got.guard_intact());
        }
        if (f.spec.format != DType::FP8) {
          test::GuardedBf16 got(*be.cuda, rows, m);
          ASSERT_TRUE(cuda::quant_mma_supported(args(got.view())));
          cuda::launch_quant_mma(args(got.view()), stream);
          test::expect_close("quant tensor-core " + std::string(f.name), got.values(), want,
                             f.spec.format == DType::W4 ? 8e-3 : 5e-3, got.guard_intact());
        }
      }
    }
  }
}

// The dequantization kernel: each element s * q in FP32, rounded once to BF16, exactly as the
// host's dequantize() rounded to BF16. Bit for bit.
TEST(CudaQuant, DequantizeIsExact) {
  TF_REQUIRE_CUDA_DEVICE();
  test::Backends be;
  cudaStream_t stream = dynamic_cast<cuda::CudaBackend&>(*be.cuda).stream();
  for (const test::QuantFormat& f : test::kQuantFormats) {
    const int64_t m = 7, k = 256;
    Rng rng(test::seed_of({42, int64_t(f.spec.format), f.spec.group_size}));
    const QuantizedWeight w = test::random_quantized(rng, m, k, f.spec);
    const TensorView wd = be.cuda->upload(w.view(), w.dtype);
    TensorView out = be.cuda->alloc(DType::BF16, {m, k});
    cuda::launch_dequantize(cuda::detail::quant_args(wd), m, k, static_cast<__nv_bfloat16*>(out.data), stream);
    const auto ok = test::bitwise_equal(test::from_cuda(*be.cuda, out), test::round_bf16(dequantize(w.view())));
    EXPECT_TRUE(ok) << f.name;
    test::record("quant dequantize", "bit-exact", ok ? 0 : 1, 0, bool(ok));
  }
}

// Per-token FP8 activations: codes and scales equal the host rule (quant/kv_fp8.h) bit for bit,
// zero and non-finite rows included.
TEST(CudaQuant, QuantizeRowsFp8IsExact) {
  TF_REQUIRE_CUDA_DEVICE();
  test::Backends be;
  cudaStream_t stream = dynamic_cast<cuda::CudaBackend&>(*be.cuda).stream();
  const int64_t rows = 5, k = 4096 + 8;
  Rng rng(43);
  std::vector<float> x = test::round_bf16(test::randn(rng, rows * k, 3.0));
  for (int64_t j = 0; j < k; ++j) x[size_t(1 * k + j)] = 0.0f;  // a zero row
  x[size_t(2 * k + 17)] = INFINITY;                               // a non-finite row
  x[size_t(3 * k + 5)] = 1e30f;                                    // an outlier
  const TensorView xd = test::to_cuda_bf16(*be.cuda, x, rows, k);
  TensorView q = be.cuda->alloc(DType::U8, {rows, k}), s = be.cuda->alloc(DType::F32, {rows});
  cuda::launch_quantize_rows_fp8(cuda::detail::bf(xd), rows, k, static_cast<uint8_t*>(q.data),
                                 static_cast<float*>(s.data), stream);
  const std::vector<uint8_t> got_q = test::to_host_bytes(*be.cuda, q);
  const std::vector<float> got_s = test::from_cuda(*be.cuda, s);
  const std::vector<float> xb = test::round_bf16(x);
  bool ok = true;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<uint8_t> want(static_cast<size_t>(k));
    const float ws = quantize_row_kv_fp8(xb.data() + r * k, k, want.data());
    const bool scale_ok = std::isnan(ws) ? std::isnan(got_s[size_t(r)]) : got_s[size_t(r)] == ws;
    const bool codes_ok = std::equal(want.begin(), want.end(), got_q.begin() + r * k);
    EXPECT_TRUE(scale_ok && codes_ok) << "row " << r << ": scale " << got_s[size_t(r)] << " want " << ws;
    ok = ok && scale_ok && codes_ok;
  }
  test::record("quantize_rows_fp8", "bit-exact", ok ? 0 : 1, 0, ok);
}

// matmul_fused with quantized weights (the GEMV with its prologue / epilogues where it runs)
// against the reference's ops in turn.
TEST(CudaQuant, FusedMatchesRefOpsInTurn) {
  TF_REQUIRE_CUDA_DEVICE();
  using Epi = MatmulFusion::Epilogue;
  test::Backends be;
  struct Kind {
    const char* name;
    bool norm;
    Epi epi;
    double tol;
  };
  const Kind kinds[] = {{"norm+matmul", true, Epi::Store, 8e-3},
                        {"matmul+add", false, Epi::AddTo, 8e-3},
                        {"norm+matmul+swiglu", true, Epi::Swiglu, 1.2e-2}};
  for (const test::QuantFormat& f : test::kQuantFormats) {
    for (int64_t rows : {1, 3, 4, 8, 16}) {
      for (const Kind& kind : kinds) {
        const int64_t k = 256, m = 96, m_out = kind.epi == Epi::Swiglu ? m / 2 : m;
        SCOPED_TRACE(std::string(f.name) + " " + kind.name + " rows=" + std::to_string(rows));
        Rng rng(test::seed_of({44, int64_t(f.spec.format), f.spec.group_size, rows, int64_t(kind.epi)}));
        const std::vector<float> x = test::round_bf16(test::randn(rng, rows * k, 2.0));
        std::vector<float> nwv = test::randn(rng, k, 0.1);
        for (float& v : nwv) v += 1.0f;
        const test::HostTensor nw = test::make_host(nwv, DType::BF16, {k});
        const QuantizedWeight w = test::random_quantized(rng, m, k, f.spec);
        const std::vector<float> resid = test::round_bf16(test::randn(rng, rows * m_out, 2.0));
        const TensorView none{};
        auto fusion = [&](Backend& b, const TensorView& norm_w) {
          return MatmulFusion{.norm_w = kind.norm ? norm_w : none, .eps = 1e-5f,
                              .h = kind.norm ? b.alloc(b.act_dtype(), {rows, k}) : none, .epilogue = kind.epi,
                              .y = kind.epi != Epi::Store ? b.alloc(b.act_dtype(), {rows, m}) : none};
        };
        TensorView out_ref = kind.epi == Epi::AddTo ? test::to_device(*be.ref, resid, rows, m_out)
                                                    : be.ref->alloc(DType::F32, {rows, m_out});
        be.ref->matmul_fused(test::to_device(*be.ref, x, rows, k), be.ref->upload(w.view(), w.dtype), none, out_ref,
                             fusion(*be.ref, be.ref->upload(nw.view(), DType::BF16)));
        test::GuardedBf16 got(*be.cuda, rows, m_out);
        if (kind.epi == Epi::AddTo) {
          std::vector<uint16_t> h(resid.size());
          for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_bf16(resid[i]);
          be.cuda->copy_from_host(h.data(), got.view());
        }
        be.cuda->matmul_fused(test::to_cuda_bf16(*be.cuda, x, rows, k), be.cuda->upload(w.view(), w.dtype), none,
                              got.view(), fusion(*be.cuda, be.cuda->upload(nw.view(), DType::BF16)));
        // rows > 8 (or > 4 with the norm) run apart: the matmul then takes the tensor-core /
        // W8A8 kernels, whose tolerances (above) add to the fused ones
        const double tol = kind.tol + (rows > 4 ? 3e-3 : 0.0);
        test::expect_close("quant matmul_fused " + std::string(kind.name), got.values(),
                           test::to_host_f32(*be.ref, out_ref), f.spec.format == DType::FP8 && rows > 8 ? 6e-2 : tol,
                           got.guard_intact());
      }
    }
  }
}

}  // namespace
}  // namespace tf

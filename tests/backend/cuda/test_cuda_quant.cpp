// The CUDA backend on quantized weights (W8, W4 asymmetric at group sizes 32 and 128 and
// symmetric, FP8) against the reference backend's matmul on the same weights (dequantize,
// then multiply in double: src/backend/ref), with BF16-rounded activations on both sides as
// in test_cuda_ops.cpp. Shapes cover every tail: rows 1..17 and beyond (the decode kernels'
// 8-token tiles, the tiled kernel's 16..64-token tiles and its split-K), odd m (16-feature
// tiles, features past m), k at group boundaries and k the tensor-core kernel does not take
// (the CUDA-core GEMV, dequantize-then-cuBLAS). Each kernel is also run through its launcher
// with every tile, so a shape the backend's dispatch sends elsewhere is still covered.
//
// Tolerances (rel L2 against the reference; one BF16 rounding is <= 2^-8 = 3.9e-3):
//   GEMV (CUDA cores) and the tensor-core kernel: codes and scales are exact in FP32 (the
//     tensor cores multiply exact BF16 codes; W4 group scales and W8/FP8 row scales multiply
//     FP32 sums), so only FP32 summation and the BF16 output rounding remain: 5e-3, as the
//     BF16 matmul. QuantMmaDequantIsExact checks the exactness itself.
//   W4 with groups of 32 on the tensor-core kernel: each weight (code - zero) * BF16(scale) is
//     rounded to BF16 (the group scale cannot wait for the FP32 sum when a k-block spans
//     several groups): two more roundings of ~2^-9 per weight, averaged over k: 8e-3.
//   dequantize-then-cuBLAS: the weight rounded once to BF16, then the BF16 matmul: 8e-3.
//   FP8 W8A8 (cuBLASLt): the activations are quantized to E4M3 per token by design, so the
//     reference gets the same quantized activations (quantize_row_kv_fp8 is the same rule:
//     scale = max|row| / 448, round to nearest even): then 5e-3. Against the unquantized
//     activations the error is E4M3's ~2.6% RMS relative rounding per activation (half an
//     ulp, 2^-4 of the binade, uniform): recorded with tol 6e-2.
//   fused GEMV (norm prologue, add / SwiGLU epilogues): as the BF16 fused test, 8e-3 and 1.2e-2.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_util.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/gemv_half2.cuh"
#include "backend/cuda/norm.cuh"
#include "backend/cuda/quant_gemm.cuh"
#include "backend/cuda/rope_kv.cuh"
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
  const bool mma = dtype == DType::W4 ? k % 128 == 0 : k % 64 == 0;
  const bool w8a8 = dtype == DType::FP8 && k % 16 == 0 && m % 16 == 0;
  if (rows <= cuda::kGemvMaxRows && k % (dtype == DType::W4 ? 32 : 16) == 0) return mma ? "tensor-core" : "gemv";
  if (mma && rows <= (w8a8 ? cuda::kFp8MmaMaxRows : cuda::kQuantMmaMaxRows)) return "tensor-core";
  return w8a8 ? "fp8 w8a8" : "dequant+cublas";
}

// The tolerance of a path (above).
double tolerance(const std::string& path, const QuantSpec& spec) {
  if (path == "dequant+cublas") return 8e-3;
  if (path == "tensor-core" && spec.format == DType::W4 && spec.group_size % 128 != 0) return 8e-3;
  return 5e-3;
}

// One case of matmul_fused's tests: random BF16 inputs, norm weight, quantized weight and
// residual, the MatmulFusion for a backend, and the reference's output of the ops in turn.
struct FusedCase {
  using Epi = MatmulFusion::Epilogue;
  int64_t rows, k, m, m_out;
  bool norm;
  Epi epi;
  std::vector<float> x, resid;
  test::HostTensor nw;
  QuantizedWeight w;

  FusedCase(Rng& rng, int64_t rows_, int64_t k_, int64_t m_, const QuantSpec& spec, bool norm_, Epi epi_)
      : rows(rows_), k(k_), m(m_), m_out(epi_ == Epi::Swiglu || epi_ == Epi::Geglu ? m_ / 2 : m_), norm(norm_),
        epi(epi_) {
    x = test::round_bf16(test::randn(rng, rows * k, 2.0));
    std::vector<float> nwv = test::randn(rng, k, 0.1);
    for (float& v : nwv) v += 1.0f;
    nw = test::make_host(nwv, DType::BF16, {k});
    w = test::random_quantized(rng, m, k, spec);
    resid = test::round_bf16(test::randn(rng, rows * m_out, 2.0));
  }
  MatmulFusion fusion(Backend& b) const {
    const TensorView none{};
    return MatmulFusion{.norm_w = norm ? b.upload(nw.view(), DType::BF16) : none, .eps = 1e-5f,
                        .h = norm ? b.alloc(b.act_dtype(), {rows, k}) : none, .epilogue = epi,
                        .y = epi != Epi::Store ? b.alloc(b.act_dtype(), {rows, m}) : none};
  }
  // With the AddTo epilogue, `out` (BF16 on `b`) starts as the residual.
  void load_residual(Backend& b, const TensorView& out) const {
    if (epi != Epi::AddTo) return;
    std::vector<uint16_t> h(resid.size());
    for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_bf16(resid[i]);
    b.copy_from_host(h.data(), out);
  }
  std::vector<float> reference(Backend& ref) const {
    TensorView out = epi == Epi::AddTo ? test::to_device(ref, resid, rows, m_out) : ref.alloc(DType::F32, {rows, m_out});
    ref.matmul_fused(test::to_device(ref, x, rows, k), ref.upload(w.view(), w.dtype), TensorView{}, out, fusion(ref));
    return test::to_host_f32(ref, out);
  }
  // matmul_fused on a CUDA backend into `out` (BF16 [rows, m_out]).
  void run(Backend& b, const TensorView& out) const {
    load_residual(b, out);
    b.matmul_fused(test::to_cuda_bf16(b, x, rows, k), b.upload(w.view(), w.dtype), TensorView{}, out, fusion(b));
  }
};

// Zero-filled device scratch for the tensor-core kernel's split-K.
struct MmaWorkspace {
  void* p = nullptr;
  size_t bytes = 0;
  MmaWorkspace(Backend& be, size_t n) : bytes(n) {
    std::vector<uint8_t> zeros(n, 0);
    TensorView t = be.alloc(DType::U8, {int64_t(n)});
    be.copy_from_host(zeros.data(), t);
    p = t.data;
  }
};

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
          const double tol = tolerance(path, f.spec);
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

// The half2 GEMV (gemv_half2.cuh) sums a chunk's products (W4 32, W8 16) in F16: 2^-11
// relative per addition on sums of a few terms, below the BF16 output rounding; the GEMV's
// 5e-3 holds.
constexpr double kHalf2Tol = 5e-3;
constexpr const auto& kHalf2Variants = cuda::kHalf2AllOptions;
std::string half2_name(const cuda::Half2Options& o) {
  if (o.imma) return " imma";
  if (o.stages > 0)
    return " ring " + std::to_string(o.stages) + (o.split > 1 ? " x" + std::to_string(o.split) : "") +
           (o.blocks_per_sm ? " b" + std::to_string(o.blocks_per_sm) : "");
  if (o.split > 0) return " split " + std::to_string(o.split);
  return std::string(" x") + std::to_string(o.features_per_warp) + (o.persistent ? " persistent" : "");
}

// Each kernel through its launcher with every tile, on shapes the backend's dispatch would
// send elsewhere. k = 2048 splits the tiled kernel along k (W4: 16 k-blocks, W8/FP8: 32); its
// result must not depend on the order the split blocks finish in, so it runs twice.
// A GGUF Q4_0 matrix uploaded as stored (CudaBackend::reads_gguf_block): the backend holds it
// as W4 with groups of 32 and zero 8, the same values exactly, so the reference's matmul over
// the Q4_0 blocks (rows dequantized by quant/gguf_dequant.h) is met within the W4 g32
// tolerance of the path taken (above).
TEST(CudaQuant, GgufQ4_0UploadedAsW4MatchesRef) {
  TF_REQUIRE_CUDA_DEVICE();
  test::Backends be;
  ASSERT_TRUE(be.cuda->reads_gguf_block(DType::Q4_0));
  const QuantSpec w4g32{.format = DType::W4, .group_size = 32};
  for (int64_t rows : {1, 5, 9, 17, 64}) {
    for (int64_t k : {96, 128, 1024}) {
      for (int64_t m : {37, 130}) {
        const std::string path = path_of(DType::W4, rows, k, m, 32);
        SCOPED_TRACE("rows=" + std::to_string(rows) + " k=" + std::to_string(k) + " m=" + std::to_string(m) + " " + path);
        Rng rng(test::seed_of({47, rows, k, m}));
        std::vector<uint8_t> q = test::random_q4_0(rng, m, k);
        const TensorView host = make_view(q.data(), DType::Q4_0, {m, k});
        const std::vector<float> x = test::round_bf16(test::randn(rng, rows * k));
        TensorView want_v = be.ref->alloc(DType::F32, {rows, m});
        be.ref->matmul(test::to_device(*be.ref, x, rows, k), be.ref->upload(host, DType::Q4_0), {}, want_v);
        const TensorView w = be.cuda->upload(host, DType::Q4_0);
        ASSERT_EQ(w.dtype, DType::W4);
        ASSERT_EQ(w.group_size, 32);
        test::GuardedBf16 got(*be.cuda, rows, m);
        be.cuda->matmul(test::to_cuda_bf16(*be.cuda, x, rows, k), w, {}, got.view());
        test::expect_close("gguf Q4_0 as W4 g32 matmul (" + path + ")", got.values(), test::to_host_f32(*be.ref, want_v),
                           tolerance(path, w4g32), got.guard_intact());
      }
    }
  }
}

TEST(CudaQuant, KernelsMatchRef) {
  TF_REQUIRE_CUDA_DEVICE();
  test::Backends be;
  cudaStream_t stream = dynamic_cast<cuda::CudaBackend&>(*be.cuda).stream();
  MmaWorkspace ws(*be.cuda, size_t(8) << 20);
  std::vector<int64_t> row_counts;
  for (int64_t rows = 1; rows <= 17; ++rows) row_counts.push_back(rows);
  for (int64_t rows : {31, 33, 64, 65}) row_counts.push_back(rows);
  for (const test::QuantFormat& f : test::kQuantFormats) {
    for (int64_t rows : row_counts) {
      for (int64_t k : {128, 256, 2048}) {
        if (k == 2048 && rows % 4 != 1) continue;  // the split-K cases: a few row counts
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
          cuda::launch_gemv_simt(args(got.view()), stream);
          test::expect_close("quant gemv (CUDA cores) " + std::string(f.name), got.values(), want, 5e-3,
                             got.guard_intact());
        }
        for (const cuda::Half2Options& o : kHalf2Variants) {
          test::GuardedBf16 got(*be.cuda, rows, m);
          if (!cuda::gemv_half2_supported(args(got.view()), {}, o)) continue;
          cuda::launch_gemv_half2(args(got.view()), stream, {}, o);
          test::expect_close("quant gemv (half2) " + std::string(f.name) + half2_name(o), got.values(), want,
                             kHalf2Tol, got.guard_intact());
        }
        const double tol = tolerance("tensor-core", f.spec);
        for (cuda::QuantMmaTile tile : cuda::kQuantMmaTiles) {
          test::GuardedBf16 got(*be.cuda, rows, m);
          if (!cuda::quant_mma_supported(args(got.view()), {}, tile)) continue;
          SCOPED_TRACE(cuda::quant_mma_tile_name(tile));
          const cuda::QuantMmaOptions opt{.tile = tile, .workspace = ws.p, .workspace_bytes = ws.bytes};
          cuda::launch_quant_mma(args(got.view()), stream, {}, opt);
          const std::vector<float> first = got.values();
          test::expect_close("quant tensor-core " + std::string(f.name), first, want, tol, got.guard_intact());
          if (k == 2048) {
            cuda::launch_quant_mma(args(got.view()), stream, {}, opt);
            EXPECT_TRUE(test::bitwise_equal(got.values(), first)) << "a second run differs";
          }
        }
      }
    }
  }
}

// The half2 GEMV's power-of-two scaling of each input row (W4 and W8): rows whose values F16 could not
// hold as they are (up to 3e5 and beyond 65504; all below 1e-6, under F16's normal range) give
// the reference's products to the same tolerance, and a zero row gives zeros.
TEST(CudaQuant, Half2GemvScalesEachRow) {
  TF_REQUIRE_CUDA_DEVICE();
  test::Backends be;
  cudaStream_t stream = dynamic_cast<cuda::CudaBackend&>(*be.cuda).stream();
  for (const test::QuantFormat& f : test::kQuantFormats) {
    if (f.spec.format != DType::W4 && f.spec.format != DType::W8) continue;
    SCOPED_TRACE(f.name);
    const int64_t rows = 4, k = 1024, m = 40;
    Rng rng(46);
    const QuantizedWeight w = test::random_quantized(rng, m, k, f.spec);
    std::vector<float> x = test::randn(rng, rows * k);
    for (int64_t j = 0; j < k; ++j) {
      x[size_t(j)] *= 1e5f;              // row 0: large, beyond F16's range
      x[size_t(k + j)] *= 1e-7f;         // row 1: tiny
      x[size_t(2 * k + j)] = 0.0f;       // row 2: zeros
    }
    x[size_t(3 * k + 7)] = 3e4f;  // row 3: one outlier
    x = test::round_bf16(x);
    const std::vector<float> want = ref_matmul(*be.ref, x, w, nullptr, rows);
    const TensorView wd = be.cuda->upload(w.view(), w.dtype), xd = test::to_cuda_bf16(*be.cuda, x, rows, k);
    for (const cuda::Half2Options& o : kHalf2Variants) {
      test::GuardedBf16 got(*be.cuda, rows, m);
      const cuda::GemmArgs g{.x = cuda::detail::bf(xd), .out = got.view().data, .rows = rows, .k = k, .m = m,
                             .wq = cuda::detail::quant_args(wd)};
      cuda::GemmArgs one_row = g;
      one_row.rows = 1;
      // W4: the ring and the integer tensor-core kernel need groups of 128.
      if ((o.split > 0 || o.imma) && !cuda::gemv_half2_supported(one_row, {}, o)) continue;
      const int64_t launches = o.split > 0 ? rows : 1;  // the k-split kernel takes one row a launch
      for (int64_t r = 0; r < launches; ++r) {
        cuda::GemmArgs gr = g;
        if (o.split > 0) {
          gr.rows = 1;
          gr.x = g.x + r * k;
          gr.out = static_cast<__nv_bfloat16*>(g.out) + r * m;
        }
        ASSERT_TRUE(cuda::gemv_half2_supported(gr, {}, o));
        cuda::launch_gemv_half2(gr, stream, {}, o);
      }
      const std::vector<float> all = got.values();
      for (int64_t r : {0, 1, 3}) {
        const std::vector<float> gr(all.begin() + r * m, all.begin() + (r + 1) * m);
        const std::vector<float> wr(want.begin() + r * m, want.begin() + (r + 1) * m);
        test::expect_close("quant half2 gemv, row " + std::to_string(r) + " scaled", gr, wr, kHalf2Tol,
                           got.guard_intact());
      }
      for (int64_t j = 0; j < m; ++j) EXPECT_EQ(all[size_t(2 * m + j)], 0.0f) << "zero row, feature " << j;
    }
  }
}

// The half2 GEMV's persistent blocks loop over groups of features: with m = 20045 (more
// groups than 8 blocks of every SM of an H200 take) every block takes several, the last one
// partly past m; plain product and SwiGLU (y rounded to BF16, then silu(gate) * up, as the
// fused tests), against the reference.
TEST(CudaQuant, Half2GemvPersistentCoversEveryFeature) {
  TF_REQUIRE_CUDA_DEVICE();
  test::Backends be;
  cudaStream_t stream = dynamic_cast<cuda::CudaBackend&>(*be.cuda).stream();
  for (const test::QuantFormat& f : test::kQuantFormats) {
    if (f.spec.format != DType::W4 && f.spec.format != DType::W8) continue;
    for (int64_t rows : {1, 3}) {
      for (bool swiglu : {false, true}) {
        const int64_t k = 256, m = swiglu ? 2 * 20045 : 20045, m_out = 20045;
        SCOPED_TRACE(std::string(f.name) + " rows=" + std::to_string(rows) + (swiglu ? " swiglu" : ""));
        Rng rng(test::seed_of({48, int64_t(f.spec.format), f.spec.group_size, f.spec.symmetric, rows, swiglu}));
        const QuantizedWeight w = test::random_quantized(rng, m, k, f.spec);
        const std::vector<float> x = test::round_bf16(test::randn(rng, rows * k));
        const std::vector<float> y = ref_matmul(*be.ref, x, w, nullptr, rows);
        std::vector<float> want(size_t(rows * m_out));
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t j = 0; j < m_out; ++j) {
            if (!swiglu) {
              want[size_t(r * m_out + j)] = y[size_t(r * m + j)];
              continue;
            }
            const float gate = test::round_bf16({y[size_t(r * m + j)]})[0];
            const float up = test::round_bf16({y[size_t(r * m + m_out + j)]})[0];
            want[size_t(r * m_out + j)] = gate / (1.0f + std::exp(-gate)) * up;
          }
        }
        const TensorView wd = be.cuda->upload(w.view(), w.dtype), xd = test::to_cuda_bf16(*be.cuda, x, rows, k);
        for (const cuda::Half2Options& o : kHalf2Variants) {
          test::GuardedBf16 got(*be.cuda, rows, m_out);
          const cuda::GemmArgs g{.x = cuda::detail::bf(xd), .out = got.view().data, .rows = rows, .k = k, .m = m,
                                 .wq = cuda::detail::quant_args(wd)};
          const cuda::GemvFusion gf{.epilogue = swiglu ? cuda::GemvEpilogue::Swiglu : cuda::GemvEpilogue::Store};
          if (!cuda::gemv_half2_supported(g, gf, o)) continue;
          cuda::launch_gemv_half2(g, stream, gf, o);
          test::expect_close(std::string("quant half2 gemv, m = 20045") + (swiglu ? " swiglu" : "") + half2_name(o),
                             got.values(), want, swiglu ? 1.2e-2 : kHalf2Tol, got.guard_intact());
        }
      }
    }
  }
}

// The k-split GEMV (gemv_split.cu) at Llama-3-8B's widest k: 14336 inputs spread over 7 or 14
// warps (KernelsMatchRef's small k leaves lanes without a chunk), m = 3001 (odd: the last
// block ends in a single row) so the ring of rows wraps several times in every block; with
// and without the norm prologue (normalized on the host as norm.cu: BF16(x * inv_rms * w)),
// against the reference.
TEST(CudaQuant, SplitGemvCoversEveryWarpAndRow) {
  TF_REQUIRE_CUDA_DEVICE();
  test::Backends be;
  cudaStream_t stream = dynamic_cast<cuda::CudaBackend&>(*be.cuda).stream();
  for (const test::QuantFormat& f : test::kQuantFormats) {
    if (f.spec.format != DType::W4 && f.spec.format != DType::W8) continue;
    const int64_t k = 14336, m = 3001;
    Rng rng(test::seed_of({49, int64_t(f.spec.format), f.spec.group_size, f.spec.symmetric}));
    const QuantizedWeight w = test::random_quantized(rng, m, k, f.spec);
    const std::vector<float> x = test::round_bf16(test::randn(rng, k, 2.0));
    std::vector<float> nwv = test::round_bf16(test::randn(rng, k, 0.1));
    for (float& v : nwv) v = test::round_bf16({v + 1.0f})[0];
    const TensorView wd = be.cuda->upload(w.view(), w.dtype), xd = test::to_cuda_bf16(*be.cuda, x, 1, k);
    const TensorView nwd = be.cuda->upload(test::make_host(nwv, DType::BF16, {k}).view(), DType::BF16);
    for (bool norm : {false, true}) {
      std::vector<float> xn = x;
      if (norm) {
        double ss = 0;
        for (float v : x) ss += double(v) * v;
        const float inv = float(1.0 / std::sqrt(ss / double(k) + 1e-5));
        for (int64_t j = 0; j < k; ++j) xn[size_t(j)] = test::round_bf16({x[size_t(j)] * inv * nwv[size_t(j)]})[0];
      }
      const std::vector<float> want = ref_matmul(*be.ref, xn, w, nullptr, 1);
      int launched = 0;
      for (const cuda::Half2Options& o : kHalf2Variants) {
        if (o.split == 0 && !o.imma) continue;
        SCOPED_TRACE(std::string(f.name) + (norm ? " norm" : "") + half2_name(o));
        test::GuardedBf16 got(*be.cuda, 1, m);
        const cuda::GemmArgs g{.x = cuda::detail::bf(xd), .out = got.view().data, .rows = 1, .k = k, .m = m,
                               .wq = cuda::detail::quant_args(wd)};
        const cuda::GemvFusion gf{.norm_w = norm ? cuda::detail::bf(nwd) : nullptr, .eps = 1e-5f};
        if (!cuda::gemv_half2_supported(g, gf, o)) continue;
        cuda::launch_gemv_half2(g, stream, gf, o);
        test::expect_close("quant split gemv, k = 14336", got.values(), want, kHalf2Tol, got.guard_intact());
        ++launched;
      }
      // Every format has the register ring; W4 in groups of 128 and W8 the shared-memory rings
      // whose warps cover k = 14336 with at most 16 warps (a warp covers 1024 W4 or 512 W8
      // inputs a chunk a lane: W4 14 or 7 warps, W8 only at 2 chunks a lane).
      int want_launched = 0;
      for (const cuda::Half2Options& o : kHalf2Variants) {
        if (o.imma) want_launched += f.spec.format == DType::W4 && f.spec.group_size == 128;
        if (o.split == 0) continue;
        const int64_t per_warp = (f.spec.format == DType::W4 ? 1024 : 512) * o.split;
        const bool ring_format = f.spec.format == DType::W8 || f.spec.group_size == 128;
        want_launched += o.stages == 0 || (ring_format && k / per_warp <= 16);
      }
      EXPECT_EQ(launched, want_launched) << f.name << ": split variants that take k = 14336";
    }
  }
}

// The half2 GEMV with the RoPE/KV epilogue, launched directly (the backend may time another
// kernel faster on these small shapes, so CudaMatmulRopeKv need not reach it): one decode
// token per row at its own position and KV slot, with and without the norm prologue, against
// the reference product (normalized on the host as norm.cu: BF16(x * inv_rms * w)) plus
// bias, rounded to BF16, rotated as rope_device.cuh in double, rounded to BF16 again: the qkv
// rows and the K/V pool rows (tolerances of CudaMatmulRopeKv: 8e-3 and 1e-2).
TEST(CudaQuant, Half2GemvRopeKvMatchesRef) {
  TF_REQUIRE_CUDA_DEVICE();
  test::Backends be;
  cudaStream_t stream = dynamic_cast<cuda::CudaBackend&>(*be.cuda).stream();
  constexpr int64_t kBlockSize = 16, kBlocks = 8, k = 2048;  // 2048: every k-split GEMV ring takes it
  for (const test::QuantFormat& f : test::kQuantFormats) {
    if (f.spec.format != DType::W4 && f.spec.format != DType::W8) continue;
    for (int64_t rows : {1, 3, 4}) {
      for (bool norm : {false, true}) {
        for (const auto& [nh, nkv, hd] : {std::array<int64_t, 3>{4, 2, 64}, {8, 1, 128}}) {
          const int64_t m = (nh + 2 * nkv) * hd;
          SCOPED_TRACE(std::string(f.name) + " rows=" + std::to_string(rows) + (norm ? " norm" : "") +
                       " head_dim=" + std::to_string(hd));
          Rng rng(test::seed_of({47, f.spec.group_size, f.spec.symmetric, rows, norm, hd}));
          const std::vector<float> x = test::round_bf16(test::randn(rng, rows * k, 2.0));
          std::vector<float> nwv = test::round_bf16(test::randn(rng, k, 0.1));
          for (float& v : nwv) v = test::round_bf16({v + 1.0f})[0];
          const std::vector<float> bias = test::round_bf16(test::randn(rng, m, 0.5));
          const QuantizedWeight w = test::random_quantized(rng, m, k, f.spec);
          std::vector<int32_t> pos(static_cast<size_t>(rows)), slot(static_cast<size_t>(rows));
          for (int64_t r = 0; r < rows; ++r) {
            pos[size_t(r)] = int32_t(rng.uniform_int(0, 4000));
            slot[size_t(r)] = int32_t(r * 37 + 5);  // distinct slots of blocks 0..7
          }
          const std::vector<float> inv_freq = test::rope_freqs(hd, 1.0);
          // The host's expectation.
          std::vector<float> xn = x;
          if (norm) {
            for (int64_t r = 0; r < rows; ++r) {
              double ss = 0;
              for (int64_t j = 0; j < k; ++j) ss += double(x[size_t(r * k + j)]) * x[size_t(r * k + j)];
              const float inv = float(1.0 / std::sqrt(ss / double(k) + 1e-5));
              for (int64_t j = 0; j < k; ++j)
                xn[size_t(r * k + j)] = test::round_bf16({x[size_t(r * k + j)] * inv * nwv[size_t(j)]})[0];
            }
          }
          const std::vector<float> y = test::round_bf16(ref_matmul(*be.ref, xn, w, &bias, rows));
          std::vector<float> want_qkv = y;
          std::vector<float> want_pool[2];
          for (auto& p : want_pool) p.assign(size_t(kBlocks * nkv * kBlockSize * hd), NAN);
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t h = 0; h < nh + 2 * nkv; ++h) {
              float* row = want_qkv.data() + r * m + h * hd;
              if (h < nh + nkv) {
                for (int64_t i = 0; i < hd / 2; ++i) {
                  const double a = double(float(pos[size_t(r)]) * inv_freq[size_t(i)]);
                  const double y0 = row[i], y1 = row[i + hd / 2];
                  row[i] = float(y0 * std::cos(a) - y1 * std::sin(a));
                  row[i + hd / 2] = float(y1 * std::cos(a) + y0 * std::sin(a));
                }
              }
              for (int64_t i = 0; i < hd; ++i) row[i] = test::round_bf16({row[i]})[0];
              if (h < nh) continue;
              const bool is_v = h >= nh + nkv;
              const int64_t kvh = is_v ? h - nh - nkv : h - nh, s = slot[size_t(r)];
              const int64_t prow = (s / kBlockSize * nkv + kvh) * kBlockSize + s % kBlockSize;
              std::copy(row, row + hd, want_pool[is_v].begin() + prow * hd);
            }
          }
          // The device call.
          const TensorView wd = be.cuda->upload(w.view(), w.dtype), xd = test::to_cuda_bf16(*be.cuda, x, rows, k);
          const TensorView nwd = be.cuda->upload(test::make_host(nwv, DType::BF16, {k}).view(), DType::BF16);
          const TensorView bd = be.cuda->upload(test::make_host(bias, DType::BF16, {m}).view(), DType::BF16);
          TensorView posd = be.cuda->alloc(DType::I32, {rows}), slotd = be.cuda->alloc(DType::I32, {rows});
          be.cuda->copy_from_host(pos.data(), posd);
          be.cuda->copy_from_host(slot.data(), slotd);
          const TensorView freqd = test::upload_f32(*be.cuda, inv_freq);
          // The warp-per-feature kernel, and at one row the k-split ones (fresh outputs each).
          for (const cuda::Half2Options& o : kHalf2Variants) {
            if (o.split == 0 && (o.features_per_warp != 1 || o.persistent)) continue;
            SCOPED_TRACE(half2_name(o));
            test::GuardedBf16 pools[2] = {test::GuardedBf16(*be.cuda, kBlocks * nkv * kBlockSize, hd),
                                          test::GuardedBf16(*be.cuda, kBlocks * nkv * kBlockSize, hd)};
            test::GuardedBf16 qkv(*be.cuda, rows, m);
            cuda::RopeKvArgs ra{.inv_freq = static_cast<const float*>(freqd.data), .n_rot = hd,
                                .k_pool = pools[0].view().data, .v_pool = pools[1].view().data,
                                .kv_dtype = DType::BF16, .n_heads = nh, .n_kv_heads = nkv, .head_dim = hd,
                                .block_size = kBlockSize};
            ra.batch.positions = static_cast<const int32_t*>(posd.data);
            ra.batch.slot_mapping = static_cast<const int32_t*>(slotd.data);
            ra.batch.n_tokens = int32_t(rows);
            const cuda::GemmArgs g{.x = cuda::detail::bf(xd), .bias = cuda::detail::bf(bd), .out = qkv.view().data,
                                   .rows = rows, .k = k, .m = m, .wq = cuda::detail::quant_args(wd)};
            const cuda::GemvFusion gf{.norm_w = norm ? cuda::detail::bf(nwd) : nullptr, .eps = 1e-5f,
                                      .epilogue = cuda::GemvEpilogue::RopeKv, .rope = ra};
            if (o.split > 0 && rows > 1) continue;
            if ((o.split > 0 || o.imma) && !cuda::gemv_half2_supported(g, gf, o)) continue;
            ASSERT_TRUE(cuda::gemv_half2_supported(g, gf, o));
            cuda::launch_gemv_half2(g, stream, gf, o);
            test::expect_close("quant half2 gemv rope/kv qkv", qkv.values(), want_qkv, 8e-3, qkv.guard_intact());
            for (int kv = 0; kv < 2; ++kv) {
              const std::vector<float> got = pools[kv].values();
              std::vector<float> g_set, w_set;
              bool same_rows = true;
              for (size_t i = 0; i < got.size(); ++i) {
                if (std::isnan(got[i]) != std::isnan(want_pool[kv][i])) same_rows = false;
                if (std::isnan(want_pool[kv][i])) continue;
                g_set.push_back(got[i]);
                w_set.push_back(want_pool[kv][i]);
              }
              EXPECT_TRUE(same_rows) << (kv ? "V" : "K") << " pool: elements written by one side only";
              test::expect_close(std::string("quant half2 gemv rope/kv ") + (kv ? "V" : "K") + " pool", g_set, w_set,
                                 1e-2, pools[kv].guard_intact() && same_rows);
            }
          }
        }
      }
    }
  }
}

// The tensor-core kernel's dequantization is exact: with one-hot activations (token r picks
// column c_r) and F32 output, out[r, j] is the weight (j, c_r) itself, scale times code in
// FP32, over weights that hold every code (FP8: every finite E4M3 byte) and every zero point.
// W4 with groups of 32 rounds the scaled weight to BF16 ((code - zero) * BF16(scale)); the
// expectation does the same. A zero weight comes out +0 (a sum with other +0 products).
TEST(CudaQuant, QuantMmaDequantIsExact) {
  TF_REQUIRE_CUDA_DEVICE();
  test::Backends be;
  cudaStream_t stream = dynamic_cast<cuda::CudaBackend&>(*be.cuda).stream();
  MmaWorkspace ws(*be.cuda, size_t(1) << 20);
  for (const test::QuantFormat& f : test::kQuantFormats) {
    const int64_t m = 48, k = 256;
    Rng rng(test::seed_of({45, int64_t(f.spec.format), f.spec.group_size}));
    QuantizedWeight w = test::random_quantized(rng, m, k, f.spec);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < k; ++j) {
        const int64_t n = i * k + j;
        if (f.spec.format == DType::W4) {
          w.set_code(i, j, uint8_t(n % 16));
        } else if (f.spec.format == DType::W8) {
          w.set_code(i, j, uint8_t(n % 255 + 129));  // -127..127
        } else {
          const uint8_t c = uint8_t(n % 254);  // every byte but 0x7f and 0xff (NaN)
          w.set_code(i, j, c < 0x7f ? c : uint8_t(c + 1));
        }
      }
      for (int64_t gi = 0; gi < w.n_groups(); ++gi) {
        GroupParams p = w.params(i, gi);
        p.zero = uint8_t((i + gi) % 16);
        w.set_params(i, gi, p);
      }
    }
    const std::vector<float> deq = dequantize(w.view());
    const TensorView wd = be.cuda->upload(w.view(), w.dtype);
    for (int64_t rows : {1, 7, 16, 64}) {
      for (int64_t c0 = 0; c0 < k; c0 += std::max<int64_t>(rows, 64)) {  // every column at 16 and 64 rows
        std::vector<float> x(size_t(rows * k), 0.0f), want(size_t(rows * m));
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t c = (c0 + r) % k;
          x[size_t(r * k + c)] = 1.0f;
          for (int64_t j = 0; j < m; ++j) {
            float v = deq[size_t(j * k + c)];
            if (f.spec.format == DType::W4 && f.spec.group_size % 128 != 0) {
              const GroupParams p = w.params(j, c / f.spec.group_size);
              v = bf16_to_f32(f32_to_bf16(bf16_to_f32(f32_to_bf16(p.scale)) * float(int(w.code(j, c)) - p.zero)));
            }
            // The kernel sums the one-hot row's products, so FP8's -0 (code 0x80) times 1
            // plus the other columns' +0 products is +0.
            want[size_t(r * m + j)] = v == 0.0f ? 0.0f : v;
          }
        }
        const TensorView xd = test::to_cuda_bf16(*be.cuda, x, rows, k);
        TensorView out = be.cuda->alloc(DType::F32, {rows, m});
        for (cuda::QuantMmaTile tile : cuda::kQuantMmaTiles) {
          const cuda::GemmArgs g{.x = cuda::detail::bf(xd), .out = out.data, .out_f32 = true, .rows = rows, .k = k,
                                 .m = m, .wq = cuda::detail::quant_args(wd)};
          if (!cuda::quant_mma_supported(g, {}, tile)) continue;
          cuda::launch_quant_mma(g, stream, {}, {.tile = tile, .workspace = ws.p, .workspace_bytes = ws.bytes});
          const auto ok = test::bitwise_equal(test::from_cuda(*be.cuda, out), want);
          EXPECT_TRUE(ok) << f.name << " " << cuda::quant_mma_tile_name(tile) << " rows=" << rows << " c0=" << c0;
          test::record("quant tensor-core dequantization", "bit-exact", ok ? 0 : 1, 0, bool(ok));
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

// The RMSNorm + per-token FP8 kernel gives the codes and scales of launch_rms_norm and
// launch_quantize_rows_fp8 in turn, bit for bit (zero and non-finite rows included), and
// declines the shapes it does not take.
TEST(CudaQuant, NormQuantizeFp8EqualsNormThenQuantizeBitForBit) {
  TF_REQUIRE_CUDA_DEVICE();
  test::Backends be;
  cudaStream_t stream = dynamic_cast<cuda::CudaBackend&>(*be.cuda).stream();
  for (int64_t k : {8, 264, 4096, 8192}) {
    const int64_t rows = 6;
    SCOPED_TRACE("k=" + std::to_string(k));
    Rng rng(test::seed_of({45, k}));
    std::vector<float> x = test::round_bf16(test::randn(rng, rows * k, 3.0));
    for (int64_t j = 0; j < k; ++j) x[size_t(1 * k + j)] = 0.0f;  // a zero row
    x[size_t(2 * k + k / 2)] = NAN;                                 // a non-finite row
    x[size_t(3 * k + k - 1)] = 3e4f;                                // an outlier
    std::vector<float> wv = test::randn(rng, k, 0.2);
    for (float& v : wv) v += 1.0f;
    const TensorView xd = test::to_cuda_bf16(*be.cuda, x, rows, k), wd = test::to_cuda_bf16(*be.cuda, wv, 1, k);
    TensorView h = be.cuda->alloc(DType::BF16, {rows, k});
    TensorView q0 = be.cuda->alloc(DType::U8, {rows, k}), s0 = be.cuda->alloc(DType::F32, {rows});
    TensorView q1 = be.cuda->alloc(DType::U8, {rows, k}), s1 = be.cuda->alloc(DType::F32, {rows});
    cuda::launch_rms_norm({.x = cuda::detail::bf(xd), .w = cuda::detail::bf(wd),
                           .out = static_cast<__nv_bfloat16*>(h.data), .rows = rows, .d = k, .eps = 1e-5f},
                          stream);
    cuda::launch_quantize_rows_fp8(cuda::detail::bf(h), rows, k, static_cast<uint8_t*>(q0.data),
                                   static_cast<float*>(s0.data), stream);
    ASSERT_TRUE(cuda::launch_rms_norm_quantize_rows_fp8(cuda::detail::bf(xd), cuda::detail::bf(wd), 1e-5f, rows, k,
                                                        static_cast<uint8_t*>(q1.data),
                                                        static_cast<float*>(s1.data), stream));
    const std::vector<float> want_s = test::from_cuda(*be.cuda, s0), got_s = test::from_cuda(*be.cuda, s1);
    EXPECT_TRUE(std::isnan(got_s[2]) && got_s[1] == 0.0f) << got_s[2] << " " << got_s[1];
    const bool ok = test::to_host_bytes(*be.cuda, q0) == test::to_host_bytes(*be.cuda, q1) &&
                    std::memcmp(want_s.data(), got_s.data(), want_s.size() * 4) == 0;
    EXPECT_TRUE(ok);
    test::record("rms_norm+quantize_rows_fp8 k=" + std::to_string(k), "bit-exact", ok ? 0 : 1, 0, ok);
  }
  // Past 8192 elements a row, or not a multiple of 8: declined, nothing written.
  const TensorView x = be.cuda->alloc(DType::BF16, {1, 8200}), w = be.cuda->alloc(DType::BF16, {8200});
  TensorView q = be.cuda->alloc(DType::U8, {8200}), s = be.cuda->alloc(DType::F32, {1});
  EXPECT_FALSE(cuda::launch_rms_norm_quantize_rows_fp8(cuda::detail::bf(x), cuda::detail::bf(w), 1e-5f, 1, 8200,
                                                       static_cast<uint8_t*>(q.data), static_cast<float*>(s.data),
                                                       stream));
  EXPECT_FALSE(cuda::launch_rms_norm_quantize_rows_fp8(cuda::detail::bf(x), cuda::detail::bf(w), 1e-5f, 1, 12,
                                                       static_cast<uint8_t*>(q.data), static_cast<float*>(s.data),
                                                       stream));
}

// The FP8 scale kernel fused with the residual add or the gated activation gives the BF16
// values of the scale kernel followed by launch_add / launch_swiglu / launch_geglu, bit for
// bit, with and without a bias, from BF16 and from F32 sums.
TEST(CudaQuant, Fp8ScaleThenEqualsScaleThenAddOrGate) {
  TF_REQUIRE_CUDA_DEVICE();
  test::Backends be;
  cudaStream_t stream = dynamic_cast<cuda::CudaBackend&>(*be.cuda).stream();
  for (const cuda::Fp8Then then : {cuda::Fp8Then::AddTo, cuda::Fp8Then::Swiglu, cuda::Fp8Then::Geglu}) {
    for (const auto& [rows, m] : {std::pair<int64_t, int64_t>{1, 16}, {7, 96}, {64, 1024}}) {
      for (const auto& [with_bias, sums_f32] : {std::pair{false, false}, {true, false}, {false, true}, {true, true}}) {
        const int64_t n_out = then == cuda::Fp8Then::AddTo ? m : m / 2;
        SCOPED_TRACE("then " + std::to_string(int(then)) + " rows=" + std::to_string(rows) + " m=" +
                     std::to_string(m) + (with_bias ? " bias" : "") + (sums_f32 ? " f32 sums" : " bf16 sums"));
        Rng rng(test::seed_of({46, int64_t(then), rows, m, with_bias}));
        const std::vector<float> acc = test::randn(rng, rows * m, 300.0);
        std::vector<float> xs = test::randn(rng, rows, 0.01), ws = test::randn(rng, m, 0.01);
        for (float& v : xs) v = std::abs(v) + 1e-3f;
        for (float& v : ws) v = std::abs(v) + 1e-3f;
        const std::vector<float> bias = test::round_bf16(test::randn(rng, m, 0.5));
        const std::vector<float> resid = test::round_bf16(test::randn(rng, rows * n_out, 2.0));
        auto f32 = [&](const std::vector<float>& v) {
          TensorView t = be.cuda->alloc(DType::F32, {int64_t(v.size())});
          be.cuda->copy_from_host(v.data(), t);
          return t;
        };
        const TensorView accd = sums_f32 ? f32(acc) : test::to_cuda_bf16(*be.cuda, acc, rows, m);
        const TensorView xsd = f32(xs), wsd = f32(ws);
        const TensorView bd = test::to_cuda_bf16(*be.cuda, bias, 1, m);
        const __nv_bfloat16* b = with_bias ? cuda::detail::bf(bd) : nullptr;
        // apart: the scale kernel into y, then the add / gated kernel
        TensorView y = be.cuda->alloc(DType::BF16, {rows, m});
        TensorView want = then == cuda::Fp8Then::AddTo ? test::to_cuda_bf16(*be.cuda, resid, rows, n_out)
                                                        : be.cuda->alloc(DType::BF16, {rows, n_out});
        cuda::launch_fp8_scale_epilogue(accd.data, sums_f32, static_cast<const float*>(xsd.data),
                                        static_cast<const float*>(wsd.data), b, rows, m, y.data, false, stream);
        auto* wp = static_cast<__nv_bfloat16*>(want.data);
        if (then == cuda::Fp8Then::AddTo) cuda::launch_add(wp, cuda::detail::bf(y), rows * m, stream);
        else if (then == cuda::Fp8Then::Swiglu) cuda::launch_swiglu(cuda::detail::bf(y), rows, m / 2, wp, stream);
        else cuda::launch_geglu(cuda::detail::bf(y), rows, m / 2, wp, stream);
        test::GuardedBf16 got(*be.cuda, rows, n_out);
        if (then == cuda::Fp8Then::AddTo) {
          std::vector<uint16_t> hr(resid.size());
          for (size_t i = 0; i < hr.size(); ++i) hr[i] = f32_to_bf16(resid[i]);
          be.cuda->copy_from_host(hr.data(), got.view());
        }
        cuda::launch_fp8_scale_then(then, accd.data, sums_f32, static_cast<const float*>(xsd.data),
                                    static_cast<const float*>(wsd.data), b, rows, m,
                                    static_cast<__nv_bfloat16*>(got.view().data), stream);
        const auto ok = test::bitwise_equal(got.values(), test::from_cuda(*be.cuda, want));
        EXPECT_TRUE(ok);
        EXPECT_TRUE(got.guard_intact());
        test::record("fp8 scale+then " + std::to_string(int(then)) + " m=" + std::to_string(m), "bit-exact",
                     ok ? 0 : 1, 0, ok && got.guard_intact());
      }
    }
  }
}

// The scale kernel that also quantizes for the next FP8 product (fp8_handoff.cu) against the
// kernels it replaces in turn: launch_fp8_scale_then, then launch_rms_norm_quantize_rows_fp8
// (AddTo, with the next norm) or launch_quantize_rows_fp8 (gated). The BF16 output, codes and
// scales bit for bit, with a zero and a non-finite row, with and without a bias, from BF16 and
// from F32 sums, and with unit scales (null: the sums are an outer-vector GEMM's BF16 output,
// against the kernels apart given scales of one), at both register depths of the gated
// kernel; the shapes it declines launch nothing.
TEST(CudaQuant, Fp8ScaleThenQuantizeEqualsTheKernelsApart) {
  TF_REQUIRE_CUDA_DEVICE();
  using cuda::Fp8Then;
  test::Backends be;
  Backend& b = *be.cuda;
  cudaStream_t stream = dynamic_cast<cuda::CudaBackend&>(b).stream();
  auto f32 = [&](const std::vector<float>& v) {
    TensorView t = b.alloc(DType::F32, {int64_t(v.size())});
    b.copy_from_host(v.data(), t);
    return t;
  };
  auto bytes = [&](const TensorView& t) {
    std::vector<uint8_t> h(t.nbytes());
    b.copy_to_host(t, h.data());
    return h;
  };
  const float eps = 1e-5f;
  // m: AddTo up to 8192 columns; gated n_out 14336 (4 chunks a thread) and 20000 (8 chunks)
  const std::pair<Fp8Then, int64_t> cases[] = {{Fp8Then::AddTo, 16},     {Fp8Then::AddTo, 4096},
                                               {Fp8Then::AddTo, 8192},   {Fp8Then::Swiglu, 32},
                                               {Fp8Then::Swiglu, 28672}, {Fp8Then::Swiglu, 40000},
                                               {Fp8Then::Geglu, 1040}};
  for (const auto& [then, m] : cases) {
    for (const int64_t rows : {1, 5}) {
      struct Variant {
        bool with_bias, sums_f32, unit;
      };
      for (const auto& [with_bias, sums_f32, unit] : {Variant{false, false, false}, Variant{true, false, false},
                                                      Variant{false, true, false}, Variant{true, true, false},
                                                      Variant{false, false, true}}) {
        const int64_t n_out = then == Fp8Then::AddTo ? m : m / 2;
        SCOPED_TRACE("then " + std::to_string(int(then)) + " rows=" + std::to_string(rows) + " m=" +
                     std::to_string(m) + (with_bias ? " bias" : "") + (sums_f32 ? " f32 sums" : " bf16 sums") +
                     (unit ? " unit scales" : ""));
        Rng rng(test::seed_of({49, int64_t(then), rows, m, with_bias}));
        std::vector<float> acc = test::randn(rng, rows * m, 300.0);
        if (rows > 2) {
          for (int64_t j = 0; j < m; ++j) acc[size_t(m + j)] = 0.0f;  // a zero row (without the bias)
          acc[size_t(2 * m + 3)] = INFINITY;                           // a non-finite row
        }
        std::vector<float> xs = test::randn(rng, rows, 0.01), ws = test::randn(rng, m, 0.01);
        for (float& v : xs) v = unit ? 1.0f : std::abs(v) + 1e-3f;
        for (float& v : ws) v = unit ? 1.0f : std::abs(v) + 1e-3f;
        std::vector<float> nw = test::randn(rng, n_out, 0.1);
        for (float& v : nw) v += 1.0f;
        const TensorView accd = sums_f32 ? f32(acc) : test::to_cuda_bf16(b, acc, rows, m);
        const TensorView xsd = f32(xs), wsd = f32(ws);
        const TensorView bd = test::to_cuda_bf16(b, test::randn(rng, m, 0.5), 1, m);
        const TensorView nwd = test::to_cuda_bf16(b, nw, 1, n_out);
        const std::vector<float> resid = test::round_bf16(test::randn(rng, rows * n_out, 2.0));
        const __nv_bfloat16* bp = with_bias ? cuda::detail::bf(bd) : nullptr;
        const __nv_bfloat16* norm = then == Fp8Then::AddTo ? cuda::detail::bf(nwd) : nullptr;
        struct Out {
          TensorView y, q, s;
        };
        auto make_out = [&] {
          return Out{test::to_cuda_bf16(b, resid, rows, n_out), b.alloc(DType::U8, {rows, n_out}),
                     b.alloc(DType::F32, {rows})};
        };
        const Out want = make_out(), got = make_out();
        const void* acc_p = accd.data;
        auto* xs_p = static_cast<const float*>(xsd.data);
        auto* ws_p = static_cast<const float*>(wsd.data);
        cuda::launch_fp8_scale_then(then, acc_p, sums_f32, xs_p, ws_p, bp, rows, m,
                                    static_cast<__nv_bfloat16*>(want.y.data), stream);
        if (then == Fp8Then::AddTo)
          ASSERT_TRUE(cuda::launch_rms_norm_quantize_rows_fp8(cuda::detail::bf(want.y), norm, eps, rows, m,
                                                              static_cast<uint8_t*>(want.q.data),
                                                              static_cast<float*>(want.s.data), stream));
        else
          cuda::launch_quantize_rows_fp8(cuda::detail::bf(want.y), rows, n_out, static_cast<uint8_t*>(want.q.data),
                                         static_cast<float*>(want.s.data), stream);
        ASSERT_TRUE(cuda::launch_fp8_scale_then_quantize(then, acc_p, sums_f32, unit ? nullptr : xs_p,
                                                         unit ? nullptr : ws_p, bp, rows, m,
                                                         static_cast<__nv_bfloat16*>(got.y.data), norm, eps,
                                                         static_cast<uint8_t*>(got.q.data),
                                                         static_cast<float*>(got.s.data), stream));
        const bool ok = bytes(got.y) == bytes(want.y) && bytes(got.q) == bytes(want.q) && bytes(got.s) == bytes(want.s);
        EXPECT_TRUE(bytes(got.y) == bytes(want.y)) << "output";
        EXPECT_TRUE(bytes(got.q) == bytes(want.q)) << "codes";
        EXPECT_TRUE(bytes(got.s) == bytes(want.s)) << "scales";
        if (rows > 2) {
          const std::vector<float> sc = test::from_cuda(b, got.s);
          // AddTo adds the zero row's sums to a residual, so only the gated rows are zero
          if (then != Fp8Then::AddTo && !with_bias) {
            EXPECT_EQ(sc[1], 0.0f) << "zero row";
          }
          EXPECT_TRUE(std::isnan(sc[2])) << "non-finite row";
        }
        test::record("fp8 scale+then+quantize " + std::to_string(int(then)) + " m=" + std::to_string(m),
                     "bit-exact", ok ? 0 : 1, 0, ok);
      }
    }
  }
  // Declined, nothing launched: AddTo without the next norm or past 8192 columns; a gated row
  // past 32768 outputs, or with a norm; m not a multiple of 16.
  const TensorView big = b.alloc(DType::F32, {2 * 32784}), bigw = b.alloc(DType::F32, {2 * 32784});
  const TensorView y = b.alloc(DType::BF16, {32784}), q = b.alloc(DType::U8, {32784}), sc = b.alloc(DType::F32, {1});
  const TensorView nw = b.alloc(DType::BF16, {8208});
  auto declines = [&](Fp8Then then, int64_t m, bool norm) {
    return !cuda::launch_fp8_scale_then_quantize(
        then, big.data, /*acc_f32=*/true, static_cast<const float*>(sc.data),
        static_cast<const float*>(bigw.data), nullptr, 1, m, static_cast<__nv_bfloat16*>(y.data),
        norm ? cuda::detail::bf(nw) : nullptr, eps, static_cast<uint8_t*>(q.data), static_cast<float*>(sc.data),
        stream);
  };
  EXPECT_TRUE(declines(Fp8Then::AddTo, 4096, false));
  EXPECT_TRUE(declines(Fp8Then::AddTo, 8208, true));
  EXPECT_TRUE(declines(Fp8Then::Swiglu, 2 * 32784, false));
  EXPECT_TRUE(declines(Fp8Then::Swiglu, 4096, true));
  EXPECT_TRUE(declines(Fp8Then::Geglu, 4104, false));
}

// Three FP8 W8A8 products chained as a decoder layer runs them: the output projection's add
// feeding the MLP's norm, gate/up + SwiGLU feeding the down projection, the down projection's
// add (MatmulFusion::feeds_next). With the handoff (the default) each epilogue quantizes for
// the next product, which skips its own quantization; the residual and the activation equal
// those of a backend without it bit for bit, and the products did read the handoffs.
TEST(CudaQuant, Fp8HandoffChainEqualsQuantizingAgain) {
  TF_REQUIRE_CUDA_DEVICE();
  using Epi = MatmulFusion::Epilogue;
  test::Backends be;
  const std::unique_ptr<Backend> off = make_backend(BackendKind::Cuda, BackendOptions{.fp8_handoff = false});
  auto& on = dynamic_cast<cuda::CudaBackend&>(*be.cuda);
  const QuantSpec fp8{.format = DType::FP8};
  const int64_t d = 256, ff = 512;
  const float eps = 1e-5f;
  const int64_t taken_before = on.fp8_handoffs_taken();
  for (const int64_t rows : {64, 300}) {
    SCOPED_TRACE("rows=" + std::to_string(rows));
    Rng rng(test::seed_of({50, rows}));
    const QuantizedWeight wo = test::random_quantized(rng, d, d, fp8);
    const QuantizedWeight wgu = test::random_quantized(rng, 2 * ff, d, fp8);
    const QuantizedWeight wd = test::random_quantized(rng, d, ff, fp8);
    const std::vector<float> attn = test::round_bf16(test::randn(rng, rows * d, 2.0));
    const std::vector<float> resid = test::round_bf16(test::randn(rng, rows * d, 2.0));
    std::vector<float> nwv = test::randn(rng, d, 0.1);
    for (float& v : nwv) v += 1.0f;
    const test::HostTensor nw = test::make_host(nwv, DType::BF16, {d});
    std::vector<std::vector<float>> xs, acts;
    for (Backend* b : {static_cast<Backend*>(&on), off.get()}) {
      const TensorView wod = b->upload(wo.view(), wo.dtype), wgud = b->upload(wgu.view(), wgu.dtype);
      const TensorView wdd = b->upload(wd.view(), wd.dtype), nwd = b->upload(nw.view(), DType::BF16);
      const TensorView attn_d = test::to_cuda_bf16(*b, attn, rows, d);
      const TensorView delta = b->alloc(DType::BF16, {rows, d}), h = b->alloc(DType::BF16, {rows, d});
      const TensorView gate_up = b->alloc(DType::BF16, {rows, 2 * ff}), act = b->alloc(DType::BF16, {rows, ff});
      TensorView x;
      // twice: the first run times the FP8 GEMMs' choices on first sight
      for (int rep = 0; rep < 2; ++rep) {
        x = test::to_cuda_bf16(*b, resid, rows, d);
        b->matmul_fused(attn_d, wod, TensorView{}, x,
                        MatmulFusion{.epilogue = Epi::AddTo, .y = delta, .feeds_next = true, .next_norm_w = nwd,
                                     .next_eps = eps});
        b->matmul_fused(x, wgud, TensorView{}, act,
                        MatmulFusion{.norm_w = nwd, .eps = eps, .h = h, .epilogue = Epi::Swiglu, .y = gate_up,
                                     .feeds_next = true});
        b->matmul_fused(act, wdd, TensorView{}, x, MatmulFusion{.epilogue = Epi::AddTo, .y = delta});
      }
      xs.push_back(test::from_cuda(*b, x));
      acts.push_back(test::from_cuda(*b, act));
    }
    EXPECT_TRUE(test::bitwise_equal(acts[0], acts[1])) << "activation";
    const auto ok = test::bitwise_equal(xs[0], xs[1]);
    EXPECT_TRUE(ok) << "residual";
    test::record("fp8 handoff chain rows=" + std::to_string(rows), "bit-exact", ok ? 0 : 1, 0, bool(ok));
  }
  // Each chain hands off twice where the timed choice takes the unit-scale epilogue (on these
  // small shapes it is within a few microseconds of the other, so it does).
  EXPECT_GT(on.fp8_handoffs_taken(), taken_before);
  EXPECT_EQ(dynamic_cast<cuda::CudaBackend&>(*off).fp8_handoffs_taken(), 0);
}

// matmul_fused on FP8 weights at the row counts of the W8A8 path (per-token FP8 activations
// and cuBLASLt): the fused kernels (norm + quantization, scale + add / gated activation)
// against the reference's ops in turn, and against the same backend with the FP8 fusion off
// (its ops apart: the same values up to the BF16 rounding of cuBLASLt's own scaling, where
// the timed choice differs).
TEST(CudaQuant, Fp8W8A8FusedMatchesRefAndItsOpsApart) {
  TF_REQUIRE_CUDA_DEVICE();
  using Epi = MatmulFusion::Epilogue;
  test::Backends be;
  const std::unique_ptr<Backend> apart = make_backend(BackendKind::Cuda, BackendOptions{.fp8_fusion = false});
  struct Kind {
    const char* name;
    bool norm;
    Epi epi;
  };
  const Kind kinds[] = {{"norm+matmul", true, Epi::Store},
                        {"matmul+add", false, Epi::AddTo},
                        {"norm+matmul+add", true, Epi::AddTo},
                        {"norm+matmul+swiglu", true, Epi::Swiglu},
                        {"matmul+geglu", false, Epi::Geglu}};
  const QuantSpec fp8{.format = DType::FP8};
  // 300 and 400 rows: one power-of-two bucket above CudaBackend::kFp8TimedRows, so the second
  // takes the first's timed choice (checked in the tuning report below).
  for (int64_t rows : {17, 32, 64, 130, 300, 400}) {
    for (const Kind& kind : kinds) {
      SCOPED_TRACE(std::string(kind.name) + " rows=" + std::to_string(rows));
      Rng rng(test::seed_of({47, rows, int64_t(kind.epi), kind.norm}));
      const FusedCase c(rng, rows, 256, 96, fp8, kind.norm, kind.epi);
      const std::vector<float> want = c.reference(*be.ref);
      std::vector<std::vector<float>> outs;
      for (Backend* b : {be.cuda.get(), apart.get()}) {
        test::GuardedBf16 got(*b, rows, c.m_out);
        // twice: the first call times the FP8 GEMM's choices on first sight
        for (int rep = 0; rep < 2; ++rep) c.run(*b, got.view());
        EXPECT_TRUE(got.guard_intact());
        outs.push_back(got.values());
      }
      test::expect_close("fp8 w8a8 fused " + std::string(kind.name), outs[0], want, 6e-2, true);
      test::expect_close("fp8 w8a8 apart " + std::string(kind.name), outs[1], want, 6e-2, true);
      test::expect_close("fp8 w8a8 fused vs apart " + std::string(kind.name), outs[0], outs[1], 1e-2, true);
    }
  }
  int timed = 0, inherited = 0;
  for (const std::string& line : be.cuda->tuning_report()) {
    if (line.find("fp8 w8a8 rows=300 ") != std::string::npos) timed += line.find("of its bucket") == std::string::npos;
    if (line.find("fp8 w8a8 rows=400 ") != std::string::npos) inherited += line.find("of its bucket") != std::string::npos;
  }
  EXPECT_GT(timed, 0);
  EXPECT_EQ(inherited, timed);  // every shape timed at 300 rows, reused at 400
}

// rope_kv_write reading an FP8 GEMM's unit-scale sums (RopeKvArgs::acc, the fused QKV path
// of matmul_fp8_fused) against the scale kernel into qkv, then rope_kv_write on qkv: the same
// qkv rows, pool rows and pool scales, bit for bit, for every pool dtype, with and without q/k
// norms, bias and partial rotation, from BF16 sums and (with norms) from F32 sums.
TEST(CudaQuant, RopeKvOnFp8SumsEqualsScaleThenRopeKv) {
  TF_REQUIRE_CUDA_DEVICE();
  test::Backends be;
  Backend& b = *be.cuda;
  cudaStream_t stream = dynamic_cast<cuda::CudaBackend&>(b).stream();
  constexpr int64_t kBlockSize = 16, kBlocks = 8, nh = 4, nkv = 2;
  for (DType kv : {DType::BF16, DType::I8, DType::FP8}) {
    for (const int64_t hd : {64, 128}) {
      for (const int64_t tokens : {3, 40}) {
        for (const bool extras : {false, true}) {  // q/k norms, bias, half the dims rotated
          SCOPED_TRACE(std::string(dtype_name(kv)) + " head_dim=" + std::to_string(hd) + " tokens=" +
                       std::to_string(tokens) + (extras ? " norms+bias+partial" : ""));
          Rng rng(test::seed_of({48, int64_t(kv), hd, tokens, extras}));
          const int64_t m = (nh + 2 * nkv) * hd, rows = kBlocks * nkv * kBlockSize;
          auto f32 = [&](const std::vector<float>& v) {
            TensorView t = b.alloc(DType::F32, {int64_t(v.size())});
            b.copy_from_host(v.data(), t);
            return t;
          };
          auto i32 = [&](const std::vector<int32_t>& v) {
            TensorView t = b.alloc(DType::I32, {int64_t(v.size())});
            b.copy_from_host(v.data(), t);
            return t;
          };
          std::vector<float> xs = test::randn(rng, tokens, 0.01), ws = test::randn(rng, m, 0.01);
          for (float& v : xs) v = std::abs(v) + 1e-3f;
          for (float& v : ws) v = std::abs(v) + 1e-3f;
          const bool sums_f32 = extras;
          const std::vector<float> sums = test::randn(rng, tokens * m, 300.0);
          const TensorView acc = sums_f32 ? f32(sums) : test::to_cuda_bf16(b, sums, tokens, m);
          const TensorView xsd = f32(xs), wsd = f32(ws);
          const TensorView bias = test::to_cuda_bf16(b, test::randn(rng, m, 0.5), 1, m);
          const TensorView qn = test::to_cuda_bf16(b, test::randn(rng, hd, 1.0), 1, hd);
          const TensorView kn = test::to_cuda_bf16(b, test::randn(rng, hd, 1.0), 1, hd);
          const int64_t n_rot = extras ? hd / 2 : hd;
          std::vector<float> freq(static_cast<size_t>(n_rot / 2));
          for (size_t i = 0; i < freq.size(); ++i) freq[i] = float(std::pow(10000.0, -2.0 * double(i) / double(n_rot)));
          std::vector<int32_t> pos(static_cast<size_t>(tokens)), slots(static_cast<size_t>(tokens));
          for (int64_t t = 0; t < tokens; ++t) {
            pos[size_t(t)] = int32_t(rng.uniform_int(0, 4000));
            slots[size_t(t)] = int32_t((t * 37) % (kBlocks * kBlockSize));  // distinct: tokens <= 128
          }
          const TensorView freqd = f32(freq), posd = i32(pos), slotd = i32(slots);
          struct Out {
            TensorView qkv, k, v, ks, vs;
          };
          auto make_out = [&] {
            Out o{b.alloc(DType::BF16, {tokens, m}), b.alloc(kv, {rows, hd}), b.alloc(kv, {rows, hd}),
                  b.alloc(DType::F32, {rows}), b.alloc(DType::F32, {rows})};
            for (const TensorView& t : {o.qkv, o.k, o.v, o.ks, o.vs}) {
              const std::vector<uint8_t> zero(t.nbytes(), 0);
              b.copy_from_host(zero.data(), t);
            }
            return o;
          };
          auto args = [&](const Out& o) {
            cuda::RopeKvArgs a{.qkv = static_cast<__nv_bfloat16*>(o.qkv.data),
                               .inv_freq = static_cast<const float*>(freqd.data),
                               .n_rot = n_rot,
                               .q_norm = extras ? cuda::detail::bf(qn) : nullptr,
                               .k_norm = extras ? cuda::detail::bf(kn) : nullptr,
                               .eps = 1e-6f,
                               .k_pool = o.k.data,
                               .v_pool = o.v.data,
                               .kv_dtype = kv,
                               .k_scale = kv == DType::BF16 ? nullptr : static_cast<float*>(o.ks.data),
                               .v_scale = kv == DType::BF16 ? nullptr : static_cast<float*>(o.vs.data),
                               .n_heads = nh,
                               .n_kv_heads = nkv,
                               .head_dim = hd,
                               .block_size = kBlockSize};
            a.batch.positions = static_cast<const int32_t*>(posd.data);
            a.batch.slot_mapping = static_cast<const int32_t*>(slotd.data);
            a.batch.n_tokens = int32_t(tokens);
            return a;
          };
          const __nv_bfloat16* bp = extras ? cuda::detail::bf(bias) : nullptr;
          const Out want = make_out(), got = make_out();
          cuda::launch_fp8_scale_epilogue(acc.data, sums_f32, static_cast<const float*>(xsd.data),
                                          static_cast<const float*>(wsd.data), bp, tokens, m, want.qkv.data, false,
                                          stream);
          cuda::launch_rope_kv_write(args(want), stream);
          cuda::RopeKvArgs a = args(got);
          a.acc = acc.data;
          a.acc_f32 = sums_f32;
          a.acc_x_scale = static_cast<const float*>(xsd.data);
          a.acc_w_scale = static_cast<const float*>(wsd.data);
          a.acc_bias = bp;
          cuda::launch_rope_kv_write(a, stream);
          auto bytes = [&](const TensorView& t) {
            std::vector<uint8_t> h(t.nbytes());
            b.copy_to_host(t, h.data());
            return h;
          };
          EXPECT_TRUE(test::bitwise_equal(test::from_cuda(b, got.qkv), test::from_cuda(b, want.qkv))) << "qkv";
          EXPECT_EQ(bytes(got.k), bytes(want.k)) << "K pool";
          EXPECT_EQ(bytes(got.v), bytes(want.v)) << "V pool";
          EXPECT_EQ(bytes(got.ks), bytes(want.ks)) << "K scales";
          EXPECT_EQ(bytes(got.vs), bytes(want.vs)) << "V scales";
        }
      }
    }
  }
}

// matmul_fused with quantized weights (the GEMV with its prologue / epilogues where it runs)
// against the reference's ops in turn; then, at up to 8 rows, every decode tile of the
// tensor-core kernel that takes the fusion, launched directly (the backend keeps the one it
// timed fastest).
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
        SCOPED_TRACE(std::string(f.name) + " " + kind.name + " rows=" + std::to_string(rows));
        Rng rng(test::seed_of({44, int64_t(f.spec.format), f.spec.group_size, rows, int64_t(kind.epi)}));
        // k = 2048 at one row: every k-split GEMV shared-memory ring takes it (W4 g128, W8)
        const FusedCase c(rng, rows, rows == 1 ? 2048 : 256, 96, f.spec, kind.norm, kind.epi);
        const int64_t k = c.k, m = c.m, m_out = c.m_out;
        const QuantizedWeight& w = c.w;
        test::GuardedBf16 got(*be.cuda, rows, m_out);
        c.run(*be.cuda, got.view());
        // rows > 8 (or > 4 with the norm) run apart: the matmul then takes the tensor-core /
        // W8A8 kernels, whose tolerances (above) add to the fused ones, as does the weights'
        // rounding of W4 with small groups on tensor cores
        const bool rounded_weights = f.spec.format == DType::W4 && f.spec.group_size % 128 != 0;
        const double tol = kind.tol + (rows > 4 || rounded_weights ? 3e-3 : 0.0);
        const std::vector<float> want = c.reference(*be.ref);
        test::expect_close("quant matmul_fused " + std::string(kind.name), got.values(), want,
                           f.spec.format == DType::FP8 && rows > 8 ? 6e-2 : tol, got.guard_intact());
        if (rows > cuda::kGemvMaxRows) continue;
        const TensorView wd = be.cuda->upload(w.view(), w.dtype), xd = test::to_cuda_bf16(*be.cuda, c.x, rows, k);
        const TensorView nwd = be.cuda->upload(c.nw.view(), DType::BF16);
        cudaStream_t stream = dynamic_cast<cuda::CudaBackend&>(*be.cuda).stream();
        const cuda::GemvFusion gf{.norm_w = kind.norm ? cuda::detail::bf(nwd) : nullptr, .eps = 1e-5f,
                                  .epilogue = kind.epi == Epi::AddTo    ? cuda::GemvEpilogue::AddTo
                                              : kind.epi == Epi::Swiglu ? cuda::GemvEpilogue::Swiglu
                                                                        : cuda::GemvEpilogue::Store};
        for (cuda::QuantMmaTile tile : cuda::kQuantMmaTiles) {
          test::GuardedBf16 direct(*be.cuda, rows, m_out);
          const cuda::GemmArgs g{.x = cuda::detail::bf(xd), .out = direct.view().data, .rows = rows, .k = k, .m = m,
                                 .wq = cuda::detail::quant_args(wd)};
          if (!cuda::quant_mma_supported(g, gf, tile)) continue;
          SCOPED_TRACE(cuda::quant_mma_tile_name(tile));
          c.load_residual(*be.cuda, direct.view());
          cuda::launch_quant_mma(g, stream, gf, {.tile = tile});
          test::expect_close("quant tensor-core fused " + std::string(kind.name) + " " +
                                 cuda::quant_mma_tile_name(tile),
                             direct.values(), want, tol, direct.guard_intact());
        }
        for (const cuda::Half2Options& o : kHalf2Variants) {
          test::GuardedBf16 direct(*be.cuda, rows, m_out);
          const cuda::GemmArgs g{.x = cuda::detail::bf(xd), .out = direct.view().data, .rows = rows, .k = k, .m = m,
                                 .wq = cuda::detail::quant_args(wd)};
          if (!cuda::gemv_half2_supported(g, gf, o)) continue;
          c.load_residual(*be.cuda, direct.view());
          cuda::launch_gemv_half2(g, stream, gf, o);
          test::expect_close("quant half2 gemv fused " + std::string(kind.name) + half2_name(o), direct.values(), want,
                             tol, direct.guard_intact());
        }
      }
    }
  }
}

}  // namespace
}  // namespace tf

// LtGemm (src/backend/cuda/gemm_lt.cpp): every candidate the backend may time and keep, the
// heuristic's algorithms and their split-K copies, computes the same product. The BF16
// candidates against the reference backend's matmul (5e-3 rel L2, as the BF16 matmul); the FP8
// W8A8 candidates, at both scalings the backend times, against the reference on the same
// per-token FP8 activations (5e-3, test_cuda_quant.cpp's FP8 tolerance). Shapes: skinny ones
// where split-K pays (64 rows of a wide k, down's k = 14336), few and odd row counts, and
// feature counts that are not a multiple of cuBLASLt's tiles.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemm_lt.h"
#include "backend/cuda/quant_gemm.cuh"
#include "cuda_test_util.h"
#include "op_test_util.h"
#include "quant/kv_fp8.h"
#include "quant_test_util.h"

namespace tf {
namespace {

using test::Rng;

constexpr size_t kWorkspace = 32u << 20;

// Device scratch from the CUDA backend; the LtGemm calls run on the default stream, with a
// device synchronization before the results are read.
void* scratch(Backend& cuda, size_t bytes) { return cuda.alloc(DType::U8, {int64_t(bytes)}).data; }

// Candidates that split k (lt_algo_name ends in "split-K N").
size_t split_copies(const std::vector<std::string>& names) {
  size_t n = 0;
  for (const std::string& s : names) n += !s.ends_with(" split-K 1");
  return n;
}

TEST(CudaLtGemm, EveryBf16CandidateMatchesRef) {
  TF_REQUIRE_CUDA_DEVICE();
  test::Backends be;
  for (auto [rows, k, m] : {std::array<int64_t, 3>{64, 4096, 512}, {17, 1024, 272}, {3, 2048, 128}}) {
    SCOPED_TRACE("rows=" + std::to_string(rows) + " k=" + std::to_string(k) + " m=" + std::to_string(m));
    Rng rng(test::seed_of({53, rows, k, m}));
    const std::vector<float> x = test::round_bf16(test::randn(rng, rows * k, 1.0));
    const std::vector<float> w = test::round_bf16(test::randn(rng, m * k, 1.0 / std::sqrt(double(k))));
    TensorView out_ref = be.ref->alloc(DType::F32, {rows, m});
    be.ref->matmul(test::to_device(*be.ref, x, rows, k), test::to_device(*be.ref, w, m, k), TensorView{}, out_ref);
    const std::vector<float> want = test::to_host_f32(*be.ref, out_ref);

    const TensorView xd = test::to_cuda_bf16(*be.cuda, x, rows, k), wd = test::to_cuda_bf16(*be.cuda, w, m, k);
    void* ws = scratch(*be.cuda, kWorkspace);
    cuda::GemmArgs g{.x = static_cast<const __nv_bfloat16*>(xd.data), .w = static_cast<const __nv_bfloat16*>(wd.data),
                     .rows = rows, .k = k, .m = m};
    cuda::LtGemm lt;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<cuda::LtAlgo> algos = lt.candidates(g, 8, kWorkspace);
    std::vector<std::string> names;
    for (const cuda::LtAlgo& a : algos) {
      names.push_back(cuda::lt_algo_name(a));
      SCOPED_TRACE(names.back());
      test::GuardedBf16 out(*be.cuda, rows, m);  // NaNs where nothing is written
      g.out = out.view().data;
      lt.run(g, a, ws, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      test::expect_close("cublasLt bf16 " + names.back(), out.values(), want, 5e-3, out.guard_intact());
    }
    std::printf("  bf16 rows=%lld k=%lld m=%lld: %zu candidates, %zu split-K copies\n", (long long)rows,
                (long long)k, (long long)m, algos.size(), split_copies(names));
    EXPECT_FALSE(algos.empty());
  }
}

TEST(CudaLtGemm, EveryFp8CandidateMatchesRef) {
  TF_REQUIRE_CUDA_DEVICE();
  test::Backends be;
  for (auto [rows, k, m] :
       {std::array<int64_t, 3>{64, 4096, 512}, {17, 1024, 272}, {130, 2048, 128}, {5, 512, 96}, {64, 14336, 256}}) {
    SCOPED_TRACE("rows=" + std::to_string(rows) + " k=" + std::to_string(k) + " m=" + std::to_string(m));
    Rng rng(test::seed_of({59, rows, k, m}));
    const std::vector<float> x = test::round_bf16(test::randn(rng, rows * k, 2.0));
    const QuantizedWeight w = test::random_quantized(rng, m, k, QuantSpec{.format = DType::FP8});
    // the reference on the activations the GEMM sees: each row in E4M3 with its own scale
    std::vector<float> xq(x.size());
    std::vector<uint8_t> codes(static_cast<size_t>(k));
    for (int64_t r = 0; r < rows; ++r) {
      const float s = quantize_row_kv_fp8(x.data() + r * k, k, codes.data());
      for (int64_t j = 0; j < k; ++j) xq[size_t(r * k + j)] = dequantize_kv_fp8(codes[size_t(j)], s);
    }
    TensorView out_ref = be.ref->alloc(DType::F32, {rows, m});
    be.ref->matmul(test::to_device(*be.ref, xq, rows, k), be.ref->upload(w.view(), w.dtype), TensorView{}, out_ref);
    const std::vector<float> want = test::to_host_f32(*be.ref, out_ref);

    const TensorView xd = test::to_cuda_bf16(*be.cuda, x, rows, k), wd = be.cuda->upload(w.view(), w.dtype);
    auto* q = static_cast<uint8_t*>(scratch(*be.cuda, size_t(rows * k)));
    auto* qs = static_cast<float*>(scratch(*be.cuda, size_t(rows) * 4));
    auto* acc = static_cast<float*>(scratch(*be.cuda, size_t(rows * m) * 4));
    void* ws = scratch(*be.cuda, kWorkspace);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cuda::launch_quantize_rows_fp8(static_cast<const __nv_bfloat16*>(xd.data), rows, k, q, qs, nullptr);
    cuda::LtGemm lt;
    // the epilogue scaling with its sums in BF16 (the default) and in F32
    for (auto [s, sums_f32] : {std::pair{cuda::Fp8Scaling::OuterVectors, false}, {cuda::Fp8Scaling::Epilogue, false},
                               {cuda::Fp8Scaling::Epilogue, true}}) {
      cuda::Fp8GemmArgs a{.xq = q, .x_scale = qs, .wq = static_cast<const uint8_t*>(wd.data),
                          .w_scale = static_cast<const float*>(wd.scales), .rows = rows, .k = k, .m = m, .scaling = s,
                          .acc_f32 = sums_f32};
      const std::string label = std::string(cuda::fp8_scaling_name(s)) + (sums_f32 ? " (F32 sums)" : "");
      if (!lt.fp8_available(a, kWorkspace)) continue;
      const int n = lt.fp8_algorithms(a, kWorkspace);
      std::vector<std::string> names;
      for (int i = 0; i < n; ++i) {
        a.algo = i;
        names.push_back(lt.fp8_algorithm_name(a, kWorkspace));
        SCOPED_TRACE(label + " #" + std::to_string(i) + " " + names.back());
        test::GuardedBf16 out(*be.cuda, rows, m);  // NaNs where nothing is written
        a.out = out.view().data;
        lt.run_fp8(a, ws, kWorkspace, acc, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        test::expect_close("cublasLt fp8 " + label + " " + names.back(),
                           out.values(), want, 5e-3, out.guard_intact());
      }
      std::printf("  fp8 %s rows=%lld k=%lld m=%lld: %d candidates, %zu split-K copies\n", label.c_str(),
                  (long long)rows, (long long)k, (long long)m, n, split_copies(names));
      EXPECT_GT(n, 0);
    }
  }
}

}  // namespace
}  // namespace tf

// cuBLASLt for the small-batch matmuls. cublasGemmEx runs the first algorithm of cuBLAS's
// heuristic; for skinny decode shapes (a few to 64 rows against a large weight matrix) a
// lower-ranked one (other tiles, split-K) can stream the weights faster. LtGemm lists the
// heuristic's first candidates for a shape; CudaBackend times them on first sight next to
// cublasGemmEx and the GEMV and keeps the fastest (cuda_matmul.cpp).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <map>
#include <tuple>
#include <vector>

#include "backend/cuda/gemm.cuh"

namespace tf::cuda {

struct LtAlgo {
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;  // bytes the algorithm needs
};

// An FP8 (E4M3) W8A8 product: out[rows, m] = (xq @ wq^T)[r, j] * x_scale[r] * w_scale[j]
// (+ bias[j]), rounded once to BF16 (or F32). xq holds activations quantized per token
// (launch_quantize_rows_fp8), wq an FP8 weight (quant/formats.h).
struct Fp8GemmArgs {
  const uint8_t* xq = nullptr;          // [rows, k] E4M3
  const float* x_scale = nullptr;       // [rows]
  const uint8_t* wq = nullptr;          // [m, k] E4M3
  const float* w_scale = nullptr;       // [m]
  const __nv_bfloat16* bias = nullptr;  // [m] or nullptr
  void* out = nullptr;                  // [rows, m] BF16 or F32
  bool out_f32 = false;
  int64_t rows = 0, k = 0, m = 0;
};

class LtGemm {
 public:
  LtGemm();
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Up to `n` algorithms for g's shape that need at most `max_workspace` bytes (same layout
  // mapping as gemm.cu; no bias: callers keep biased matmuls on cublasGemmEx).
  std::vector<LtAlgo> candidates(const GemmArgs& g, int n, size_t max_workspace);
  // out = x @ w^T (g.accumulate: out += x @ w^T) with algorithm `a`.
  void run(const GemmArgs& g, const LtAlgo& a, void* workspace, cudaStream_t stream);

  // FP8 GEMMs need k and m multiples of 16 (cuBLASLt's FP8 leading-dimension rule).
  static bool fp8_supported(const Fp8GemmArgs& a) { return a.k % 16 == 0 && a.m % 16 == 0 && a.rows > 0; }
  // Whether cuBLASLt applies the two scale vectors itself for this shape
  // (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, no bias); otherwise run_fp8 runs the GEMM
  // with unit scales into an F32 buffer [rows, m] and a small kernel applies the scales and
  // the bias (launch_fp8_scale_epilogue). Decided once per shape, from the heuristic's answer.
  bool fp8_outer_scales(const Fp8GemmArgs& a, size_t max_workspace);
  // `acc` (F32 [rows, m]) is needed when fp8_outer_scales is false.
  void run_fp8(const Fp8GemmArgs& a, void* workspace, size_t max_workspace, float* acc, cudaStream_t stream);

 private:
  // Descriptors of one shape, made once (host objects; a recorded graph keeps the kernel).
  struct Descs {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  };
  const Descs& descs(const GemmArgs& g);
  static void destroy(const Descs& d);

  // One FP8 shape: its descriptors and algorithm, with the scales as outer vectors or not.
  struct Fp8Plan {
    Descs d;
    LtAlgo algo;
    bool outer = false;
    bool ok = false;  // an algorithm was found
  };
  const Fp8Plan& fp8_plan(const Fp8GemmArgs& a, size_t max_workspace);

  cublasLtHandle_t handle_ = nullptr;
  std::map<std::tuple<int64_t, int64_t, int64_t, bool>, Descs> descs_;  // rows, k, m, F32 out
  std::map<std::tuple<int64_t, int64_t, int64_t, bool, bool>, Fp8Plan> fp8_;  // rows, k, m, F32 out, bias
};

}  // namespace tf::cuda

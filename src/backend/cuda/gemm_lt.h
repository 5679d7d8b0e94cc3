// cuBLASLt for the small-batch matmuls. cublasGemmEx runs the first algorithm of cuBLAS's
// heuristic; for skinny decode shapes (a few to 64 rows against a large weight matrix) a
// lower-ranked one (other tiles, split-K) can stream the weights faster. LtGemm lists the
// heuristic's first candidates for a shape, and copies of them that split k, which it lists
// for some shapes only; CudaBackend times them on first sight next to cublasGemmEx and the
// GEMV and keeps the fastest (cuda_matmul.cpp; on the H200 a split copy wins for the down
// projection at several row counts, docs/PERF.md).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/gemm.cuh"

namespace tf::cuda {

struct LtAlgo {
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;  // bytes the algorithm needs
};
// "id I tile T stages S split-K N": the configuration cuBLASLt reports for `a`.
std::string lt_algo_name(const LtAlgo& a);

// How an FP8 GEMM applies the weight's per-row and the activations' per-token scales:
//   OuterVectors  cuBLASLt's outer-vector scale mode applies both in its epilogue (no bias)
//   AlphaVector   cuBLASLt's per-row alpha vector applies the weight's, then a small kernel
//                 the per-token ones and the bias, in place (a second BF16 rounding)
//   Epilogue      unit scales into a buffer of BF16 sums (F32 for an F32 output, or with
//                 acc_f32), then a small kernel applies both and the bias
// Auto: the first of these cuBLASLt offers an algorithm for, in this order. Unscaled: the bare
// GEMM into `out` as F32, no scales nor bias (the benchmark's FP8 peak).
enum class Fp8Scaling : uint8_t { Auto, OuterVectors, AlphaVector, Epilogue, Unscaled };
const char* fp8_scaling_name(Fp8Scaling s);

// An FP8 (E4M3) W8A8 product: out[rows, m] = (xq @ wq^T)[r, j] * x_scale[r] * w_scale[j]
// (+ bias[j]), rounded to BF16 (or F32). xq holds activations quantized per token
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
  Fp8Scaling scaling = Fp8Scaling::Auto;
  // Hopper's fast FP8 accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM): the tensor cores keep
  // the running sum at their own precision instead of promoting it to FP32 every few k-steps
  // (bench_quant_gemm on the H200: up to 1.25x faster at 16..64 rows, 1.1x at 4096; the CUDA
  // tests hold it to the same 5e-3 as the FP32 path).
  bool fast_accum = true;
  // Which of the heuristic's algorithms for this shape and scaling runs (fp8_algorithms):
  // -1 the heuristic's first.
  int algo = -1;
  // Epilogue scaling: only the unit-scale GEMM into `acc`; the caller scales (for instance
  // with the add or gated activation that follows: launch_fp8_scale_then).
  bool acc_only = false;
  // Epilogue scaling: the unit-scale sums as F32 (4 bytes each written and read again) rather
  // than BF16 (2; rounded once more before the scales). Implied by out_f32.
  bool acc_f32 = false;
  bool sums_f32() const { return acc_f32 || out_f32; }
};

class LtGemm {
 public:
  // split_k: the candidate lists add split-K copies of the heuristic's algorithms.
  explicit LtGemm(bool split_k = true);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Up to `n` of the heuristic's algorithms for g's shape that need at most `max_workspace`
  // bytes, then their split-K copies (same layout mapping as gemm.cu; no bias: callers keep
  // biased matmuls on cublasGemmEx).
  std::vector<LtAlgo> candidates(const GemmArgs& g, int n, size_t max_workspace);
  // out = x @ w^T (g.accumulate: out += x @ w^T) with algorithm `a`.
  void run(const GemmArgs& g, const LtAlgo& a, void* workspace, cudaStream_t stream);

  // FP8 GEMMs need k and m multiples of 16 (cuBLASLt's FP8 leading-dimension rule).
  static bool fp8_supported(const Fp8GemmArgs& a) { return a.k % 16 == 0 && a.m % 16 == 0 && a.rows > 0; }
  // The scaling a.scaling resolves to for this shape (decided once per shape, from the
  // heuristic's answers), and whether cuBLASLt offers it at all (a forced mode may be missing;
  // Auto always resolves or fails).
  Fp8Scaling fp8_scaling(const Fp8GemmArgs& a, size_t max_workspace);
  bool fp8_available(const Fp8GemmArgs& a, size_t max_workspace);
  // How many algorithms there are for a's shape and (explicit) scaling: the heuristic's, up
  // to kFp8Candidates, best-ranked first, then their split-K copies. The caller may time them
  // (a.algo) and keep the fastest, since for skinny products the heuristic's first is often
  // not (H200, 64 rows of 4096 x 14336: its first streams the weights at a third of the copy
  // bandwidth).
  static constexpr int kFp8Candidates = 16;
  int fp8_algorithms(const Fp8GemmArgs& a, size_t max_workspace);
  // "id I tile T stages S split-K N" of the algorithm a.algo of a's shape and scaling.
  std::string fp8_algorithm_name(const Fp8GemmArgs& a, size_t max_workspace);
  // Epilogue needs `acc`: [rows, m] of F32 where a.sums_f32(), else BF16.
  void run_fp8(const Fp8GemmArgs& a, void* workspace, size_t max_workspace, void* acc, cudaStream_t stream);
  // The heuristic's status for each explicit scaling of a's shape, for the benchmark's log.
  std::string fp8_probe(const Fp8GemmArgs& a, size_t max_workspace);

 private:
  // Descriptors of one shape, made once (host objects; a recorded graph keeps the kernel).
  struct Descs {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  };
  const Descs& descs(const GemmArgs& g);
  static void destroy(const Descs& d);

  // One FP8 shape and scaling: its descriptors and algorithm.
  struct Fp8Plan {
    Descs d;
    std::vector<LtAlgo> algos;  // the heuristic's, best-ranked first, then split-K copies
    Fp8Scaling scaling = Fp8Scaling::Auto;
    cublasStatus_t status = CUBLAS_STATUS_NOT_SUPPORTED;  // the heuristic's answer
    bool ok = false;                                      // an algorithm was found
    const LtAlgo& pick(int i) const { return algos[size_t(i >= 0 && i < int(algos.size()) ? i : 0)]; }
  };
  // The plan of a's shape with scaling s (not Auto), made on first use; ok = false when
  // cuBLASLt offers none.
  const Fp8Plan& fp8_plan(const Fp8GemmArgs& a, Fp8Scaling s, size_t max_workspace);
  const Fp8Plan& fp8_resolved(const Fp8GemmArgs& a, size_t max_workspace);

  // Appends to `algos` copies of its algorithms that support split-K and run unsplit, at
  // kSplits splits with an FP32 reduction, as far as cublasLtMatmulAlgoCheck accepts them for
  // d's shape within max_workspace.
  void add_split_k(const Descs& d, size_t max_workspace, std::vector<LtAlgo>& algos) const;

  bool split_k_ = true;
  cublasLtHandle_t handle_ = nullptr;
  std::map<std::tuple<int64_t, int64_t, int64_t, bool>, Descs> descs_;  // rows, k, m, F32 out
  // rows, k, m, F32 out, bias, scaling, fast accumulation
  std::map<std::tuple<int64_t, int64_t, int64_t, bool, bool, Fp8Scaling, bool, bool>, Fp8Plan> fp8_;
};

}  // namespace tf::cuda

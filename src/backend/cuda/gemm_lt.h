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

 private:
  // Descriptors of one shape, made once (host objects; a recorded graph keeps the kernel).
  struct Descs {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  };
  const Descs& descs(const GemmArgs& g);

  cublasLtHandle_t handle_ = nullptr;
  std::map<std::tuple<int64_t, int64_t, int64_t, bool>, Descs> descs_;  // rows, k, m, F32 out
};

}  // namespace tf::cuda

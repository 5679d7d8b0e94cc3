#include "backend/cuda/gemm_lt.h"

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace tf::cuda {

LtGemm::LtGemm() { TF_CUBLAS_CHECK(cublasLtCreate(&handle_)); }

LtGemm::~LtGemm() {
  for (auto& [key, d] : descs_) {
    cublasLtMatrixLayoutDestroy(d.a);
    cublasLtMatrixLayoutDestroy(d.b);
    cublasLtMatrixLayoutDestroy(d.c);
    cublasLtMatmulDescDestroy(d.op);
  }
  if (handle_) cublasLtDestroy(handle_);
}

// The mapping of gemm.cu: out^T (col-major m x rows, ld m) = W_c^T (W_c: col-major k x m,
// ld k) . X_c (col-major k x rows, ld k); C and D are the output.
const LtGemm::Descs& LtGemm::descs(const GemmArgs& g) {
  const auto key = std::make_tuple(g.rows, g.k, g.m, g.out_f32);
  if (auto it = descs_.find(key); it != descs_.end()) return it->second;
  Descs d;
  TF_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  TF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  TF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  TF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, CUDA_R_16BF, uint64_t(g.k), uint64_t(g.m), g.k));
  TF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.b, CUDA_R_16BF, uint64_t(g.k), uint64_t(g.rows), g.k));
  TF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.c, g.out_f32 ? CUDA_R_32F : CUDA_R_16BF, uint64_t(g.m),
                                             uint64_t(g.rows), g.m));
  return descs_.emplace(key, d).first->second;
}

std::vector<LtAlgo> LtGemm::candidates(const GemmArgs& g, int n, size_t max_workspace) {
  TF_ASSERT(!g.bias, "LtGemm: biased matmuls stay on cublasGemmEx");
  const Descs& d = descs(g);
  cublasLtMatmulPreference_t pref = nullptr;
  TF_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  TF_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                                                       sizeof(max_workspace)));
  std::vector<cublasLtMatmulHeuristicResult_t> found(size_t(n > 0 ? n : 1));
  int returned = 0;
  const cublasStatus_t s =
      cublasLtMatmulAlgoGetHeuristic(handle_, d.op, d.a, d.b, d.c, d.c, pref, n, found.data(), &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  std::vector<LtAlgo> out;
  if (s != CUBLAS_STATUS_SUCCESS) return out;  // no algorithm for this shape: not a candidate
  for (int i = 0; i < returned; ++i)
    if (found[size_t(i)].state == CUBLAS_STATUS_SUCCESS)
      out.push_back(LtAlgo{.algo = found[size_t(i)].algo, .workspace = found[size_t(i)].workspaceSize});
  return out;
}

void LtGemm::run(const GemmArgs& g, const LtAlgo& a, void* workspace, cudaStream_t stream) {
  if (g.rows == 0 || g.m == 0) return;
  const Descs& d = descs(g);
  const float alpha = 1.0f, beta = g.accumulate ? 1.0f : 0.0f;
  TF_CUBLAS_CHECK(cublasLtMatmul(handle_, d.op, &alpha, g.w, d.a, g.x, d.b, &beta, g.out, d.c, g.out, d.c, &a.algo,
                                 workspace, a.workspace, stream));
}

}  // namespace tf::cuda

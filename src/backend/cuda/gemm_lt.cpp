#include "backend/cuda/gemm_lt.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/quant_gemm.cuh"
#include "core/error.h"

namespace tf::cuda {

LtGemm::LtGemm() { TF_CUBLAS_CHECK(cublasLtCreate(&handle_)); }

void LtGemm::destroy(const Descs& d) {
  if (d.a) cublasLtMatrixLayoutDestroy(d.a);
  if (d.b) cublasLtMatrixLayoutDestroy(d.b);
  if (d.c) cublasLtMatrixLayoutDestroy(d.c);
  if (d.op) cublasLtMatmulDescDestroy(d.op);
}

LtGemm::~LtGemm() {
  for (auto& [key, d] : descs_) destroy(d);
  for (auto& [key, p] : fp8_) destroy(p.d);
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

// ---- FP8 ------------------------------------------------------------------------------------

// The mapping of gemm.cu with E4M3 A (the weight, transposed) and B (the activations): the
// "TN" form cuBLASLt's FP8 kernels require. With outer-vector scales, A's vector has one
// entry per row of op(A) (the m output features) and B's one per column of op(B) (the rows),
// which is w_scale and x_scale. The first plan tried per shape has the outer scales (and no
// bias); if the heuristic offers no algorithm for it, the plan is unit scales, F32 output.
const LtGemm::Fp8Plan& LtGemm::fp8_plan(const Fp8GemmArgs& a, size_t max_workspace) {
  const auto key = std::make_tuple(a.rows, a.k, a.m, a.out_f32, a.bias != nullptr);
  if (auto it = fp8_.find(key); it != fp8_.end()) return it->second;
  auto make = [&](bool outer) {
    Fp8Plan p;
    p.outer = outer;
    TF_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    TF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.d.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
    TF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.d.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
    if (outer) {
      const cublasLtMatmulMatrixScale_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      TF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.d.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
      TF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.d.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
    }
    const cudaDataType_t out_type = outer && !a.out_f32 ? CUDA_R_16BF : CUDA_R_32F;
    TF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d.a, CUDA_R_8F_E4M3, uint64_t(a.k), uint64_t(a.m), a.k));
    TF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d.b, CUDA_R_8F_E4M3, uint64_t(a.k), uint64_t(a.rows), a.k));
    TF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d.c, out_type, uint64_t(a.m), uint64_t(a.rows), a.m));
    cublasLtMatmulPreference_t pref = nullptr;
    TF_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    TF_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &max_workspace, sizeof(max_workspace)));
    cublasLtMatmulHeuristicResult_t found{};
    int returned = 0;
    const cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(handle_, p.d.op, p.d.a, p.d.b, p.d.c, p.d.c, pref, 1, &found, &returned);
    cublasLtMatmulPreferenceDestroy(pref);
    p.ok = s == CUBLAS_STATUS_SUCCESS && returned > 0 && found.state == CUBLAS_STATUS_SUCCESS;
    if (p.ok) p.algo = LtAlgo{.algo = found.algo, .workspace = found.workspaceSize};
    return p;
  };
  Fp8Plan plan;
  if (!a.bias) {
    plan = make(/*outer=*/true);
    if (!plan.ok) destroy(plan.d);
  }
  if (!plan.ok) plan = make(/*outer=*/false);
  if (!plan.ok) fail("cuBLASLt has no FP8 GEMM for rows={} k={} m={}", a.rows, a.k, a.m);
  return fp8_.emplace(key, plan).first->second;
}

bool LtGemm::fp8_outer_scales(const Fp8GemmArgs& a, size_t max_workspace) { return fp8_plan(a, max_workspace).outer; }

void LtGemm::run_fp8(const Fp8GemmArgs& a, void* workspace, size_t max_workspace, float* acc, cudaStream_t stream) {
  if (a.rows == 0 || a.m == 0) return;
  const Fp8Plan& p = fp8_plan(a, max_workspace);
  const float alpha = 1.0f, beta = 0.0f;
  if (p.outer) {
    TF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.d.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a.w_scale,
                                                   sizeof(a.w_scale)));
    TF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.d.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a.x_scale,
                                                   sizeof(a.x_scale)));
    TF_CUBLAS_CHECK(cublasLtMatmul(handle_, p.d.op, &alpha, a.wq, p.d.a, a.xq, p.d.b, &beta, a.out, p.d.c, a.out, p.d.c,
                                   &p.algo.algo, workspace, p.algo.workspace, stream));
    return;
  }
  TF_ASSERT(acc, "run_fp8: unit-scale plan without an F32 buffer");
  TF_CUBLAS_CHECK(cublasLtMatmul(handle_, p.d.op, &alpha, a.wq, p.d.a, a.xq, p.d.b, &beta, acc, p.d.c, acc, p.d.c,
                                 &p.algo.algo, workspace, p.algo.workspace, stream));
  launch_fp8_scale_epilogue(acc, a.x_scale, a.w_scale, a.bias, a.rows, a.m, a.out, a.out_f32, stream);
}

}  // namespace tf::cuda

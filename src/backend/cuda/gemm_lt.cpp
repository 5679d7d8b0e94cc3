#include "backend/cuda/gemm_lt.h"

#include <fmt/format.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/quant_gemm.cuh"
#include "core/error.h"

namespace tf::cuda {

LtGemm::LtGemm(bool split_k) : split_k_(split_k) { TF_CUBLAS_CHECK(cublasLtCreate(&handle_)); }

namespace {

// An algorithm's attribute read with cuBLASLt's getter `get` (zero when it has none).
template <typename T, typename Attr>
T attribute(cublasStatus_t (*get)(const cublasLtMatmulAlgo_t*, Attr, void*, size_t, size_t*),
            const cublasLtMatmulAlgo_t& algo, Attr attr) {
  T v{};
  size_t written = 0;
  return get(&algo, attr, &v, sizeof(v), &written) == CUBLAS_STATUS_SUCCESS ? v : T{};
}
template <typename T>
T config_of(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  return attribute<T>(cublasLtMatmulAlgoConfigGetAttribute, algo, attr);
}
template <typename T>
T cap_of(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attr) {
  return attribute<T>(cublasLtMatmulAlgoCapGetAttribute, algo, attr);
}

}  // namespace

std::string lt_algo_name(const LtAlgo& a) {
  return fmt::format("id {} tile {} stages {} split-K {}", config_of<int32_t>(a.algo, CUBLASLT_ALGO_CONFIG_ID),
                     config_of<uint32_t>(a.algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                     config_of<uint32_t>(a.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                     std::max(config_of<int32_t>(a.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), 1));
}

// Split counts tried: with 64 rows, tiles of 128 features give 32 tiles on a 4096-feature
// weight (q, o, down of a Llama-3-8B layer) against the H200's 132 SMs.
constexpr int32_t kSplits[] = {2, 3, 4, 6, 8, 12, 16};

void LtGemm::add_split_k(const Descs& d, size_t max_workspace, std::vector<LtAlgo>& algos) const {
  if (!split_k_) return;
  const size_t n = algos.size();
  for (size_t i = 0; i < n; ++i) {
    const cublasLtMatmulAlgo_t& base = algos[i].algo;
    if (!cap_of<int32_t>(base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT)) continue;
    if (std::max(config_of<int32_t>(base, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), 1) != 1) continue;
    // FP32 partial sums reduced by a separate pass: deterministic, no rounding between splits
    if (!(cap_of<uint32_t>(base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK) & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE))
      continue;
    for (int32_t splits : kSplits) {
      LtAlgo v{.algo = base};
      const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      if (cublasLtMatmulAlgoConfigSetAttribute(&v.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits)) !=
              CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoConfigSetAttribute(&v.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                               sizeof(scheme)) != CUBLAS_STATUS_SUCCESS)
        continue;
      cublasLtMatmulHeuristicResult_t r{};
      if (cublasLtMatmulAlgoCheck(handle_, d.op, d.a, d.b, d.c, d.c, &v.algo, &r) != CUBLAS_STATUS_SUCCESS ||
          r.state != CUBLAS_STATUS_SUCCESS || r.workspaceSize > max_workspace)
        continue;
      v.workspace = r.workspaceSize;
      algos.push_back(v);
    }
  }
}

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
  add_split_k(d, max_workspace, out);
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

const char* fp8_scaling_name(Fp8Scaling s) {
  switch (s) {
    case Fp8Scaling::Auto: return "auto";
    case Fp8Scaling::OuterVectors: return "outer vectors";
    case Fp8Scaling::AlphaVector: return "alpha vector";
    case Fp8Scaling::Epilogue: return "epilogue";
    case Fp8Scaling::Unscaled: return "unscaled";
  }
  return "?";
}

// The mapping of gemm.cu with E4M3 A (the weight, transposed) and B (the activations): the
// "TN" form cuBLASLt's FP8 kernels require. Then A's rows are the m output features and B's
// columns the tokens: the outer-vector scales are w_scale (A) and x_scale (B), and the alpha
// vector (one entry per row of D) is w_scale.
const LtGemm::Fp8Plan& LtGemm::fp8_plan(const Fp8GemmArgs& a, Fp8Scaling scaling, size_t max_workspace) {
  const auto key =
      std::make_tuple(a.rows, a.k, a.m, a.out_f32, a.bias != nullptr, scaling, a.fast_accum, a.sums_f32());
  if (auto it = fp8_.find(key); it != fp8_.end()) return it->second;
  Fp8Plan p;
  p.scaling = scaling;
  TF_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  TF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.d.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  TF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.d.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  const int8_t fast = a.fast_accum ? 1 : 0;
  TF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.d.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  if (scaling == Fp8Scaling::OuterVectors) {
    const cublasLtMatmulMatrixScale_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    TF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.d.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
    TF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.d.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
    // the heuristic may look at the pointers; run_fp8 sets each call's own
    TF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.d.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a.w_scale,
                                                   sizeof(a.w_scale)));
    TF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.d.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a.x_scale,
                                                   sizeof(a.x_scale)));
  } else if (scaling == Fp8Scaling::AlphaVector) {
    const cublasLtPointerMode_t mode = CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO;
    TF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.d.op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof(mode)));
  }
  const bool f32_out =
      a.out_f32 || scaling == Fp8Scaling::Unscaled || (scaling == Fp8Scaling::Epilogue && a.sums_f32());
  const cudaDataType_t out_type = f32_out ? CUDA_R_32F : CUDA_R_16BF;
  TF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d.a, CUDA_R_8F_E4M3, uint64_t(a.k), uint64_t(a.m), a.k));
  TF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d.b, CUDA_R_8F_E4M3, uint64_t(a.k), uint64_t(a.rows), a.k));
  TF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d.c, out_type, uint64_t(a.m), uint64_t(a.rows), a.m));
  const bool possible = scaling != Fp8Scaling::OuterVectors || !a.bias;  // a bias needs a kernel after
  if (possible) {
    cublasLtMatmulPreference_t pref = nullptr;
    TF_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    TF_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &max_workspace, sizeof(max_workspace)));
    std::vector<cublasLtMatmulHeuristicResult_t> found(kFp8Candidates);
    int returned = 0;
    p.status = cublasLtMatmulAlgoGetHeuristic(handle_, p.d.op, p.d.a, p.d.b, p.d.c, p.d.c, pref, kFp8Candidates,
                                              found.data(), &returned);
    cublasLtMatmulPreferenceDestroy(pref);
    if (p.status == CUBLAS_STATUS_SUCCESS)
      for (int i = 0; i < returned; ++i)
        if (found[size_t(i)].state == CUBLAS_STATUS_SUCCESS)
          p.algos.push_back(LtAlgo{.algo = found[size_t(i)].algo, .workspace = found[size_t(i)].workspaceSize});
    add_split_k(p.d, max_workspace, p.algos);
    p.ok = !p.algos.empty();
  }
  return fp8_.emplace(key, p).first->second;
}

const LtGemm::Fp8Plan& LtGemm::fp8_resolved(const Fp8GemmArgs& a, size_t max_workspace) {
  if (a.scaling != Fp8Scaling::Auto) return fp8_plan(a, a.scaling, max_workspace);
  for (Fp8Scaling s : {Fp8Scaling::OuterVectors, Fp8Scaling::AlphaVector, Fp8Scaling::Epilogue})
    if (const Fp8Plan& p = fp8_plan(a, s, max_workspace); p.ok) return p;
  fail("cuBLASLt has no FP8 GEMM for rows={} k={} m={}", a.rows, a.k, a.m);
}

Fp8Scaling LtGemm::fp8_scaling(const Fp8GemmArgs& a, size_t max_workspace) {
  return fp8_resolved(a, max_workspace).scaling;
}

bool LtGemm::fp8_available(const Fp8GemmArgs& a, size_t max_workspace) {
  return a.scaling == Fp8Scaling::Auto || fp8_plan(a, a.scaling, max_workspace).ok;
}

int LtGemm::fp8_algorithms(const Fp8GemmArgs& a, size_t max_workspace) {
  if (a.scaling == Fp8Scaling::Auto) return 0;
  return int(fp8_plan(a, a.scaling, max_workspace).algos.size());
}

std::string LtGemm::fp8_algorithm_name(const Fp8GemmArgs& a, size_t max_workspace) {
  const Fp8Plan& p = fp8_resolved(a, max_workspace);
  return p.ok ? lt_algo_name(p.pick(a.algo)) : "none";
}

std::string LtGemm::fp8_probe(const Fp8GemmArgs& a, size_t max_workspace) {
  std::string out;
  for (Fp8Scaling s : {Fp8Scaling::OuterVectors, Fp8Scaling::AlphaVector, Fp8Scaling::Epilogue}) {
    const Fp8Plan& p = fp8_plan(a, s, max_workspace);
    out += fmt::format("{}{}: {}", out.empty() ? "" : ", ", fp8_scaling_name(s),
                       p.ok ? "ok" : cublasGetStatusName(p.status));
  }
  return out;
}

void LtGemm::run_fp8(const Fp8GemmArgs& a, void* workspace, size_t max_workspace, void* acc, cudaStream_t stream) {
  if (a.rows == 0 || a.m == 0) return;
  const Fp8Plan& p = fp8_resolved(a, max_workspace);
  TF_ASSERT(p.ok, "run_fp8: cuBLASLt has no {} FP8 GEMM for rows={} k={} m={}", fp8_scaling_name(p.scaling), a.rows,
            a.k, a.m);
  const float one = 1.0f, zero = 0.0f;
  const LtAlgo& algo = p.pick(a.algo);
  switch (p.scaling) {
    case Fp8Scaling::OuterVectors:
      TF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.d.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a.w_scale,
                                                     sizeof(a.w_scale)));
      TF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.d.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a.x_scale,
                                                     sizeof(a.x_scale)));
      TF_CUBLAS_CHECK(cublasLtMatmul(handle_, p.d.op, &one, a.wq, p.d.a, a.xq, p.d.b, &zero, a.out, p.d.c, a.out,
                                     p.d.c, &algo.algo, workspace, algo.workspace, stream));
      return;
    case Fp8Scaling::AlphaVector:
      TF_CUBLAS_CHECK(cublasLtMatmul(handle_, p.d.op, a.w_scale, a.wq, p.d.a, a.xq, p.d.b, &zero, a.out, p.d.c, a.out,
                                     p.d.c, &algo.algo, workspace, algo.workspace, stream));
      launch_fp8_row_scale(a.out, a.out_f32, a.x_scale, a.bias, a.rows, a.m, stream);
      return;
    case Fp8Scaling::Unscaled:
      TF_CUBLAS_CHECK(cublasLtMatmul(handle_, p.d.op, &one, a.wq, p.d.a, a.xq, p.d.b, &zero, a.out, p.d.c, a.out,
                                     p.d.c, &algo.algo, workspace, algo.workspace, stream));
      return;
    default:
      TF_ASSERT(acc, "run_fp8: unit-scale plan without a buffer for its sums");
      TF_CUBLAS_CHECK(cublasLtMatmul(handle_, p.d.op, &one, a.wq, p.d.a, a.xq, p.d.b, &zero, acc, p.d.c, acc, p.d.c,
                                     &algo.algo, workspace, algo.workspace, stream));
      if (!a.acc_only)
        launch_fp8_scale_epilogue(acc, a.sums_f32(), a.x_scale, a.w_scale, a.bias, a.rows, a.m, a.out, a.out_f32,
                                  stream);
      return;
  }
}

}  // namespace tf::cuda

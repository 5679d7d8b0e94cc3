// The CUDA backend's matmul: cuBLAS, the GEMV kernel for a few rows, or a cuBLASLt algorithm
// for small batches, chosen per shape by timing them once (gemm.cu, gemv.cu, gemm_lt.cpp).
#include "backend/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_backend_util.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm.cuh"
#include "backend/cuda/gemm_lt.h"
#include "backend/cuda/gemv.cuh"
#include "backend/shape_checks.h"

namespace tf::cuda {

using namespace detail;

void CudaBackend::matmul(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out) {
  handoff_ = {};
  check_matmul(x, w, bias, out);
  check_dev(x, DType::BF16, "matmul x");
  const bool quantized = w.dtype == DType::W8 || w.dtype == DType::W4 || w.dtype == DType::FP8;
  check_dev(w, quantized ? w.dtype : DType::BF16, "matmul w");
  if (bias.data) check_dev(bias, DType::BF16, "matmul bias");
  TF_ASSERT(out.dtype == DType::BF16 || out.dtype == DType::F32, "matmul out: dtype {}", dtype_name(out.dtype));
  check_dev(out, out.dtype, "matmul out");
  TF_ASSERT(x.shape[0] <= INT32_MAX && x.shape[1] <= INT32_MAX && w.shape[0] <= INT32_MAX,
            "matmul: dims beyond cuBLAS's int");
  if (quantized)
    return matmul_quant(GemmArgs{.x = bf(x), .bias = bias.data ? bf(bias) : nullptr, .out = out.data,
                                 .out_f32 = out.dtype == DType::F32, .rows = x.shape[0], .k = x.shape[1],
                                 .m = w.shape[0], .wq = quant_args(w)});
  OpScope scope(prof(), prof() ? fmt::format("matmul rows={} k={} m={}", x.shape[0], x.shape[1], w.shape[0]) : "",
                stream_);
  const GemmArgs g{.x = bf(x), .w = bf(w), .bias = bias.data ? bf(bias) : nullptr, .out = out.data,
                   .out_f32 = out.dtype == DType::F32, .rows = x.shape[0], .k = x.shape[1], .m = w.shape[0]};
  if (use_gemv(g))
    launch_gemv(g, stream_);
  else if (const LtAlgo* a = lt_pick(g))
    lt_->run(g, *a, cublas_workspace_, stream_);
  else
    launch_gemm(cublas_, g, stream_);
}

CudaBackend::GemvKey CudaBackend::gemv_key(const GemmArgs& g) {
  return std::make_tuple(g.rows, g.k, g.m, g.out_f32, g.bias != nullptr);
}

// cuBLAS or the GEMV kernel for a small-batch shape: as asked (BackendOptions::gemv), or in
// auto mode the faster when the shape was first seen (tuned()).
bool CudaBackend::use_gemv(const GemmArgs& g) {
  if (!gemv_supported(g) || opt_.gemv == "cublas") return false;
  if (opt_.gemv == "custom") return true;
  const GemvChoice* c = tuned(g);
  return c && c->custom;
}

// The cuBLASLt algorithm that beat cublasGemmEx and the GEMV on g's shape, if one did.
const LtAlgo* CudaBackend::lt_pick(const GemmArgs& g) {
  const GemvChoice* c = tuned(g);
  return c && c->lt ? c->lt.get() : nullptr;
}

// Auto mode, up to kLtMaxRows rows: cublasGemmEx, the GEMV (where it runs) and the first
// kLtCandidates algorithms of cuBLASLt's heuristic with their split-K copies (unbiased
// matmuls, LtGemm::candidates) are each timed (ColdTimer, kReps launches), and the fastest is
// kept. A shape first seen while a graph is being recorded (never, when the model runs a key
// eagerly before recording it) gets cublasGemmEx. Timing writes g.out.
const CudaBackend::GemvChoice* CudaBackend::tuned(const GemmArgs& g) {
  constexpr int64_t kLtMaxRows = 64;
  constexpr int kLtCandidates = 8, kReps = 5;
  if (opt_.gemv != "auto" || g.accumulate) return nullptr;
  const bool gemv_ok = gemv_supported(g), lt_ok = opt_.cublaslt && g.rows <= kLtMaxRows && !g.bias;
  if (!gemv_ok && !lt_ok) return nullptr;
  const auto key = gemv_key(g);
  if (auto it = gemv_.find(key); it != gemv_.end()) return &it->second;
  if (capturing_) return nullptr;
  GemvChoice c;
  ColdTimer timer(stream_);
  c.cublas_us = timer.us([&] { launch_gemm(cublas_, g, stream_); }, kReps);
  double best = c.cublas_us;
  if (gemv_ok) {
    c.custom_us = timer.us([&] { launch_gemv(g, stream_); }, kReps);
    c.custom = c.custom_us < best;
    best = std::min(best, c.custom_us);
  }
  if (lt_ok) {
    if (!lt_) lt_ = std::make_unique<LtGemm>(opt_.lt_split_k);
    for (const LtAlgo& a : lt_->candidates(g, kLtCandidates, kCublasWorkspaceBytes)) {
      const double us = timer.us([&] { lt_->run(g, a, cublas_workspace_, stream_); }, kReps);
      ++c.lt_tried;
      if (c.lt_us < 0 || us < c.lt_us) c.lt_us = us;
      if (us < best) {
        best = us;
        c.custom = false;
        c.lt = std::make_shared<const LtAlgo>(a);
      }
    }
  }
  return &(gemv_[key] = c);
}

ColdTimer::ColdTimer(cudaStream_t stream) : stream_(stream) {
  if (cudaMalloc(&flush_, kFlushBytes) != cudaSuccess) {
    flush_ = nullptr;
    (void)cudaGetLastError();
  }
  for (cudaEvent_t& e : ev_) TF_CUDA_CHECK(cudaEventCreate(&e));
}

ColdTimer::~ColdTimer() {
  for (cudaEvent_t& e : ev_) cudaEventDestroy(e);
  if (flush_) cudaFree(flush_);
}

double ColdTimer::us(const std::function<void()>& launch, int reps) {
  launch();  // warm-up
  std::vector<float> ms(size_t(std::max(reps, 1)));
  for (size_t i = 0; i < ms.size(); ++i) {
    if (flush_) TF_CUDA_CHECK(cudaMemsetAsync(flush_, int(i), kFlushBytes, stream_));
    TF_CUDA_CHECK(cudaEventRecord(ev_[0], stream_));
    launch();
    TF_CUDA_CHECK(cudaEventRecord(ev_[1], stream_));
    TF_CUDA_CHECK(cudaEventSynchronize(ev_[1]));
    TF_CUDA_CHECK(cudaEventElapsedTime(&ms[i], ev_[0], ev_[1]));
  }
  std::nth_element(ms.begin(), ms.begin() + ptrdiff_t(ms.size() / 2), ms.end());
  return 1e3 * double(ms[ms.size() / 2]);
}

std::vector<std::string> CudaBackend::tuning_report() const {
  std::vector<std::string> lines;
  if (profiler_) lines = profiler_->report();
  for (const auto& [key, c] : gemv_) {
    const auto& [rows, k, m, f32, bias] = key;
    std::string times = fmt::format("cublas {:.1f} us", c.cublas_us);
    if (c.custom_us >= 0) times += fmt::format(", gemv {:.1f} us", c.custom_us);
    if (c.lt_tried > 0) times += fmt::format(", best of {} cublasLt {:.1f} us", c.lt_tried, c.lt_us);
    lines.push_back(fmt::format("matmul rows={} k={} m={}{}{}: {} -> {}", rows, k, m, f32 ? " f32-out" : "",
                                bias ? " bias" : "", times,
                                c.custom ? "gemv" : c.lt ? "cublasLt (" + lt_algo_name(*c.lt) + ")" : "cublas"));
  }
  for (const auto& [key, c] : fp8_) {
    const auto& [rows, k, m, f32, bias] = key;
    if (rows < 0) continue;  // a bucket's entry (fp8_choice), also listed under its shape
    lines.push_back(fmt::format(
        "fp8 w8a8 rows={} k={} m={}{}{}: outer vectors {:.1f} us (best of {}), epilogue {:.1f} us (best of {}) -> {} #{} ({})",
        rows, k, m, f32 ? " f32-out" : "", bias ? " bias" : "", c.outer_us, c.outer_tried, c.epilogue_us,
        c.epilogue_tried, fp8_scaling_name(c.scaling), c.algo, c.config) +
                    (c.outer_tried + c.epilogue_tried == 0 ? " (times of the first shape of its bucket)" : ""));
  }
  for (std::string& line : quant_gemv_report()) lines.push_back(std::move(line));
  for (const auto& [shape, pick] : graph_picks_) lines.push_back(shape + ": " + pick);
  return lines;
}

}  // namespace tf::cuda

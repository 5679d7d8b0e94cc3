// The CUDA backend's matmul: cuBLAS, or the GEMV kernel for a few rows, chosen per shape by
// timing both once (gemm.cu, gemv.cu).
#include "backend/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <fmt/format.h>

#include "backend/cuda/cuda_backend_util.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/shape_checks.h"

namespace tf::cuda {

using namespace detail;

void CudaBackend::matmul(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out) {
  check_matmul(x, w, bias, out);
  check_dev(x, DType::BF16, "matmul x");
  check_dev(w, DType::BF16, "matmul w");
  if (bias.data) check_dev(bias, DType::BF16, "matmul bias");
  TF_ASSERT(out.dtype == DType::BF16 || out.dtype == DType::F32, "matmul out: dtype {}", dtype_name(out.dtype));
  check_dev(out, out.dtype, "matmul out");
  TF_ASSERT(x.shape[0] <= INT32_MAX && x.shape[1] <= INT32_MAX && w.shape[0] <= INT32_MAX,
            "matmul: dims beyond cuBLAS's int");
  OpScope scope(prof(), profiler_ ? fmt::format("matmul rows={} k={} m={}", x.shape[0], x.shape[1], w.shape[0]) : "",
                stream_);
  const GemmArgs g{.x = bf(x), .w = bf(w), .bias = bias.data ? bf(bias) : nullptr, .out = out.data,
                   .out_f32 = out.dtype == DType::F32, .rows = x.shape[0], .k = x.shape[1], .m = w.shape[0]};
  if (use_gemv(g))
    launch_gemv(g, stream_);
  else
    launch_gemm(cublas_, g, stream_);
}

CudaBackend::GemvKey CudaBackend::gemv_key(const GemmArgs& g) {
  return std::make_tuple(g.rows, g.k, g.m, g.out_f32, g.bias != nullptr);
}

// cuBLAS or the GEMV kernel for a small-batch shape: as asked (BackendOptions::gemv), or in
// auto mode the one that was faster when the shape was first seen: each timed over 5 runs
// after a warm-up, with CUDA events on this stream. A shape first seen while a graph is being
// recorded (never, when the model runs a key eagerly before recording it) gets cuBLAS.
bool CudaBackend::use_gemv(const GemmArgs& g) {
  if (!gemv_supported(g) || opt_.gemv == "cublas") return false;
  if (opt_.gemv == "custom") return true;
  const auto key = gemv_key(g);
  if (auto it = gemv_.find(key); it != gemv_.end()) return it->second.custom;
  if (capturing_) return false;
  cudaEvent_t ev[3];
  for (cudaEvent_t& e : ev) TF_CUDA_CHECK(cudaEventCreate(&e));
  constexpr int kReps = 5;
  launch_gemm(cublas_, g, stream_);
  launch_gemv(g, stream_);
  TF_CUDA_CHECK(cudaEventRecord(ev[0], stream_));
  for (int i = 0; i < kReps; ++i) launch_gemm(cublas_, g, stream_);
  TF_CUDA_CHECK(cudaEventRecord(ev[1], stream_));
  for (int i = 0; i < kReps; ++i) launch_gemv(g, stream_);
  TF_CUDA_CHECK(cudaEventRecord(ev[2], stream_));
  TF_CUDA_CHECK(cudaEventSynchronize(ev[2]));
  float ms_cublas = 0, ms_custom = 0;
  TF_CUDA_CHECK(cudaEventElapsedTime(&ms_cublas, ev[0], ev[1]));
  TF_CUDA_CHECK(cudaEventElapsedTime(&ms_custom, ev[1], ev[2]));
  for (cudaEvent_t& e : ev) TF_CUDA_CHECK(cudaEventDestroy(e));
  GemvChoice c{.cublas_us = 1e3 * ms_cublas / kReps, .custom_us = 1e3 * ms_custom / kReps};
  c.custom = c.custom_us < c.cublas_us;
  gemv_[key] = c;
  return c.custom;
}

std::vector<std::string> CudaBackend::tuning_report() const {
  std::vector<std::string> lines;
  if (profiler_) lines = profiler_->report();
  for (const auto& [key, c] : gemv_) {
    const auto& [rows, k, m, f32, bias] = key;
    lines.push_back(fmt::format("matmul rows={} k={} m={}{}{}: cublas {:.1f} us, gemv {:.1f} us -> {}", rows, k, m,
                                f32 ? " f32-out" : "", bias ? " bias" : "", c.cublas_us, c.custom_us,
                                c.custom ? "gemv" : "cublas"));
  }
  return lines;
}

}  // namespace tf::cuda

// The CUDA backend's quantized weights: upload of W8/W4/FP8 host views, and the matmul on
// them, dispatched by shape:
//   rows <= kGemvMaxRows            the decode GEMV (gemv.cuh: on W4/W8/FP8 the tensor-core
//                                   kernel of quant_gemm.cuh, with the GEMV's fusions)
//   FP8, rows > kFp8MmaMaxRows      per-token FP8 activations + cuBLASLt's FP8 GEMM (W8A8)
//   rows <= kQuantMmaMaxRows        the tensor-core kernel (W4 k % 128, W8/FP8 k % 64)
//   anything else                   dequantize to BF16 scratch, then cuBLAS
// The row thresholds are where bench_quant_gemm measured the kernels cross on the H200.
#include <cublas_v2.h>
#include <fmt/format.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_util.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm.cuh"
#include "backend/cuda/gemm_lt.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/quant_gemm.cuh"

namespace tf::cuda {

using namespace detail;

namespace {

// Bytes of a quantized weight's scale and zero arrays (quant/formats.h).
size_t scale_bytes(const TensorView& w) {
  return w.dtype == DType::W4 ? size_t(w.shape[0] * (w.shape[1] / w.group_size)) * 2 : size_t(w.shape[0]) * 4;
}
size_t zero_bytes(const TensorView& w) {
  return w.dtype == DType::W4 ? size_t(w.shape[0] * (w.shape[1] / w.group_size)) : 0;
}

}  // namespace

TensorView CudaBackend::upload_quantized(const TensorView& host) {
  check_quantized(host);
  TensorView out = host;
  out.device = Device::Cuda;
  out.data = alloc_bytes(host.nbytes());
  out.scales = alloc_bytes(scale_bytes(host));
  out.zeros = host.dtype == DType::W4 ? alloc_bytes(zero_bytes(host)) : nullptr;
  TF_CUDA_CHECK(cudaMemcpyAsync(out.data, host.data, host.nbytes(), cudaMemcpyHostToDevice, stream_));
  TF_CUDA_CHECK(cudaMemcpyAsync(out.scales, host.scales, scale_bytes(host), cudaMemcpyHostToDevice, stream_));
  if (out.zeros)
    TF_CUDA_CHECK(cudaMemcpyAsync(out.zeros, host.zeros, zero_bytes(host), cudaMemcpyHostToDevice, stream_));
  TF_CUDA_CHECK(cudaStreamSynchronize(stream_));  // before the caller's host view goes away
  return out;
}

void* CudaBackend::quant_workspace(int slot, size_t bytes) {
  Workspace& w = quant_ws_[slot];
  if (bytes <= w.bytes) return w.p;
  TF_ASSERT(!capturing_, "quantized-matmul workspace grows while recording a CUDA Graph");
  graph_reset();
  if (w.p) release(make_view(w.p, DType::U8, {int64_t(w.bytes)}, Device::Cuda));
  w.bytes = std::max(bytes, 2 * w.bytes);
  w.p = alloc_bytes(w.bytes);
  TF_CUDA_CHECK(cudaMemsetAsync(w.p, 0, w.bytes, stream_));
  return w.p;
}

// Where cuBLASLt offers both, outer-vector scales and the unit-scale GEMM with the epilogue
// kernel are each timed once per shape (first sight, not while a graph is being recorded) and
// the faster kept: the heuristic does not rank them by speed (the H200: the epilogue form ahead
// at 16 rows of 4096 x 4096 and 64 rows of 4096 x 14336, the outer vectors at 64 rows of
// 28672 x 4096). A shape
// first seen while recording takes the heuristic's order (Auto). Timing writes a.out.
Fp8Scaling CudaBackend::fp8_scaling(const Fp8GemmArgs& a, float* acc) {
  constexpr int kReps = 5;
  const GemvKey key{a.rows, a.k, a.m, a.out_f32, a.bias != nullptr};
  if (auto it = fp8_.find(key); it != fp8_.end()) return it->second.scaling;
  if (capturing_) return Fp8Scaling::Auto;
  Fp8Choice c{.scaling = lt_->fp8_scaling(a, kCublasWorkspaceBytes)};
  double best = -1;
  for (Fp8Scaling s : {Fp8Scaling::OuterVectors, Fp8Scaling::Epilogue}) {
    Fp8GemmArgs t = a;
    t.scaling = s;
    if (!lt_->fp8_available(t, kCublasWorkspaceBytes)) continue;
    const double us = time_us([&] { lt_->run_fp8(t, cublas_workspace_, kCublasWorkspaceBytes, acc, stream_); }, kReps);
    (s == Fp8Scaling::OuterVectors ? c.outer_us : c.epilogue_us) = us;
    if (best < 0 || us < best) best = us, c.scaling = s;
  }
  return (fp8_[key] = c).scaling;
}

void CudaBackend::matmul_quant(const GemmArgs& g) {
  OpScope scope(prof(),
                profiler_ ? fmt::format("matmul {} rows={} k={} m={}", dtype_name(g.wq.dtype), g.rows, g.k, g.m) : "",
                stream_);
  if (g.rows <= kGemvMaxRows && gemv_supported(g)) {
    launch_gemv(g, stream_);
    return;
  }
  Fp8GemmArgs a{.wq = g.wq.q, .w_scale = static_cast<const float*>(g.wq.scales), .bias = g.bias, .out = g.out,
                .out_f32 = g.out_f32, .rows = g.rows, .k = g.k, .m = g.m};
  const bool w8a8 = g.wq.dtype == DType::FP8 && LtGemm::fp8_supported(a);
  if (quant_mma_supported(g) && g.rows <= (g.wq.dtype == DType::FP8 && w8a8 ? kFp8MmaMaxRows : kQuantMmaMaxRows)) {
    const size_t ws = quant_mma_workspace_bytes(g);
    launch_quant_mma(g, stream_, {},
                     {.workspace = ws ? quant_workspace(3, ws) : nullptr, .workspace_bytes = ws});
    return;
  }
  if (w8a8) {
    auto* xq = static_cast<uint8_t*>(quant_workspace(0, size_t(g.rows * g.k)));
    auto* xs = static_cast<float*>(quant_workspace(1, size_t(g.rows) * 4));
    launch_quantize_rows_fp8(g.x, g.rows, g.k, xq, xs, stream_);
    a.xq = xq;
    a.x_scale = xs;
    if (!lt_) lt_ = std::make_unique<LtGemm>();
    auto* acc = static_cast<float*>(quant_workspace(2, size_t(g.rows * g.m) * 4));
    a.scaling = fp8_scaling(a, acc);
    lt_->run_fp8(a, cublas_workspace_, kCublasWorkspaceBytes, acc, stream_);
    return;
  }
  auto* w16 = static_cast<bf16*>(quant_workspace(2, size_t(g.m * g.k) * 2));
  launch_dequantize(g.wq, g.m, g.k, w16, stream_);
  GemmArgs plain = g;
  plain.w = w16;
  plain.wq = {};
  launch_gemm(cublas_, plain, stream_);
}

}  // namespace tf::cuda

// The CUDA backend's quantized weights: upload of W8/W4/FP8 host views, and the matmul on
// them, dispatched by shape:
//   rows <= kGemvMaxRows            the quantized decode GEMV (gemv_quant.cu)
//   FP8, k and m multiples of 16    per-token FP8 activations + cuBLASLt's FP8 GEMM (W8A8)
//   W4 (k % 128), W8 (k % 64)       the tensor-core kernel (quant_gemm.cu)
//   anything else                   dequantize to BF16 scratch, then cuBLAS
// Where the crossovers between these lie on the H200 is for the micro-benchmark
// (tests/backend/cuda/bench_quant_gemm.cpp) to measure; the row threshold is the GEMV's own
// limit.
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
  return w.p;
}

void CudaBackend::matmul_quant(const GemmArgs& g) {
  OpScope scope(prof(),
                profiler_ ? fmt::format("matmul {} rows={} k={} m={}", dtype_name(g.wq.dtype), g.rows, g.k, g.m) : "",
                stream_);
  if (g.rows <= kGemvMaxRows && gemv_supported(g)) {
    launch_gemv(g, stream_);
    return;
  }
  if (g.wq.dtype == DType::FP8) {
    Fp8GemmArgs a{.wq = g.wq.q, .w_scale = static_cast<const float*>(g.wq.scales), .bias = g.bias, .out = g.out,
                  .out_f32 = g.out_f32, .rows = g.rows, .k = g.k, .m = g.m};
    if (LtGemm::fp8_supported(a)) {
      auto* xq = static_cast<uint8_t*>(quant_workspace(0, size_t(g.rows * g.k)));
      auto* xs = static_cast<float*>(quant_workspace(1, size_t(g.rows) * 4));
      launch_quantize_rows_fp8(g.x, g.rows, g.k, xq, xs, stream_);
      a.xq = xq;
      a.x_scale = xs;
      if (!lt_) lt_ = std::make_unique<LtGemm>();
      float* acc = lt_->fp8_outer_scales(a, kCublasWorkspaceBytes)
                       ? nullptr
                       : static_cast<float*>(quant_workspace(2, size_t(g.rows * g.m) * 4));
      lt_->run_fp8(a, cublas_workspace_, kCublasWorkspaceBytes, acc, stream_);
      return;
    }
  }
  if (quant_mma_supported(g)) {
    launch_quant_mma(g, stream_);
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

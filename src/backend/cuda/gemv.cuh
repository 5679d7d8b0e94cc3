// The small-batch matmul (decode): out = x @ w^T (+ bias) for a few rows, reading every weight
// once with 16-byte loads, optionally with the neighbouring ops of a decode step folded in:
// an RMSNorm of the input rows (prologue), a residual add or SwiGLU on the output
// (epilogue). cuBLAS serves the plain call; CudaBackend::matmul times both on each shape and
// keeps the faster (see gemv.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/gemm.cuh"
#include "backend/cuda/rope_kv.cuh"

namespace tf::cuda {

constexpr int64_t kGemvMaxRows = 8;
// The norm prologue keeps the normalized rows in shared memory: at most this many rows and
// bytes.
constexpr int64_t kGemvNormMaxRows = 4;
constexpr int64_t kGemvNormMaxBytes = 48 * 1024;

enum class GemvEpilogue : uint8_t {
  Store,   // out = y (BF16 or F32)
  AddTo,   // out += y, y rounded to BF16 first (out is the residual stream)
  Swiglu,  // w is [gate; up] (2 * m_out rows): out[:, j] = silu(y_gate[j]) * y_up[j], each y rounded first
  RopeKv,  // out = y are the batch's qkv rows (row r = token r): launch_rope_kv_write(rope) applied to them
};

struct GemvFusion {
  const __nv_bfloat16* norm_w = nullptr;  // set: x rows become rms_norm(x) * norm_w (eps) first
  float eps = 0.0f;
  GemvEpilogue epilogue = GemvEpilogue::Store;
  RopeKvArgs rope;  // RopeKv: pools, positions, slots, head layout (rope.qkv unused: out is)
};

// True when launch_gemv can run `g` with `f`: rows <= kGemvMaxRows (kGemvNormMaxRows and
// rows * k * 2 <= kGemvNormMaxBytes with a norm, which pairs with Store or Swiglu), k a
// multiple of 8 (16-byte rows), 16-byte aligned x, w and norm_w; F32 output only for Store;
// Swiglu needs an even m; RopeKv needs m = (n_heads + 2 n_kv_heads) head_dim, head_dim a
// multiple of 8, a BF16, F16 or F32 pool (INT8 rows need their whole row's maximum) and the
// rope.batch tokens as the rows.
bool gemv_supported(const GemmArgs& g, const GemvFusion& f = {});
// Rounding matches the separate kernels: y = BF16(x . w + bias) (norm: x = BF16(x * inv_rms
// * norm_w) as norm.cu), then AddTo stores BF16(out + y) as the add kernel, Swiglu
// BF16(silu(y_gate) * y_up) as the swiglu kernel, RopeKv rotates BF16(y) and stores as
// rope_kv.cu's fused kernel. Launched with PDL (launch.cuh). Quantized weights run on the
// tensor-core kernel where quant_mma_supported (quant_gemm.cuh), else on the same CUDA-core
// kernel as BF16.
void launch_gemv(const GemmArgs& g, cudaStream_t stream, const GemvFusion& f = {});

}  // namespace tf::cuda

// Matmuls on quantized weights (quant/formats.h) with the pieces of the FP8 W8A8 path:
//   - the tensor-core kernel for small and middle batches (W4, W8, FP8: quant_mma.cuh):
//     weights dequantized in registers straight into mma.sync A fragments, with the decode
//     GEMV's fusions at up to 8 rows;
//   - dequantization of a whole matrix to BF16 (the dequantize-then-cuBLAS path, the
//     fallback for shapes the other kernels do not take);
//   - per-token FP8 quantization of activations, and the scale epilogues of an FP8 GEMM run
//     without its own per-row scales (gemm_lt.h runs the GEMM itself).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/gemm.cuh"
#include "backend/cuda/gemv.cuh"

namespace tf::cuda {

// The tensor-core kernel's block shape (quant_mma.cuh). The decode kernel (rows <= 16): F16K16
// = 16 features per block, k split among 16 warps; F16K8, F16K4, F32K8, F64K4 likewise. The
// tiled kernel (rows 9..64 per block row, activations through shared memory, split-K across
// blocks when the features alone give too few): T64, T128 = 64 or 128 features per block. Auto
// picks by shape; the CUDA backend times the decode tiles per shape and fusion instead
// (CudaBackend::quant_gemv_pick); the others exist for the benchmark and tests.
enum class QuantMmaTile : uint8_t { Auto, F16K16, F16K8, F16K4, F32K8, F64K4, T64, T128 };
inline constexpr QuantMmaTile kQuantMmaTiles[] = {QuantMmaTile::F16K16, QuantMmaTile::F16K8, QuantMmaTile::F16K4,
                                                  QuantMmaTile::F32K8,  QuantMmaTile::F64K4, QuantMmaTile::T64,
                                                  QuantMmaTile::T128};
const char* quant_mma_tile_name(QuantMmaTile tile);

struct QuantMmaOptions {
  QuantMmaTile tile = QuantMmaTile::Auto;
  // Device scratch for split-K's partial sums and counters (tiled kernel), zero-filled when
  // first handed over (the kernel leaves it so); without it (or when too small) there is no
  // split. quant_mma_workspace_bytes says how much a call can use.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// out = x @ dequant(w)^T (+ bias) on tensor cores for W4 (k a multiple of 128, group sizes
// powers of two from 32), W8 and FP8 (k a multiple of 64); any rows and m; BF16 or F32 out; no
// accumulate. With rows <= 8 also the fusions of gemv.cuh (the norm prologue with rows <=
// kGemvNormMaxRows, as the GEMV; RopeKv with head_dim a multiple of 16). Rounding: FP32 sums of exact products, except
// W4 with groups of 32 or 64, whose weights are rounded once to BF16 ((code - zero) * BF16
// scale). A tile other than Auto must have a kernel for the call: the decode tiles take rows
// <= 16 (fused: <= 8; RopeKv: the 16-feature ones), the tiled ones rows > 8 without fusions.
bool quant_mma_supported(const GemmArgs& g, const GemvFusion& f = {}, QuantMmaTile tile = QuantMmaTile::Auto);
// CudaBackend::matmul's crossovers (cuda_quant.cpp): above these rows the tensor-core kernel
// hands over, W4 and W8 to dequantize-then-cuBLAS, FP8 (where cuBLASLt takes the shape) to the
// W8A8 GEMM.
inline constexpr int64_t kQuantMmaMaxRows = 64;
inline constexpr int64_t kFp8MmaMaxRows = 16;
void launch_quant_mma(const GemmArgs& g, cudaStream_t stream, const GemvFusion& f = {},
                      const QuantMmaOptions& opt = {});
size_t quant_mma_workspace_bytes(const GemmArgs& g, QuantMmaTile tile = QuantMmaTile::Auto);

// The decode GEMV's CUDA-core kernel (gemv_kernel.cuh) on any format, bypassing the choice
// launch_gemv makes between it and the tensor-core kernel: for the benchmark and tests, and
// for the shapes only it takes. gemv_supported(g, f) says where it runs.
void launch_gemv_simt(const GemmArgs& g, cudaStream_t stream, const GemvFusion& f = {});

// out [m, k] BF16 = dequant(w) (the reference's values, rounded once to BF16).
void launch_dequantize(const QuantWeightArgs& w, int64_t m, int64_t k, __nv_bfloat16* out, cudaStream_t stream);

// Per-token FP8 of activations: for each row r of x [rows, k], scale[r] = max|x[r]| / 448 and
// q[r, :] = e4m3(x[r, :] / scale[r]) (saturating, as quant/kv_fp8.h; a zero row gets scale
// 0 and zeros; a non-finite row scale NaN and zeros).
void launch_quantize_rows_fp8(const __nv_bfloat16* x, int64_t rows, int64_t k, uint8_t* q, float* scale,
                              cudaStream_t stream);

// RMSNorm of x [rows, k] with weight w (eps), then per-token FP8 of the BF16-rounded result
// as launch_quantize_rows_fp8: one kernel, the same codes and scales as launch_rms_norm and
// launch_quantize_rows_fp8 in turn. False (nothing launched) where its shape does not suit
// it: k not a multiple of 8 or above 8192, or x or w not 16-byte aligned.
bool launch_rms_norm_quantize_rows_fp8(const __nv_bfloat16* x, const __nv_bfloat16* w, float eps, int64_t rows,
                                       int64_t k, uint8_t* q, float* scale, cudaStream_t stream);

// What launch_fp8_scale_then does after scaling: add y into the residual `out` [rows, m], or
// the gated activation of y's halves into `out` [rows, m / 2] (gate first, then up).
enum class Fp8Then : uint8_t { AddTo, Swiglu, Geglu };
// The scales of an FP8 GEMM that ran with unit scales into acc [rows, m], F32 or (acc_f32
// false) BF16 (y = acc * x_scale[r] * w_scale[j] (+ bias[j]), rounded to BF16 as
// launch_fp8_scale_epilogue), then `then` on y: the same BF16 values as the scale kernel
// followed by the add or gated kernel (elementwise.cuh), in one kernel. m must be a multiple
// of 16.
void launch_fp8_scale_then(Fp8Then then, const void* acc, bool acc_f32, const float* x_scale, const float* w_scale,
                           const __nv_bfloat16* bias, int64_t rows, int64_t m, __nv_bfloat16* out,
                           cudaStream_t stream);

// launch_fp8_scale_then that also quantizes its result for the next FP8 W8A8 GEMM
// (fp8_handoff.cu), the codes and scales of the kernels apart bit for bit:
//   AddTo:          q, q_scale = launch_rms_norm_quantize_rows_fp8 of the updated residual
//                   `out` with norm_w (eps); m at most 8192
//   Swiglu / Geglu: q, q_scale = launch_quantize_rows_fp8 of `out` [rows, m / 2] (norm_w null);
//                   m / 2 at most 32768
// q holds [rows, m] or [rows, m / 2] codes. x_scale and w_scale may both be null: acc is then
// the product's BF16 output itself (an outer-vector GEMM's; y = acc exactly). False (nothing
// launched) where the shape does not suit it: m not a multiple of 16, too long a row, a
// pointer not 16-byte aligned.
bool launch_fp8_scale_then_quantize(Fp8Then then, const void* acc, bool acc_f32, const float* x_scale,
                                    const float* w_scale, const __nv_bfloat16* bias, int64_t rows, int64_t m,
                                    __nv_bfloat16* out, const __nv_bfloat16* norm_w, float eps, uint8_t* q,
                                    float* q_scale, cudaStream_t stream);

// out[r, j] = acc[r, j] * x_scale[r] * w_scale[j] (+ bias[j]), rounded once to BF16 or kept
// F32: the scales of an FP8 GEMM that ran with unit scales into acc [rows, m], F32 or (acc_f32
// false) BF16; F32 output needs F32 sums. m must be a multiple of 4.
void launch_fp8_scale_epilogue(const void* acc, bool acc_f32, const float* x_scale, const float* w_scale,
                               const __nv_bfloat16* bias, int64_t rows, int64_t m, void* out, bool out_f32,
                               cudaStream_t stream);
// In place: out[r, j] = out[r, j] * x_scale[r] (+ bias[j]), BF16 or F32: the per-token scales
// of an FP8 GEMM that applied the per-feature ones itself (cuBLASLt's alpha vector). m must be
// a multiple of 8.
void launch_fp8_row_scale(void* out, bool out_f32, const float* x_scale, const __nv_bfloat16* bias, int64_t rows,
                          int64_t m, cudaStream_t stream);

}  // namespace tf::cuda

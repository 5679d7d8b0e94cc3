// Matmuls on quantized weights (quant/formats.h) beyond the decode GEMV's few rows
// (gemv_quant.cu), and the pieces of the FP8 W8A8 path:
//   - the tensor-core kernel for middle batches (W4, W8): weights dequantized in registers
//     straight into mma.sync m16n8k16 B fragments, activations read as A fragments;
//   - dequantization of a whole matrix to BF16 (the dequantize-then-cuBLAS path it is
//     measured against, and the fallback for shapes the other kernels do not take);
//   - per-token FP8 quantization of activations, and the scale epilogue of an FP8 GEMM run
//     with unit scales (gemm_lt.h runs the GEMM itself).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/gemm.cuh"

namespace tf::cuda {

// out = x @ dequant(w)^T (+ bias) on tensor cores, for W4 (k a multiple of 128) and W8 (k a
// multiple of 64); any rows and m. Output BF16 or F32 as GemmArgs says; no accumulate.
bool quant_mma_supported(const GemmArgs& g);
void launch_quant_mma(const GemmArgs& g, cudaStream_t stream);

// out [m, k] BF16 = dequant(w) (the reference's values, rounded once to BF16).
void launch_dequantize(const QuantWeightArgs& w, int64_t m, int64_t k, __nv_bfloat16* out, cudaStream_t stream);

// Per-token FP8 of activations: for each row r of x [rows, k], scale[r] = max|x[r]| / 448 and
// q[r, :] = e4m3(x[r, :] / scale[r]) (saturating, as quant/kv_fp8.h; a zero row gets scale
// 0 and zeros; a non-finite row scale NaN and zeros).
void launch_quantize_rows_fp8(const __nv_bfloat16* x, int64_t rows, int64_t k, uint8_t* q, float* scale,
                              cudaStream_t stream);

// out[r, j] = acc[r, j] * x_scale[r] * w_scale[j] (+ bias[j]), rounded once to BF16 or kept
// F32: the scales of an FP8 GEMM that ran with unit scales into acc [rows, m] F32.
void launch_fp8_scale_epilogue(const float* acc, const float* x_scale, const float* w_scale,
                               const __nv_bfloat16* bias, int64_t rows, int64_t m, void* out, bool out_f32,
                               cudaStream_t stream);

}  // namespace tf::cuda

// Row-wise ops without reductions: embedding lookup, SwiGLU / GeGLU, scaling, row gather. BF16
// activations.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tf::cuda {

// out[t] = table[token_ids[t]].   table [n_vocab, d], token_ids [n_tokens] (device, in range),
// out [n_tokens, d]. A copy: bit-exact.
void launch_embedding(const __nv_bfloat16* table, const int32_t* token_ids, int64_t n_tokens, int64_t d,
                      __nv_bfloat16* out, cudaStream_t stream);
// The same from a W4 table (quant/formats.h: q [n_vocab, d / 2], element j in the low nibble of
// byte j / 2 when j is even; F16 scales and U8 zeros [n_vocab, d / group]): each element
// scale * (q - zero) in FP32 (the reference's value, exact), rounded once to BF16. d even,
// group dividing d.
void launch_embedding_w4(const uint8_t* q, const uint16_t* scales, const uint8_t* zeros, int64_t group,
                         const int32_t* token_ids, int64_t n_tokens, int64_t d, __nv_bfloat16* out,
                         cudaStream_t stream);

// out = silu(gate) * up in float, rounded once.   gate_up [rows, 2 * d_ff] (gate first),
// out [rows, d_ff]
void launch_swiglu(const __nv_bfloat16* gate_up, int64_t rows, int64_t d_ff, __nv_bfloat16* out,
                   cudaStream_t stream);

// out = gelu_tanh(gate) * up in float, rounded once (GeGLU; gelu_tanh(g) = 0.5 g (1 + tanh(
// sqrt(2/pi) (g + 0.044715 g^3)))).                                    shapes as launch_swiglu
void launch_geglu(const __nv_bfloat16* gate_up, int64_t rows, int64_t d_ff, __nv_bfloat16* out,
                  cudaStream_t stream);
// x *= s over n elements in float, rounded once.
void launch_scale(__nv_bfloat16* x, int64_t n, float s, cudaStream_t stream);

// Fusion off: the same as two kernels (silu, then the product), rounding in between.
void launch_swiglu_unfused(const __nv_bfloat16* gate_up, int64_t rows, int64_t d_ff, __nv_bfloat16* out,
                           cudaStream_t stream);
// x += y over n elements, rounded once (the residual add).
void launch_add(__nv_bfloat16* x, const __nv_bfloat16* y, int64_t n, cudaStream_t stream);
// out[i] = x[rows[i]] for rows of `row_bytes` bytes (a multiple of 2) of any dtype.
//   rows [n_out] (device, in range), out [n_out, row]
void launch_gather_rows(const void* x, const int32_t* rows, int64_t n_out, int64_t row_bytes, void* out,
                        cudaStream_t stream);

}  // namespace tf::cuda

// Quantized weight layouts: the interchange form stored by `twofold quantize` in safetensors
// and handed to kernels (a backend may repack at upload into a private layout). The logical
// weight is [m, k] = [out_features, in_features], row-major; TensorView carries the packed
// values in `data` and the parameters in `scales` / `zeros` (core/tensor.h).
//
// W8 (W8A16, int8 per output channel, symmetric)
//   q I8 [m, k] in -127..127; scales F32 [m];  w[i, j] = scales[i] * q[i, j]
// W4 (W4A16, uint4 in groups of G along k, asymmetric with an integer zero point)
//   q U8 [m, k / 2]: element j of row i in byte j / 2, the LOW nibble for even j, the HIGH
//   nibble for odd j, values 0..15; scales F16 [m, k / G]; zeros U8 [m, k / G] in 0..15;
//   w[i, j] = scales[i, j / G] * (q[i, j] - zeros[i, j / G]).
//   Symmetric quantization is this layout with every zero = 8. G is a multiple of 32 and
//   divides k (default 128). GGUF Q4_0 (G = 32, zero 8, an f16 scale) repacks into it exactly.
// FP8 (E4M3 "fn": exponent bias 7, no infinities, 0x7f / 0xff are NaN, largest finite 448)
//   q U8 [m, k] holding E4M3 bytes; scales F32 [m];  w[i, j] = scales[i] * e4m3(q[i, j])
// GGUF blocks (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K): as ggml defines them, rows of
//   self-contained blocks along k (core/dtype.h has their sizes).
#pragma once

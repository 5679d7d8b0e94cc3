// Dequantization of GGUF weights (ggml's block formats) to float32, on the host.
//
// Each result is bit for bit what the `gguf` Python package's gguf.quants.dequantize returns:
// the same float32 products and sums in the same order (this file's .cpp is compiled with
// -ffp-contract=off so that no fused multiply-add changes a rounding). Blocks along a row,
// a block's scales first (d, dmin, m are f16; q the quantized values):
//   Q8_0  32 elements, 34 bytes: d, 32 x i8 q                        w = q * d
//   Q4_0  32 elements, 18 bytes: d, 16 bytes; element j < 16 is the low nibble of byte j,
//         element j + 16 its high nibble                              w = d * (q - 8)
//   Q4_1  32 elements, 20 bytes: d, m, 16 bytes as Q4_0               w = d * q + m
//   Q4_K  256 elements, 144 bytes: d, dmin, 12 bytes of eight 6-bit (scale, min) pairs, 128
//         bytes of nibbles: sub-block 2i is the low nibbles of bytes 32i..32i+31, 2i+1 the high
//                                                                     w = (d * sc) * q - dmin * mn
//   Q5_K  256 elements, 176 bytes: as Q4_K with 32 bytes of fifth bits before the nibbles
//         (bit s of byte l is the fifth bit of element l of sub-block s)
//   Q6_K  256 elements, 210 bytes: 128 bytes of low nibbles, 64 bytes of 2-bit highs, 16 x i8
//         scales (one per 16 elements), d                             w = (d * sc) * (q - 32)
// F32, F16 and BF16 rows convert exactly.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tf {

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block from its 12
// packed bytes s: j < 4 in the low 6 bits of bytes j and j + 4; j >= 4 in the nibbles of byte
// j + 4 with the top two bits of bytes j - 4 (scale) and j (min).
inline void k4_scale_min(int j, const uint8_t* s, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// The 6-bit value (0..63) of element e (0..255) of a Q6_K super-block at blk: e = 128 h + r
// has its low nibble in ql[64 h + r % 64] (the high nibble when r >= 64) and its two high bits
// in qh[32 h + r % 32] at bit 2 (r / 32); ql at blk, qh at blk + 128.
inline int q6k_value(const uint8_t* blk, int e) {
  const int h = e / 128, r = e % 128;
  const int lo = (blk[64 * h + r % 64] >> (4 * (r / 64))) & 0x0f;
  const int hi = (blk[128 + 32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
  return lo | (hi << 4);
}

// The 5-bit value (0..31) of element e (0..255) of a Q5_K super-block at blk ({f16 d, f16
// dmin, scales[12], qh[32], qs[128]}): e = 32 j + l has its low nibble in qs[32 (j / 2) + l]
// (the high nibble when j is odd) and its fifth bit in qh[l] at bit j.
inline int q5k_value(const uint8_t* blk, int e) {
  const int j = e / 32, l = e % 32;
  return ((blk[48 + 32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0f) | (((blk[16 + l] >> j) & 1) << 4);
}

// Whether dequantize_row handles t: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K.
bool can_dequantize(DType t);

// One row of k elements (k a multiple of dtype_block_elems(t)): dtype_row_bytes(t, k) bytes
// at `src` (any alignment) into out[k].
void dequantize_row(DType t, const uint8_t* src, float* out, int64_t k);

// n_rows consecutive rows, split over the OpenMP threads.
void dequantize_rows(DType t, const uint8_t* src, float* out, int64_t n_rows, int64_t k);

}  // namespace tf

// Private layouts of quantized weights for the CPU backend's integer kernels, made once at
// upload (CpuBackend::upload) and kept beside the canonical bytes: U4x4 for the 4-bit ones
// (Q4_0, Q4_1, W4, Q4_K), U8x4 for the 8-bit ones (Q8_0, W8), Q6_K and Q5_K. Both hold the rows in groups
// of 4, so that a thread working through its groups reads one sequential stream.
//
// U4x4: the rows in groups of 4 (the last group padded with zero rows); per group, k in
// segments of kBlocks blocks of 32, each a header of the segment's scales for the 4 rows,
// then per block 64 bytes: the 4 rows' 16 bytes of nibbles (row r in bytes 16r..16r+15; byte
// i holds element i in its low nibble and element 16 + i in its high one, Q4_0's order).
// Every weight is c * q - m with q the nibble; the formats differ in their headers:
//   Q4_0   1 block:  c F16[4]                         m = 8 c
//   Q4_1   1 block:  c F16[4], min F16[4]             m = -min
//   W4     G / 32:   c F16[4], zero U8[4]             m = c * zero
//   Q4_K   8 blocks: d F16[4], dmin F16[4], then sc U8[8][4], min U8[8][4] (6-bit values
//                    unpacked; [block][row])           c = d * sc, m = dmin * min
// The same values as the canonical layouts (bit for bit: the kernels compute c and m from
// the stored fields as the canonical kernels do), within 4% of their bytes, reordered so
// that one 512-bit load holds one block of 4 rows and one small load their scales: the
// kernel multiplies 4 rows by one broadcast block of activations per instruction
// (kernels/qmatmul_packed.cpp).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tf::cpu {

constexpr int64_t kU4x4Rows = 4, kU4x4BlockBytes = 64;

struct U4x4Layout {
  int64_t blocks_per_segment = 0;  // kBlocks above
  int64_t header_bytes = 0;
  int64_t segment_bytes() const { return header_bytes + blocks_per_segment * kU4x4BlockBytes; }
};

// The layout for w (Q4_0, Q4_1, W4 with a group size multiple of 32, Q4_K), or one with
// blocks_per_segment 0 when w has none.
U4x4Layout u4x4_layout(const TensorView& w);
int64_t u4x4_bytes(const TensorView& w);
// Writes u4x4_bytes(w) bytes of w (host memory, canonical layout) in U4x4 to out.
void pack_u4x4(const TensorView& w, uint8_t* out);

// U8x4: the rows in groups of 4 (the last group padded with zero rows); per group, k in
// segments of kBlocks blocks of 32, each a header of the segment's scales for the 4 rows,
// then per block 128 bytes: the 4 rows' 32 int8 codes (row r in bytes 32r..32r+31, element
// order). Every weight is c * q (+ o for Q5_K):
//   Q8_0   1 block:  c F16[4]     (136 bytes a segment: as many as 4 canonical blocks)
//   W8     k / 32:   c F32[4]     (the rows' scales, once per group)
//   Q6_K   8 blocks: d F16[4], then sc int8[8][4][2] ([block][row][half]); q = q6 - 32 and
//                    c = d * sc of the code's 16 (1,096 bytes a segment against 4 x 210: the
//                    6-bit values widened to bytes, 30% more, which the byte products read
//                    without unpacking)
//   Q5_K   8 blocks: d F16[4], dmin F16[4], sc uint8[8][4] and mn uint8[8][4] ([block][row],
//                    the 6-bit scales and mins unpacked); q = q5 - 16, c = d * sc and
//                    o = 16 c - dmin * mn of the code's block (1,104 bytes a segment against
//                    4 x 176)
// The same values as the canonical layouts, reordered so that one 512-bit load holds one
// block of 2 rows (256-bit: one row) and the kernel reads no scale array beside the codes
// (kernels/qmatmul_packed.cpp).
constexpr int64_t kU8x4BlockBytes = 128;

// The layout for w (Q8_0; W8 with scales, k a multiple of 32; Q6_K and Q5_K, k a multiple of 256), or
// one with blocks_per_segment 0 when w has none.
U4x4Layout u8x4_layout(const TensorView& w);
int64_t u8x4_bytes(const TensorView& w);
// Writes u8x4_bytes(w) bytes of w (host memory, canonical layout) in U8x4 to out.
void pack_u8x4(const TensorView& w, uint8_t* out);

}  // namespace tf::cpu

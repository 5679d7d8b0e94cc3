// RoPE and the KV-slot write as the kernels that do them share them (rope_kv.cu's kernel and
// the QKV GEMV's RopeKv epilogue in gemv.cu), so the fused and the separate path round the
// same way. Device code only.
#pragma once

#include <cstdint>

namespace tf::cuda {

// Rotate-half RoPE of the pair (y0, y1) = dims (i, i + n_rot / 2) at position `pos`: the
// angle pos * inv_freq[i] in F32, as the reference computes it; cos and sin times mscale.
__device__ __forceinline__ void rope_rotate(float& y0, float& y1, int32_t pos, float inv_freq, float mscale = 1.0f) {
  const float angle = float(pos) * inv_freq;
  float s, c;
  sincosf(angle, &s, &c);
  s *= mscale;
  c *= mscale;
  const float x0 = y0, x1 = y1;
  y0 = x0 * c - x1 * s;
  y1 = x1 * c + x0 * s;
}

// The pool row of KV slot `slot` for kv head `kvh`: pools are [n_blocks, n_kv_heads,
// block_size] rows, the slot's block is slot / block_size.
__device__ __forceinline__ int64_t kv_slot_row(int64_t slot, int64_t n_kv_heads, int64_t kvh, int64_t block_size) {
  return (slot / block_size * n_kv_heads + kvh) * block_size + slot % block_size;
}

}  // namespace tf::cuda

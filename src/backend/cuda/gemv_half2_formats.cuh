// The weight formats of the half2 decode GEMVs (gemv_half2.cu, gemv_split.cu): how a 16-byte
// chunk of W4 or W8 codes loads, how 8 inputs are staged as F16 for it, and how a chunk
// multiplies into FP32 accumulators on packed half2 arithmetic (gemv_half2.cu's header
// comment gives the arithmetic and its rounding). Internal to src/backend/cuda.
#pragma once

#include <cuda_fp16.h>

#include <cstring>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gemm.cuh"

namespace tf::cuda::half2_detail {

__device__ __forceinline__ __half2 as_half2(uint32_t u) {
  __half2 h;
  static_assert(sizeof(h) == 4);
  memcpy(&h, &u, 4);
  return h;
}
__device__ __forceinline__ uint32_t as_u32(__half2 h) {
  uint32_t u;
  memcpy(&u, &h, 4);
  return u;
}

// (a & b) | c as one LOP3: written as & and |, the compiler emits two, since a LOP3 holds one
// immediate and b and c are both constants here.
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// The formats. Each says how many codes a 16-byte chunk holds (kElems; kElems / 8 words of
// staged x go with it), how 8 consecutive inputs are staged (one uint4 of F16), what loads
// with a chunk, and how a chunk multiplies into the accumulators.
struct FormatW4 {
  static constexpr int kElems = 32;
  static constexpr bool kRowScale = false;
  struct Chunk {
    uint4 q;
    __half s;  // the group's scale and zero point
    uint8_t z;
  };
  // Where a chunk's group is: chunk i of row j is in group j * n_groups + i / per_group
  // (i >> shift when per_group is a power of two, shift -1 otherwise).
  struct Groups {
    int64_t n_groups;
    int32_t per_group, shift;
  };
  __device__ static Groups groups(const GemmArgs& g) {
    const int32_t per_group = g.wq.group_size / kElems;
    const bool pow2 = (per_group & (per_group - 1)) == 0;
    return {g.k / g.wq.group_size, per_group, pow2 ? 31 - __clz(per_group) : -1};
  }
  __device__ static uint4 stage(const float (&v)[8], float p) {
    uint4 h;
    h.x = as_u32(__floats2half2_rn(v[0] * p, v[4] * p));
    h.y = as_u32(__floats2half2_rn(v[1] * p * 0.0625f, v[5] * p * 0.0625f));
    h.z = as_u32(__floats2half2_rn(v[2] * p, v[6] * p));
    h.w = as_u32(__floats2half2_rn(v[3] * p * 0.0625f, v[7] * p * 0.0625f));
    return h;
  }
  __device__ static void load(const GemmArgs& g, const Groups& gr, int64_t row, int64_t i, Chunk& c) {
    const int64_t grp = row * gr.n_groups + (gr.shift >= 0 ? i >> gr.shift : int64_t(int32_t(i) / gr.per_group));
    c.q = load_stream(reinterpret_cast<const uint4*>(g.wq.q + row * (g.k / 2)) + i);
    c.s = static_cast<const __half*>(g.wq.scales)[grp];
    c.z = g.wq.zeros[grp];
  }
  // x[e * kWordStride]: the staged x of word e (codes 8e..8e+7) of the chunk, for row r at
  // x + r * stride.
  template <int R, int kWordStride = 32>
  __device__ static void multiply(const Chunk& c, const uint4* x, int64_t stride, float (&acc)[R]) {
    const __half2 a_off = as_half2((0x6400u + c.z) * 0x10001u);        // 1024 + z in both halves
    const __half2 b_off = as_half2((0x6400u + 16u * c.z) * 0x10001u);  // 1024 + 16 z
    __half2 h[R];
#pragma unroll
    for (int r = 0; r < R; ++r) h[r] = __float2half2_rn(0.0f);
    const uint32_t words[4] = {c.q.x, c.q.y, c.q.z, c.q.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint32_t w = words[e], w8 = w >> 8;
      const __half2 d0 = __hsub2(as_half2(and_or(w, 0x000f000fu, 0x64006400u)), a_off);   // codes 0, 4
      const __half2 d1 = __hsub2(as_half2(and_or(w, 0x00f000f0u, 0x64006400u)), b_off);   // 16 x codes 1, 5
      const __half2 d2 = __hsub2(as_half2(and_or(w8, 0x000f000fu, 0x64006400u)), a_off);  // codes 2, 6
      const __half2 d3 = __hsub2(as_half2(and_or(w8, 0x00f000f0u, 0x64006400u)), b_off);  // 16 x codes 3, 7
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint4 xv = x[r * stride + e * kWordStride];
        h[r] = __hfma2(d0, as_half2(xv.x), h[r]);
        h[r] = __hfma2(d1, as_half2(xv.y), h[r]);
        h[r] = __hfma2(d2, as_half2(xv.z), h[r]);
        h[r] = __hfma2(d3, as_half2(xv.w), h[r]);
      }
    }
    const float s = __half2float(c.s);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float2 p = __half22float2(h[r]);
      acc[r] += s * (p.x + p.y);
    }
  }
};

struct FormatW8 {
  static constexpr int kElems = 16;
  static constexpr bool kRowScale = true;
  struct Chunk {
    uint4 q;
  };
  struct Groups {};  // one scale per row
  __device__ static Groups groups(const GemmArgs&) { return {}; }
  __device__ static uint4 stage(const float (&v)[8], float p) {
    uint4 h;
    h.x = as_u32(__floats2half2_rn(v[0] * p, v[2] * p));
    h.y = as_u32(__floats2half2_rn(v[1] * p, v[3] * p));
    h.z = as_u32(__floats2half2_rn(v[4] * p, v[6] * p));
    h.w = as_u32(__floats2half2_rn(v[5] * p, v[7] * p));
    return h;
  }
  __device__ static void load(const GemmArgs& g, const Groups&, int64_t row, int64_t i, Chunk& c) {
    c.q = load_stream(reinterpret_cast<const uint4*>(g.wq.q + row * g.k) + i);
  }
  // Staged word e / 2 of the chunk at x[(e / 2) * kWordStride], for row r at x + r * stride.
  template <int R, int kWordStride = 32>
  __device__ static void multiply(const Chunk& c, const uint4* x, int64_t stride, float (&acc)[R]) {
    const __half2 off = as_half2(0x64806480u);  // 1152 = 1024 + 128
    __half2 h[R];
#pragma unroll
    for (int r = 0; r < R; ++r) h[r] = __float2half2_rn(0.0f);
    const uint32_t words[4] = {c.q.x, c.q.y, c.q.z, c.q.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {  // word e: codes 4e..4e+3, half e % 2 of staged word e / 2
      const uint32_t u = words[e] ^ 0x80808080u;  // q + 128, as unsigned bytes
      const __half2 d0 = __hsub2(as_half2(__byte_perm(u, 0x64646464u, 0x4240u)), off);  // codes 0, 2
      const __half2 d1 = __hsub2(as_half2(__byte_perm(u, 0x64646464u, 0x4341u)), off);  // codes 1, 3
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint4 xv = x[r * stride + (e / 2) * kWordStride];
        h[r] = __hfma2(d0, as_half2(e % 2 ? xv.z : xv.x), h[r]);
        h[r] = __hfma2(d1, as_half2(e % 2 ? xv.w : xv.y), h[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float2 p = __half22float2(h[r]);
      acc[r] += p.x + p.y;
    }
  }
};

}  // namespace tf::cuda::half2_detail

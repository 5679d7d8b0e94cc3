// Warp-level tensor-core and async-copy primitives (sm_80+ PTX) for hand-written tiled
// kernels: mma.sync m16n8k16 BF16 with FP32 accumulation, ldmatrix, cp.async.
//
// Fragment layouts of mma.m16n8k16 (g = lane / 4, q = lane % 4; a register holds two BF16
// values, the lower column / k index in the low half):
//   A 16x16 (row-major): a[0] = (row g,   cols 2q, 2q+1)   a[1] = (row g+8, cols 2q, 2q+1)
//                        a[2] = (row g,   cols 2q+8, +9)   a[3] = (row g+8, cols 2q+8, +9)
//   B 16x8 (k x n):      b[0] = (k 2q, 2q+1; col g)        b[1] = (k 2q+8, 2q+9; col g)
//   C 16x8 (FP32):       c[0], c[1] = (row g, cols 2q, 2q+1)   c[2], c[3] = (row g+8, same cols)
// ldmatrix.x4: lane l gives the shared address of row l % 8 of 8x8 matrix l / 8 (a row is 16
// contiguous bytes); register i receives matrix i, lane l holding its row g, elements 2q and
// 2q+1 (.trans: the transposed matrix, i.e. rows 2q and 2q+1 of column g). So a C fragment's
// 8x8 halves and an A/B fragment's registers are each one ldmatrix matrix.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace tf::cuda {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a b for one m16n8k16 tile (BF16 inputs, FP32 accumulators).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as a BF16 pair (round to nearest even), `lo` in the low half.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// 2^x by the SFU (ex2.approx: ~2 ulp, 2^-inf = 0; subnormal results flush to 0).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 16-byte global -> shared copy that bypasses L1; with `valid` false nothing is read and the
// 16 bytes are zero-filled (src-size 0; `src` must still be a valid address).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
// The same for 4 bytes (through L1: cp.async.cg takes 16-byte copies only).
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0) : "memory");
}
// 8 bytes through L1, always read.
__device__ __forceinline__ void cp_async_8(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most `n` of this thread's committed groups are still in flight.
template <int n>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(n) : "memory");
}

// ---- BF16 pair arithmetic and exact 8-bit code -> BF16 pair conversions ----------------------

constexpr uint32_t kBf16Pair128 = 0x43004300u;  // the BF16 pair (128, 128)

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}
__device__ __forceinline__ uint32_t bf16x2_sub(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
// Bytes 0 and 2 of t (two INT8 codes) as a BF16 pair, byte 0 in the low half: 128 + (c & 127)
// minus 128 + (c & 128) is exact in BF16.
__device__ __forceinline__ uint32_t int8_pair(uint32_t t) {
  return bf16x2_sub((t & 0x007F007Fu) | kBf16Pair128, (t & 0x00800080u) | kBf16Pair128);
}
// The low 16 bits of t (two E4M3 codes, low byte first) as a BF16 pair: the hardware's
// e4m3x2 -> f16x2, whose exponent and mantissa bits are moved into BF16's fields (an F16 value
// v becomes v * 2^-112 in BF16) and multiplied back by 2^112. Exact for every E4M3 value.
__device__ __forceinline__ uint32_t e4m3_pair(uint32_t t) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(t & 0xffffu), __NV_E4M3);
  const uint32_t u = uint32_t(h.x) | uint32_t(h.y) << 16;
  return bf16x2_mul(((u & 0x7FFF7FFFu) >> 3) | (u & 0x80008000u), 0x77807780u);
}

}  // namespace tf::cuda

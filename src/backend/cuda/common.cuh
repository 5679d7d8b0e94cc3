// Device helpers shared by the kernels of the CUDA backend: conversions between the storage
// types and float, and block-wide reductions. Kernels compute in float (FP32 accumulation)
// and round to the storage type once, on the store.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

using bf16 = __nv_bfloat16;
using fp8_e4m3 = __nv_fp8_e4m3;  // FP8 KV elements (quant/kv_fp8.h)

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
// INT8 KV elements: the stored integer (callers multiply by the row's scale).
__device__ __forceinline__ float to_float(int8_t x) { return float(x); }
// FP8 KV elements: the E4M3 value (callers multiply by the row's scale).
__device__ __forceinline__ float to_float(fp8_e4m3 x) { return float(x); }

// Round to nearest even, as tf::f32_to_bf16 / f32_to_f16 on the host.
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

// The two BF16 values packed in a 32-bit word, low half first (memory order).
__device__ __forceinline__ float bf16_lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

// A 16-byte load that bypasses L1 (read-once streams such as weights).
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// Eight BF16 values of a 16-byte chunk as float, and back (round to nearest even).
__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8]) {
  f[0] = bf16_lo(u.x); f[1] = bf16_hi(u.x); f[2] = bf16_lo(u.y); f[3] = bf16_hi(u.y);
  f[4] = bf16_lo(u.z); f[5] = bf16_hi(u.z); f[6] = bf16_lo(u.w); f[7] = bf16_hi(u.w);
}
__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  uint4 u;
  uint32_t* w = reinterpret_cast<uint32_t*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const bf16 lo = from_float<bf16>(f[2 * i]), hi = from_float<bf16>(f[2 * i + 1]);
    w[i] = uint32_t(*reinterpret_cast<const uint16_t*>(&lo)) | uint32_t(*reinterpret_cast<const uint16_t*>(&hi)) << 16;
  }
  return u;
}

// Programmatic dependent launch (Hopper; launch_pdl in launch.cuh). A kernel launched with it
// may start while the previous kernel of the stream is still running, so before it reads
// anything an earlier kernel wrote, and before it writes anything, it calls pdl_begin(): that
// returns once the previous kernel has finished and its writes are visible (at once when the
// kernel was launched without PDL), then lets the next kernel launch early (once every block
// of this one has got there or exited). Reads of data no kernel writes (weights) may go
// first, which is the point: a GEMV starts streaming its weights while the previous op
// drains. Every kernel launched with PDL calls pdl_begin() on every path, so completion stays
// ordered down the stream.
__device__ __forceinline__ void pdl_begin() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" :::);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum / max of `v` over the thread block, returned to every thread. blockDim.x must be a
// multiple of 32 (at most 1024); `scratch` holds 32 floats of shared memory. Starts and
// ends with a barrier, so scratch may be reused by the next call at once.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < n_warps ? scratch[lane] : 0.0f;
  r = warp_sum(r);
  __syncthreads();
  return r;
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < n_warps ? scratch[lane] : -INFINITY;
  r = warp_max(r);
  __syncthreads();
  return r;
}

}  // namespace tf::cuda

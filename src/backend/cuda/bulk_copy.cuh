// One-dimensional bulk copies from global to shared memory (Hopper's copy engine, sm_90), which
// complete on a shared-memory mbarrier counting bytes. One phase: a thread initializes the
// barrier for one arrival, arrives with the bytes to expect, the copies are issued (16-byte
// aligned addresses and sizes), and the waiting threads spin on phase 0. Internal to
// src/backend/cuda.
#pragma once

#include <cstdint>

#include "backend/cuda/mma.cuh"

namespace tf::cuda {

// For one arrival; then visible to the copy engine (the async proxy) and, after a barrier of
// the block, to the block's threads.
__device__ __forceinline__ void mbar_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// The one arrival, with `bytes` still to land.
__device__ __forceinline__ void mbar_arrive_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// `bytes` (a multiple of 16) from `src` to shared address `dst` (both 16-byte aligned).
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}

// Returns once phase `parity` of the barrier has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

}  // namespace tf::cuda

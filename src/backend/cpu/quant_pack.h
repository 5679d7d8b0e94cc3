// A private layout of Q4_0 weights for the CPU backend's integer kernels, made once at
// upload (CpuBackend::upload) and kept beside the canonical bytes.
//
// Q4_0x4: the rows in groups of 4 (the last group padded with zero rows), and per group and
// block b of 32 weights, 72 bytes: the 4 rows' F16 scales d, then the 4 rows' 16 bytes of
// nibbles exactly as in their Q4_0 blocks. The same bytes as Q4_0, reordered so that one
// 512-bit load holds one block of 4 rows and one 64-bit load their 4 scales: the kernel
// multiplies 4 rows by one broadcast block of activations per instruction instead of
// gathering each row's scale and nibbles apart (kernels/qmatmul_packed.cpp).
//   [ceil(m / 4), k / 32, 72 bytes]
#pragma once

#include <cstdint>

namespace tf::cpu {

constexpr int64_t kQ4_0x4GroupRows = 4, kQ4_0x4BlockBytes = 72;

int64_t q4_0x4_bytes(int64_t m, int64_t k);
// q4_0: [m, k] in Q4_0 blocks of 18 bytes (k % 32 == 0); out: q4_0x4_bytes(m, k) bytes.
void pack_q4_0x4(const uint8_t* q4_0, int64_t m, int64_t k, uint8_t* out);

}  // namespace tf::cpu

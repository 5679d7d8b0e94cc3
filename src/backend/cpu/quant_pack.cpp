// Repacking of Q4_0 weights into Q4_0x4; see quant_pack.h.
#include "backend/cpu/quant_pack.h"

#include <cstring>

namespace tf::cpu {

int64_t q4_0x4_bytes(int64_t m, int64_t k) {
  return (m + kQ4_0x4GroupRows - 1) / kQ4_0x4GroupRows * (k / 32) * kQ4_0x4BlockBytes;
}

void pack_q4_0x4(const uint8_t* q4_0, int64_t m, int64_t k, uint8_t* out) {
  constexpr int64_t kBytes = 18;  // a Q4_0 block: f16 d, 16 bytes of nibbles
  const int64_t nb = k / 32, n_groups = (m + kQ4_0x4GroupRows - 1) / kQ4_0x4GroupRows;
  for (int64_t g = 0; g < n_groups; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* dst = out + (g * nb + b) * kQ4_0x4BlockBytes;
      for (int64_t r = 0; r < kQ4_0x4GroupRows; ++r) {
        const int64_t row = g * kQ4_0x4GroupRows + r;
        if (row < m) {
          const uint8_t* src = q4_0 + (row * nb + b) * kBytes;
          std::memcpy(dst + 2 * r, src, 2);
          std::memcpy(dst + 8 + 16 * r, src + 2, 16);
        } else {  // padding row: scale 0, nibbles 0
          std::memset(dst + 2 * r, 0, 2);
          std::memset(dst + 8 + 16 * r, 0, 16);
        }
      }
    }
  }
}

}  // namespace tf::cpu

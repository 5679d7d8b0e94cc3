// The scales of the repacked 4-bit and 8-bit weights (backend/cpu/quant_pack.h), read by the
// kernels over them: qmatmul_packed.cpp (few tokens) and qgemm_packed.cpp (prefill). AVX2 and
// above; compiled once per ISA level like every file of this folder.
#pragma once

#include <cstdint>
#include <cstring>

#include "backend/cpu/kernels/simd.h"
#include "core/dtype.h"

namespace tf::cpu::TF_CPU_ISA_NS {

#if defined(__AVX2__)
inline __m128 f16x4(const uint8_t* p) { return _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
inline __m128 u8x4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm_cvtepi32_ps(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(v)));
}

// The 4 rows' c and m of block i of a U4x4 segment whose header is h. Q4_0's m is 8 c; it
// comes back as c (the few-token kernel scales its sum by 8 once).
template <DType kFmt>
inline void block_scales(const uint8_t* h, int64_t i, __m128* c, __m128* m) {
  if constexpr (kFmt == DType::Q4_0) {
    *c = f16x4(h);
    *m = *c;
  } else if constexpr (kFmt == DType::Q4_1) {  // w = d q + min: m = -min
    *c = f16x4(h);
    *m = _mm_sub_ps(_mm_setzero_ps(), f16x4(h + 8));
  } else if constexpr (kFmt == DType::W4) {
    *c = f16x4(h);
    *m = _mm_mul_ps(*c, u8x4(h + 8));
  } else {  // Q4_K
    *c = _mm_mul_ps(f16x4(h), u8x4(h + 16 + 4 * i));
    *m = _mm_mul_ps(f16x4(h + 8), u8x4(h + 48 + 4 * i));
  }
}
#endif

}  // namespace tf::cpu::TF_CPU_ISA_NS

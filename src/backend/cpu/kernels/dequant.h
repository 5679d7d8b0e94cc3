// Quantized weight rows dequantized to F32 a slice at a time, for the float prefill GEMM
// (gemm.cpp) on levels where the integer GEMM pays twice for 16-bit activations (kernels.h,
// KernelTable::prefill_dequant_8bit / _4bit). Formats (quant/formats.h, quant/gguf_dequant.h): W8, W4,
// Q8_0, Q4_0, Q4_1. Each value is the reference's product of the stored scale and the code
// (Q4_1's d * q + m may round once, as one fused multiply-add, where the reference rounds
// twice).
#pragma once

#include <cstdint>
#include <cstring>

#include "backend/cpu/kernels/simd.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace tf::cpu::TF_CPU_ISA_NS {

// Whether dequant_slice takes weights of dtype t.
inline bool dequant_slice_covers(DType t) {
  return t == DType::W8 || t == DType::W4 || t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1;
}

namespace dequant_detail {

// The low and high nibbles of kLanes bytes as floats, minus z.
inline void nibbles(const uint8_t* p, float z, VecF& lo, VecF& hi) {
  const VecI b = widen_u8(p);
  lo = __builtin_convertvector(VecI(b & 15), VecF) - z;
  hi = __builtin_convertvector(VecI(b >> 4), VecF) - z;
}

// GGUF Q4_0 / Q4_1 block (32 elements: element j < 16 the low nibble of byte j, j + 16 its
// high nibble): w = d * (q - 8), or d * q + m.
template <bool kMin>
inline void q4_block(const uint8_t* blk, float* out) {
  uint16_t dh, mh = 0;
  std::memcpy(&dh, blk, 2);
  if constexpr (kMin) std::memcpy(&mh, blk + 2, 2);
  const float d = half_to_f32(dh), m = kMin ? half_to_f32(mh) : 0.0f;
  const uint8_t* q = blk + (kMin ? 4 : 2);
  for (int j = 0; j < 16; j += kLanes) {
    VecF lo, hi;
    nibbles(q + j, kMin ? 0.0f : 8.0f, lo, hi);
    if constexpr (kMin) {
      store(out + j, lo * d + m);
      store(out + 16 + j, hi * d + m);
    } else {
      store(out + j, lo * d);
      store(out + 16 + j, hi * d);
    }
  }
}

}  // namespace dequant_detail

// Elements [k0, k0 + len) of row `row` of w into out[len]; k0 and len multiples of 32 (and
// within one W4 group's multiples where they cross groups: any multiple of 32 works).
inline void dequant_slice(const TensorView& w, int64_t row, int64_t k0, int64_t len, float* out) {
  using namespace dequant_detail;
  const int64_t k = w.shape[1];
  switch (w.dtype) {
    case DType::W8: {
      const int8_t* q = static_cast<const int8_t*>(w.data) + row * k + k0;
      const float s = static_cast<const float*>(w.scales)[row];
      for (int64_t j = 0; j < len; j += kLanes) store(out + j, widen_i8(q + j) * s);
      return;
    }
    case DType::Q8_0: {
      const uint8_t* blk = static_cast<const uint8_t*>(w.data) + dtype_row_bytes(w.dtype, k) * row + k0 / 32 * 34;
      for (int64_t b = 0; b < len / 32; ++b, blk += 34, out += 32) {
        uint16_t dh;
        std::memcpy(&dh, blk, 2);
        const float d = half_to_f32(dh);
        for (int j = 0; j < 32; j += kLanes) store(out + j, widen_i8(reinterpret_cast<const int8_t*>(blk + 2 + j)) * d);
      }
      return;
    }
    case DType::Q4_0:
    case DType::Q4_1: {
      const int64_t bytes = w.dtype == DType::Q4_0 ? 18 : 20;
      const uint8_t* blk = static_cast<const uint8_t*>(w.data) + dtype_row_bytes(w.dtype, k) * row + k0 / 32 * bytes;
      for (int64_t b = 0; b < len / 32; ++b, blk += bytes, out += 32) {
        if (w.dtype == DType::Q4_0) q4_block<false>(blk, out);
        else q4_block<true>(blk, out);
      }
      return;
    }
    case DType::W4: {
      // Element 2p in the low nibble of byte p, 2p + 1 in its high nibble: the nibbles
      // interleaved into element order as bytes, then widened.
      const int64_t g = w.group_size, n_groups = k / g;
      const uint8_t* q = static_cast<const uint8_t*>(w.data) + row * (k / 2);
      const uint16_t* sc = static_cast<const uint16_t*>(w.scales) + row * n_groups;
      const uint8_t* zp = static_cast<const uint8_t*>(w.zeros) + row * n_groups;
      for (int64_t j0 = k0; j0 < k0 + len; j0 += 32) {  // 32 divides the group
        const int64_t grp = j0 / g;
        const VecF s = splat(half_to_f32(sc[grp])), z = splat(float(zp[grp]));
        float* o = out + (j0 - k0);
#if defined(__AVX2__)
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + j0 / 2));
        const __m128i mask = _mm_set1_epi8(15);
        const __m128i lo = _mm_and_si128(b, mask), hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
        const __m128i e[2] = {_mm_unpacklo_epi8(lo, hi), _mm_unpackhi_epi8(lo, hi)};  // elements 0-15, 16-31
        uint8_t codes[32];
        std::memcpy(codes, e, 32);
        for (int j = 0; j < 32; j += kLanes) store(o + j, (__builtin_convertvector(widen_u8(codes + j), VecF) - z) * s);
#else
        for (int j = 0; j < 32; j += 2) {
          const uint8_t byte = q[(j0 + j) / 2];
          o[j] = (float(byte & 15) - z[0]) * s[0];
          o[j + 1] = (float(byte >> 4) - z[0]) * s[0];
        }
#endif
      }
      return;
    }
    default: return;
  }
}

}  // namespace tf::cpu::TF_CPU_ISA_NS

// Quantized weight rows dequantized to F32 a slice at a time, for the float prefill GEMM
// (gemm.cpp) on levels where the integer GEMM pays twice for 16-bit activations (kernels.h,
// KernelTable::prefill_dequant_8bit / _4bit). Formats (quant/formats.h, quant/gguf_dequant.h): W8, W4,
// Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K. Each value is the reference's product of the stored
// scale and the code (Q4_1's d * q + m and the K types' (d * sc) * q - dmin * mn may round
// once, as one fused multiply-add, where the reference rounds twice).
#pragma once

#include <cstdint>
#include <cstring>

#include "backend/cpu/kernels/simd.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "quant/gguf_dequant.h"

namespace tf::cpu::TF_CPU_ISA_NS {

// Whether dequant_slice takes weights of dtype t.
inline bool dequant_slice_covers(DType t) {
  return t == DType::W8 || t == DType::W4 || t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1 ||
         t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
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

// Q4_K / Q5_K super-block (256 elements, 8 sub-blocks of 32; sub-block 2i the low nibbles of
// bytes 32i..32i+31, 2i+1 their high nibbles; Q5_K's fifth bit of element l of sub-block j is
// bit j of qh[l]): w = (d * sc) * q - dmin * mn.
template <bool kFifth>
inline void k4_block(const uint8_t* blk, float* out) {
  uint16_t dh, mh;
  std::memcpy(&dh, blk, 2);
  std::memcpy(&mh, blk + 2, 2);
  const float d = half_to_f32(dh), dmin = half_to_f32(mh);
  const uint8_t* qh = blk + 16;
  const uint8_t* qs = blk + (kFifth ? 48 : 16);
  for (int j = 0; j < 8; ++j) {
    int sc, mn;
    k4_scale_min(j, blk + 4, &sc, &mn);
    const float dl = d * float(sc), ml = dmin * float(mn);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; l += kLanes) {
      VecI v = (widen_u8(qs + 32 * (j / 2) + l) >> shift) & 15;
      if constexpr (kFifth) v |= ((widen_u8(qh + l) >> j) & 1) << 4;
      store(out + 32 * j + l, __builtin_convertvector(v, VecF) * dl - ml);
    }
  }
}

// Q6_K super-block: element e = 128 h + r has its low nibble in byte 64 h + r % 64 (the high
// nibble when r >= 64), its two high bits in byte 128 + 32 h + r % 32 at bit 2 (r / 32), and
// the int8 scale e / 16 at byte 192; d at byte 208: w = (d * scale) * (q - 32).
inline void q6k_block(const uint8_t* blk, float* out) {
  uint16_t dh;
  std::memcpy(&dh, blk + 208, 2);
  const float d = half_to_f32(dh);
  const int8_t* scales = reinterpret_cast<const int8_t*>(blk + 192);
  for (int e = 0; e < 256; e += kLanes) {  // kLanes divides 16: one scale per vector
    const int h = e / 128, r = e % 128;
    const VecI lo = (widen_u8(blk + 64 * h + r % 64) >> (4 * (r / 64))) & 15;
    const VecI hi = (widen_u8(blk + 128 + 32 * h + r % 32) >> (2 * (r / 32))) & 3;
    store(out + e, __builtin_convertvector(VecI((lo | (hi << 4)) - 32), VecF) * (d * float(scales[e / 16])));
  }
}

}  // namespace dequant_detail

// Elements [k0, k0 + len) of row `row` of w into out[len]; k0 and len multiples of 32 (256
// for the K types, whose rows hold whole super-blocks).
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
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: {
      const int64_t bytes = int64_t(dtype_row_bytes(w.dtype, 256));
      const uint8_t* blk = static_cast<const uint8_t*>(w.data) + dtype_row_bytes(w.dtype, k) * row + k0 / 256 * bytes;
      for (int64_t b = 0; b < len / 256; ++b, blk += bytes, out += 256) {
        if (w.dtype == DType::Q4_K) k4_block<false>(blk, out);
        else if (w.dtype == DType::Q5_K) k4_block<true>(blk, out);
        else q6k_block(blk, out);
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

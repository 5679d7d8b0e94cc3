// Float vectors one hardware register wide, for the kernels of this folder (compiled once
// per ISA level, see isa.h): GCC vector extensions whose width follows the compiler flags
// of the level, so one source gives SSE2, AVX2 and AVX-512 code. The kernels are compiled
// with -ffp-contract=fast, so `acc += a * b` becomes one FMA where the level has FMA.
//
// Wider vectors than the target has would be split by GCC and register-blocked
// accumulators would spill, hence one register exactly.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__AVX__)
// GCC 12's AVX-512 intrinsic headers trip -W(maybe-)uninitialized inside themselves (on the
// unused pass-through operand of the unmasked forms); the diagnostic is located in the
// header, so ignoring it around this first inclusion silences only those.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#include "core/dtype.h"

#ifndef TF_CPU_ISA_NS
#error "kernels/simd.h is for the per-ISA kernel sources (TF_CPU_ISA_NS names the level)"
#endif

namespace tf::cpu::TF_CPU_ISA_NS {

#if defined(__AVX512F__)
inline constexpr int kLanes = 16;
#elif defined(__AVX__)
inline constexpr int kLanes = 8;
#else
inline constexpr int kLanes = 4;
#endif

typedef float VecF __attribute__((vector_size(kLanes * 4)));
typedef uint32_t VecU __attribute__((vector_size(kLanes * 4)));
typedef int32_t VecI __attribute__((vector_size(kLanes * 4)));
typedef uint16_t VecH __attribute__((vector_size(kLanes * 2)));

inline VecF load(const float* p) {
  VecF v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void store(float* p, VecF v) { std::memcpy(p, &v, sizeof(v)); }
// Every lane x. (Not VecF{} + x: 0 + x is not x for x = -0, so GCC keeps a scalar add.)
inline VecF splat(float x) {
#if defined(__AVX512F__)
  return _mm512_set1_ps(x);
#elif defined(__AVX__)
  return _mm256_set1_ps(x);
#else
  return VecF{x, x, x, x};
#endif
}
// Horizontal sum, as a tree of halvings (a log2(kLanes)-deep chain instead of kLanes - 1
// dependent scalar adds: the matmul tiles reduce 24 accumulators at the end of each row block).
inline float hsum(VecF v) {
#if defined(__AVX512F__)
  return _mm512_reduce_add_ps(v);
#elif defined(__AVX__)
  const __m256 a = v;
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
#else
  return (v[0] + v[2]) + (v[1] + v[3]);
#endif
}
inline float hmax(VecF v) {
  float s = v[0];
  for (int i = 1; i < kLanes; ++i) s = s > v[i] ? s : v[i];
  return s;
}

// exp(x) for each lane, within about 2 ulp of the correctly rounded value: x = n ln2 + r
// with n = round(x / ln2) and ln2 in two parts (the product n * ln2_hi is exact), exp(r) by
// Cephes' degree-6 polynomial on |r| <= ln2 / 2, times 2^n built in the exponent bits. x
// is clamped to [-87.34, 88.72] (results from 2^-126 to 3.4e38: no inf, and 0 is never
// reached, where std::exp gives inf or denormals; for the softmax and SiLU terms here the
// difference is below 1e-38); NaN stays NaN.
inline VecF exp_vec(VecF x) {
  const VecF lo = splat(-87.336544f), hi = splat(88.722839f);
  const VecI is_nan = x != x;
  VecF xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const VecF magic = splat(0x1.8p23f);  // adding then subtracting it rounds to an integer
  const VecF n = (xc * 1.44269504088896341f + magic) - magic;
  VecF r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  VecF p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const VecF y = p * r * r + r + 1.0f;
  const VecI bits = (__builtin_convertvector(n, VecI) + 127) << 23;
  VecF scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  const VecF e = y * scale;
  VecI out;
  std::memcpy(&out, &e, sizeof(out));
  VecI xi;
  std::memcpy(&xi, &x, sizeof(xi));
  out = (out & ~is_nan) | (xi & is_nan);
  VecF res;
  std::memcpy(&res, &out, sizeof(res));
  return res;
}

// bfloat16 is the high half of a float: widen, shift, reinterpret (exact). Intrinsics where
// GCC would otherwise split the widening into 256-bit halves.
inline VecF widen_bf16(const uint16_t* p) {
#if defined(__AVX512F__)
  const __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16);
#elif defined(__AVX2__)
  const __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16);
#else
  VecH h;
  std::memcpy(&h, p, sizeof(h));
  const VecU u = __builtin_convertvector(h, VecU) << 16;
#endif
  VecF f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// IEEE half to float, exact. With F16C (every level but baseline) one vcvtph2ps (GCC 12
// turns a conversion of _Float16 vectors into a library call per element, hence the
// intrinsics). Without F16C, integer ops do it: the
// exponent and mantissa bits moved into a float's place read as 2^-112 times the half's
// value (denormals included), and one multiply by 2^112 is exact; inf/NaN (exponent 31)
// map to exponent 255 with NaNs quieted, as the hardware does.
inline VecF widen_f16(const uint16_t* p) {
#if defined(__AVX512F__)
  const __m512 f = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
#elif defined(__F16C__) && defined(__AVX__)
  const __m256 f = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#endif
#if defined(__AVX512F__) || (defined(__F16C__) && defined(__AVX__))
  VecF v;
  std::memcpy(&v, &f, sizeof(v));
  return v;
#else
  VecH h16;
  std::memcpy(&h16, p, sizeof(h16));
  const VecU h = __builtin_convertvector(h16, VecU);
  const VecU sign = (h & 0x8000u) << 16, em = h & 0x7fffu, shifted = em << 13;
  VecF f;
  std::memcpy(&f, &shifted, sizeof(f));
  f *= 0x1p112f;
  VecU u;
  std::memcpy(&u, &f, sizeof(u));
  const VecU special = shifted | 0x7f800000u | (VecU(em > 0x7c00u) & 0x00400000u);
  const VecU is_special = VecU(em >= 0x7c00u);
  u = (u & ~is_special) | (special & is_special);
  u |= sign;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

// One half's value: F16C's vcvtph2ps where the level has it (GCC 12 converts a scalar
// _Float16 through a library call), else core/dtype.h's conversion. Exact either way.
inline float half_to_f32(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return f16_to_f32(h);
#endif
}

// kLanes signed / unsigned bytes widened to floats / 32-bit lanes (intrinsics where the level
// has them: GCC 12 converts byte vectors lane by lane).
inline VecF widen_i8(const int8_t* p) {
#if defined(__AVX512F__)
  const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#elif defined(__AVX2__)
  const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#else
  VecF f;
  for (int l = 0; l < kLanes; ++l) f[l] = float(p[l]);
#endif
  VecF v;
  std::memcpy(&v, &f, sizeof(v));
  return v;
}
inline VecI widen_u8(const uint8_t* p) {
#if defined(__AVX512F__)
  const __m512i u = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#elif defined(__AVX2__)
  const __m256i u = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
#else
  VecI u;
  for (int l = 0; l < kLanes; ++l) u[l] = p[l];
#endif
  VecI v;
  std::memcpy(&v, &u, sizeof(v));
  return v;
}

// Weight storage types: float, or the bits of a BF16 / F16.
struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};
// kLanes weights of storage type W as floats.
template <typename W>
inline VecF load_w(const W* p) {
  if constexpr (sizeof(W) == 4) return load(reinterpret_cast<const float*>(p));
  else if constexpr (std::is_same_v<W, Bf16>) return widen_bf16(reinterpret_cast<const uint16_t*>(p));
  else return widen_f16(reinterpret_cast<const uint16_t*>(p));
}
template <typename W>
inline float to_f32(W w) {
  if constexpr (sizeof(W) == 4) return w;
  else if constexpr (std::is_same_v<W, Bf16>) return bf16_to_f32(w.bits);
  else return f16_to_f32(w.bits);
}

// The integer kernels' join of 16-bit activations' two int8 planes, 254 hi + lo per int32
// lane, for |hi| < 2^15 (what a lane's products of unsigned weights below 64, or of nibbles,
// and an int8 stay under): the int16 pair (hi, its sign) of each lane times (254, 0), one
// vpdpwssd with VNNI. Exact; larger |hi| needs the shifts (254 hi = (hi << 8) - (hi << 1)).
#if defined(__AVX2__)
inline __m256i join254_small(__m256i hi, __m256i lo) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpwssd_epi32(lo, hi, _mm256_set1_epi32(254));
#else
  return _mm256_add_epi32(_mm256_madd_epi16(hi, _mm256_set1_epi32(254)), lo);
#endif
}
#endif
#if defined(__AVX512BW__)
inline __m512i join254_small(__m512i hi, __m512i lo) {
#if defined(__AVX512VNNI__)
  return _mm512_dpwssd_epi32(lo, hi, _mm512_set1_epi32(254));
#else
  return _mm512_add_epi32(_mm512_madd_epi16(hi, _mm512_set1_epi32(254)), lo);
#endif
}
#endif

}  // namespace tf::cpu::TF_CPU_ISA_NS

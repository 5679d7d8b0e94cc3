// Integer matmul over Q4_0 weights repacked as Q4_0x4 (backend/cpu/quant_pack.h): groups of
// 4 rows [g, k / 32, 72 bytes] against activations quantized per block of 32 (kernels.h).
//
// Per block b, a 512-bit load holds the 4 rows' 16 bytes of nibbles (128-bit lane r = row
// r); their low nibbles are elements 0-15 of each row, the high ones 16-31. The activation
// block's two halves are broadcast to all four lanes, so two vpdpbusd give each row's dot
// product in its 4 int32 lanes (256-bit: two registers of 2 rows each). Then per lane
//   acc += float(dot) * d_r * dx_b        corr += d_r * s_b   (s_b = dx_b * sum(xq_b))
// and row r's output is the sum of its 4 lanes of acc - 8 * corr / 4 (Q4_0's zero point
// 8: sum_j d (q_j - 8) x_j; corr counted once in each of the 4 lanes). Compared with the
// canonical layout (qmatmul.cpp) the per-row scale gathering and nibble shuffles are gone.
// NT tokens share each block's unpacking. AVX2 and above; the baseline level has no
// kernel for this layout (the canonical one serves it).
#include <algorithm>
#include <cstring>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/simd.h"

namespace tf::cpu::TF_CPU_ISA_NS {

#if defined(__AVX2__)
namespace {

constexpr int kGroupRows = 4, kMaxTok = 4;
constexpr int64_t kGroupBytes = 72, kBlock = 32;

inline __m128 scales4(const uint8_t* p) {  // the group's 4 F16 scales as floats
  return _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

#if defined(__AVX512BW__)
inline __m512i dot(__m512i lo, __m512i xlo, __m512i hi, __m512i xhi) {
#if defined(__AVX512VNNI__)
  return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xlo), hi, xhi);
#else
  const __m512i ones = _mm512_set1_epi16(1);
  return _mm512_add_epi32(_mm512_madd_epi16(_mm512_maddubs_epi16(lo, xlo), ones),
                          _mm512_madd_epi16(_mm512_maddubs_epi16(hi, xhi), ones));
#endif
}

// Sums of each 128-bit lane (row) of v, rows 0-3.
inline void lane_sums(__m512 v, float* out) {
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0b10110001));  // pairs
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0b01001110));  // quads: every element holds its lane's sum
  out[0] = _mm512_cvtss_f32(v);
  out[1] = _mm_cvtss_f32(_mm512_extractf32x4_ps(v, 1));
  out[2] = _mm_cvtss_f32(_mm512_extractf32x4_ps(v, 2));
  out[3] = _mm_cvtss_f32(_mm512_extractf32x4_ps(v, 3));
}

template <int NT>
void group_tile(const QMatmulArgs& a, const uint8_t* group, float (&sums)[NT][kGroupRows], int64_t t0) {
  const int64_t k = a.x.k, nb = k / kBlock;
  const __m512i row_of_lane = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  __m512 acc[NT], corr[NT];
  for (int t = 0; t < NT; ++t) acc[t] = corr[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = group + b * kGroupBytes;
    const __m512 d = _mm512_permutexvar_ps(row_of_lane, _mm512_castps128_ps512(scales4(p)));
    const __m512i v = _mm512_loadu_si512(p + 8);
    const __m512i lo = _mm512_and_si512(v, nibble), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
    for (int t = 0; t < NT; ++t) {
      const int8_t* xb = a.x.q + (t0 + t) * k + b * kBlock;
      const __m512i xlo = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb)));
      const __m512i xhi = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + 16)));
      const int64_t blk = (t0 + t) * nb + b;
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot(lo, xlo, hi, xhi)), _mm512_mul_ps(d, _mm512_set1_ps(a.x.db[blk])),
                               acc[t]);
      corr[t] = _mm512_fmadd_ps(d, _mm512_set1_ps(a.x.sb[blk]), corr[t]);
    }
  }
  for (int t = 0; t < NT; ++t) lane_sums(_mm512_fnmadd_ps(_mm512_set1_ps(2.0f), corr[t], acc[t]), sums[t]);
}
#else
inline __m256i dot(__m256i lo, __m256i xlo, __m256i hi, __m256i xhi) {
  const __m256i ones = _mm256_set1_epi16(1);
  return _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo, xlo), ones),
                          _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xhi), ones));
}

// Sums of each 128-bit lane of v (rows r and r + 1).
inline void lane_sums(__m256 v, float* out) {
  v = _mm256_add_ps(v, _mm256_permute_ps(v, 0b10110001));
  v = _mm256_add_ps(v, _mm256_permute_ps(v, 0b01001110));
  out[0] = _mm256_cvtss_f32(v);
  out[1] = _mm_cvtss_f32(_mm256_extractf128_ps(v, 1));
}

template <int NT>
void group_tile(const QMatmulArgs& a, const uint8_t* group, float (&sums)[NT][kGroupRows], int64_t t0) {
  const int64_t k = a.x.k, nb = k / kBlock;
  const __m256i rows01 = _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0), rows23 = _mm256_set_epi32(3, 3, 3, 3, 2, 2, 2, 2);
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  __m256 acc[NT][2], corr[NT][2];
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < 2; ++h) acc[t][h] = corr[t][h] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = group + b * kGroupBytes;
    const __m256 d4 = _mm256_castps128_ps256(scales4(p));
    const __m256 d[2] = {_mm256_permutevar8x32_ps(d4, rows01), _mm256_permutevar8x32_ps(d4, rows23)};
    __m256i lo[2], hi[2];
    for (int h = 0; h < 2; ++h) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 8 + 32 * h));
      lo[h] = _mm256_and_si256(v, nibble);
      hi[h] = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
    }
    for (int t = 0; t < NT; ++t) {
      const int8_t* xb = a.x.q + (t0 + t) * k + b * kBlock;
      const __m256i xlo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb)));
      const __m256i xhi = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + 16)));
      const int64_t blk = (t0 + t) * nb + b;
      const __m256 dx = _mm256_set1_ps(a.x.db[blk]), sx = _mm256_set1_ps(a.x.sb[blk]);
      for (int h = 0; h < 2; ++h) {
        acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot(lo[h], xlo, hi[h], xhi)), _mm256_mul_ps(d[h], dx), acc[t][h]);
        corr[t][h] = _mm256_fmadd_ps(d[h], sx, corr[t][h]);
      }
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < 2; ++h)
      lane_sums(_mm256_fnmadd_ps(_mm256_set1_ps(2.0f), corr[t][h], acc[t][h]), sums[t] + 2 * h);
}
#endif

template <int NT>
void tile(const QMatmulArgs& a, int64_t g, int64_t t0) {
  const int64_t nb = a.x.k / kBlock;
  float sums[NT][kGroupRows];
  group_tile<NT>(a, static_cast<const uint8_t*>(a.packed) + g * nb * kGroupBytes, sums, t0);
  const int n_rows = int(std::min<int64_t>(kGroupRows, a.m - g * kGroupRows));
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < n_rows; ++r) {
      const int64_t row = g * kGroupRows + r;
      a.out[(t0 + t) * a.m + row] = sums[t][r] + (a.bias ? a.bias[row] : 0.0f);
    }
}

}  // namespace

// Row groups [g0, g1) of 4 rows against all tokens.
void qmatmul_q4_0x4(const QMatmulArgs& a, int64_t g0, int64_t g1) {
  const int64_t n = a.x.n;
  for (int64_t g = g0; g < g1; ++g) {
    int64_t t = 0;
    for (; t + kMaxTok <= n; t += kMaxTok) tile<kMaxTok>(a, g, t);
    switch (n - t) {
      case 0: break;
      case 1: tile<1>(a, g, t); break;
      case 2: tile<2>(a, g, t); break;
      default: tile<3>(a, g, t); break;
    }
  }
}
#endif

}  // namespace tf::cpu::TF_CPU_ISA_NS

// Integer matmul over weights repacked in groups of 4 rows (backend/cpu/quant_pack.h): 4-bit
// ones as U4x4 (Q4_0, Q4_1, W4, Q4_K), 8-bit ones, Q6_K and Q5_K as U8x4 (Q8_0, W8, Q6_K, Q5_K), against
// activations quantized per block of 32 (kernels.h).
//
// Per block, one 512-bit load holds the 4 rows' 16 bytes of nibbles (128-bit lane r = row
// r; with 256-bit vectors, two registers of 2 rows): low nibbles are elements 0-15 of each
// row, high ones 16-31. The activation block's two halves are broadcast to every lane, so
// two vpdpbusd (or vpmaddubsw pairs) give each row's dot product in its 4 int32 lanes. With
// the block's c and m of each row (from the segment header, spread over the row's lanes):
//   acc += float(dot) * c * dx_b        corr += m * s_b     (s_b = dx_b * sum(xq_b))
// and row r's output is the sum of its 4 lanes of acc - corr / 4 (corr is added in each of
// the row's 4 lanes). With 16-bit activations (two planes, kernels.h) dot is
// 254 * dot(w, q) + dot(w, q2). NT tokens share each block's unpacking and scales. Compared with the
// canonical layouts (qmatmul.cpp) there is no per-row gathering of scales and nibbles.
//
// 8-bit weights repacked as U8x4 (Q8_0, W8, Q6_K's codes minus 32, Q5_K's minus 16): per block, the 4
// rows' 32 int8 codes, one 512-bit register of 2 rows (256-bit lane = row) or one 256-bit
// register a row. The activation block is broadcast to every lane; signed codes go through
// the unsigned-by-signed byte products as |w| . sign(x, w) (|w| once per block, the sign per
// token), 8 int32 lanes a row; acc += float(dot) * c * dx_b (no offset), and row r's output
// is the sum of its 8 lanes. 16-bit activations join the planes as 254 hi + lo with shifts
// (a lane's |hi| reaches 4 x 128 x 127). Q6_K's c is per 16 codes: lanes 0-3 and 4-7 of a
// row take their own (d * sc, computed as the canonical kernel does). Q5_K (codes q5 - 16)
// takes c = d * sc per block, and its offsets 16 c - dmin * mn times the activations' block
// sums join each row's sum at the end (add_q5k_offsets). With 256-bit vectors a
// tile of more than one token takes the group's rows in two passes of 2 (registers: NT x 4
// accumulators and 4 blocks of codes do not fit 16).
//
// Decode of one token (up to two with AVX-512) reads two groups side by side, one from each
// half of the thread's range of groups: two sequential streams in flight per core instead of
// one (on a 2-core AVX-512 VM, 1B-shape decode Q8_0 26 -> 33 tokens/s, Q4_0 49 -> 57;
// docs/PERF.md, "Decode as two sequential streams").
// AVX2 and above; the baseline level reads the canonical layouts only.
#include <algorithm>
#include <cstring>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/packed_blocks.h"
#include "backend/cpu/kernels/simd.h"
#include "backend/cpu/quant_pack.h"
#include "core/error.h"

namespace tf::cpu::TF_CPU_ISA_NS {

#if defined(__AVX2__)
namespace {

constexpr int kMaxTok = 4;
constexpr int64_t kBlock = 32;
// Software prefetch distance along each of a thread's streams of groups (bytes; a block's lines are
// fetched this far ahead of its loads). The hardware prefetchers alone left 1B-shape decode
// at half the read-only bandwidth on a 2-core AVX-512 VM (Q4_0 24 tokens/s, Q8_0 19; with
// 2 KiB 41 and 25; 4 KiB and 8 KiB measured less).
constexpr int64_t kPrefetch = 2048;

// Decode reads two groups side by side up to this many tokens: 2 with AVX-512's 32 registers,
// 1 with AVX2's 16 (two groups of one token already spill a few there, and still gain).
#if defined(__AVX512BW__)
constexpr int64_t kTwoStreamTok = 2;
#else
constexpr int64_t kTwoStreamTok = 1;
#endif

#if defined(__AVX512BW__)
// One register: 4 rows (128-bit lane r = row r).
struct Rows {
  static constexpr int kRegs = 1, kRowsPerReg = 4;
  using I = __m512i;
  using F = __m512;
  static I load(const uint8_t* p, int) { return _mm512_loadu_si512(p); }
  static I nibble_mask() { return _mm512_set1_epi8(0x0F); }
  static I low(I v, I mask) { return _mm512_and_si512(v, mask); }
  static I high(I v, I mask) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), mask); }
  static I bcast16(const int8_t* p) { return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static F spread(__m128 v4, int) {  // row r's value on lanes 4r..4r+3
    return _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0), _mm512_castps128_ps512(v4));
  }
  static I dot(I lo, I xlo, I hi, I xhi) {
#if defined(__AVX512VNNI__)
    return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xlo), hi, xhi);
#else
    const I ones = _mm512_set1_epi16(1);
    return _mm512_add_epi32(_mm512_madd_epi16(_mm512_maddubs_epi16(lo, xlo), ones),
                            _mm512_madd_epi16(_mm512_maddubs_epi16(hi, xhi), ones));
#endif
  }
  // 254 hi + lo; |hi| < 2^15 (a lane's 8 products of a nibble and an int8: at most
  // 15 * 127 * 8).
  static I join(I hi, I lo) { return join254_small(hi, lo); }
  static F zero() { return _mm512_setzero_ps(); }
  static F splat(float a) { return _mm512_set1_ps(a); }
  static F cvt(I v) { return _mm512_cvtepi32_ps(v); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F fnma(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  // Sums of each 128-bit lane (row) of v into out[0..3].
  static void row_sums(F v, float* out) {
    v = _mm512_add_ps(v, _mm512_permute_ps(v, 0b10110001));
    v = _mm512_add_ps(v, _mm512_permute_ps(v, 0b01001110));  // every element holds its lane's sum
    out[0] = _mm512_cvtss_f32(v);
    out[1] = _mm_cvtss_f32(_mm512_extractf32x4_ps(v, 1));
    out[2] = _mm_cvtss_f32(_mm512_extractf32x4_ps(v, 2));
    out[3] = _mm_cvtss_f32(_mm512_extractf32x4_ps(v, 3));
  }
};
#else
// Two registers of 2 rows each (128-bit lane = row).
struct Rows {
  static constexpr int kRegs = 2, kRowsPerReg = 2;
  using I = __m256i;
  using F = __m256;
  static I load(const uint8_t* p, int h) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * h)); }
  static I nibble_mask() { return _mm256_set1_epi8(0x0F); }
  static I low(I v, I mask) { return _mm256_and_si256(v, mask); }
  static I high(I v, I mask) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), mask); }
  static I bcast16(const int8_t* p) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static F spread(__m128 v4, int h) {
    const __m256i idx = h ? _mm256_set_epi32(3, 3, 3, 3, 2, 2, 2, 2) : _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0);
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v4), idx);
  }
  static I dot(I lo, I xlo, I hi, I xhi) {
    const I ones = _mm256_set1_epi16(1);
    return _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo, xlo), ones),
                            _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xhi), ones));
  }
  static I join(I hi, I lo) { return join254_small(hi, lo); }  // as above
  static F zero() { return _mm256_setzero_ps(); }
  static F splat(float a) { return _mm256_set1_ps(a); }
  static F cvt(I v) { return _mm256_cvtepi32_ps(v); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F fnma(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }
  static void row_sums(F v, float* out) {
    v = _mm256_add_ps(v, _mm256_permute_ps(v, 0b10110001));
    v = _mm256_add_ps(v, _mm256_permute_ps(v, 0b01001110));
    out[0] = _mm256_cvtss_f32(v);
    out[1] = _mm_cvtss_f32(_mm256_extractf128_ps(v, 1));
  }
};
#endif

using F = Rows::F;
using I = Rows::I;
constexpr int kRegs = Rows::kRegs;

// Calls tile.template operator()<NT, G>(gs, t0) over row groups [g0, g1) and n tokens: for a
// decode step (n <= kTwoStreamTok) two groups at a time, one from each half of the range (the
// odd last one alone); else one group at a time, in token tiles of kMaxTok and the tail.
template <typename Tile>
void over_groups(int64_t n, int64_t g0, int64_t g1, Tile&& tile) {
  if (n <= kTwoStreamTok) {
    const int64_t half = (g1 - g0) / 2;
    const auto run = [&]<int NT>() {
      for (int64_t j = 0; j < half; ++j) tile.template operator()<NT, 2>({g0 + j, g0 + half + j}, 0);
      if ((g1 - g0) % 2) tile.template operator()<NT, 1>({g1 - 1}, 0);
    };
    if (n == 1) run.template operator()<1>();
    else if constexpr (kTwoStreamTok > 1) run.template operator()<2>();
    return;
  }
  for (int64_t g = g0; g < g1; ++g) {
    int64_t t = 0;
    for (; t + kMaxTok <= n; t += kMaxTok) tile.template operator()<kMaxTok, 1>({g}, t);
    switch (n - t) {
      case 0: break;
      case 1: tile.template operator()<1, 1>({g}, t); break;
      case 2: tile.template operator()<2, 1>({g}, t); break;
      default: tile.template operator()<3, 1>({g}, t); break;
    }
  }
}

// NT tokens from t0 against the 4 rows of each of G groups read side by side: sums[gi][t][r];
// kWide: 16-bit activations.
template <DType kFmt, int NT, bool kWide, int G>
void group_tile(const QMatmulArgs& a, const uint8_t* const (&groups)[G], const U4x4Layout& l,
                float (&sums)[G][NT][kU4x4Rows], int64_t t0) {
  const int64_t k = a.x.k, nb = k / kBlock, per_seg = l.blocks_per_segment, seg_bytes = l.segment_bytes();
  const I mask = Rows::nibble_mask();
  F acc[G][NT][kRegs], corr[G][NT][kRegs];
  for (int gi = 0; gi < G; ++gi)
    for (int t = 0; t < NT; ++t)
      for (int h = 0; h < kRegs; ++h) acc[gi][t][h] = corr[gi][t][h] = Rows::zero();
  for (int64_t s = 0; s < nb / per_seg; ++s) {
    for (int64_t i = 0; i < per_seg; ++i) {
      const int64_t b = s * per_seg + i;
      for (int gi = 0; gi < G; ++gi) {
        const uint8_t* hdr = groups[gi] + s * seg_bytes;
        __m128 c4, m4;
        block_scales<kFmt>(hdr, i, &c4, &m4);
        const uint8_t* p = hdr + l.header_bytes + i * kU4x4BlockBytes;
        __builtin_prefetch(p + kPrefetch);
        F c[kRegs], m[kRegs];
        I lo[kRegs], hi[kRegs];
        for (int h = 0; h < kRegs; ++h) {
          c[h] = Rows::spread(c4, h);
          m[h] = kFmt == DType::Q4_0 ? c[h] : Rows::spread(m4, h);
          const I v = Rows::load(p, h);
          lo[h] = Rows::low(v, mask);
          hi[h] = Rows::high(v, mask);
        }
        for (int t = 0; t < NT; ++t) {
          const int8_t* xb = a.x.q + (t0 + t) * k + b * kBlock;
          const I xlo = Rows::bcast16(xb), xhi = Rows::bcast16(xb + 16);
          I xlo2, xhi2;
          if constexpr (kWide) {
            const int8_t* xb2 = a.x.q2 + (t0 + t) * k + b * kBlock;
            xlo2 = Rows::bcast16(xb2);
            xhi2 = Rows::bcast16(xb2 + 16);
          }
          const int64_t blk = (t0 + t) * nb + b;
          const F dx = Rows::splat(a.x.db[blk]), sx = Rows::splat(a.x.sb[blk]);
          for (int h = 0; h < kRegs; ++h) {
            I dot = Rows::dot(lo[h], xlo, hi[h], xhi);
            if constexpr (kWide) dot = Rows::join(dot, Rows::dot(lo[h], xlo2, hi[h], xhi2));
            acc[gi][t][h] = Rows::fma(Rows::cvt(dot), Rows::mul(c[h], dx), acc[gi][t][h]);
            corr[gi][t][h] = Rows::fma(m[h], sx, corr[gi][t][h]);
          }
        }
      }
    }
  }
  const float corr_scale = kFmt == DType::Q4_0 ? 8.0f / 4 : 1.0f / 4;  // / 4: corr is in all 4 lanes of a row
  for (int gi = 0; gi < G; ++gi)
    for (int t = 0; t < NT; ++t)
      for (int h = 0; h < kRegs; ++h)
        Rows::row_sums(Rows::fnma(Rows::splat(corr_scale), corr[gi][t][h], acc[gi][t][h]),
                       sums[gi][t] + h * Rows::kRowsPerReg);
}

// The sums of row group g (the rows past m dropped) for tokens t0..t0 + NT - 1, plus the bias.
template <int NT>
void store_group(const QMatmulArgs& a, int64_t g, const float (&sums)[NT][kU4x4Rows], int64_t t0) {
  const int n_rows = int(std::min<int64_t>(kU4x4Rows, a.m - g * kU4x4Rows));
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < n_rows; ++r) {
      const int64_t row = g * kU4x4Rows + r;
      a.out[(t0 + t) * a.m + row] = sums[t][r] + (a.bias ? a.bias[row] : 0.0f);
    }
}

// Groups gs[0..G) for tokens t0..t0 + NT - 1.
template <DType kFmt, int NT, bool kWide, int G>
void tile(const QMatmulArgs& a, const U4x4Layout& l, const int64_t (&gs)[G], int64_t t0) {
  const int64_t n_seg = a.x.k / kBlock / l.blocks_per_segment;
  const uint8_t* groups[G];
  for (int gi = 0; gi < G; ++gi)
    groups[gi] = static_cast<const uint8_t*>(a.packed) + gs[gi] * n_seg * l.segment_bytes();
  float sums[G][NT][kU4x4Rows];
  group_tile<kFmt, NT, kWide, G>(a, groups, l, sums, t0);
  for (int gi = 0; gi < G; ++gi) store_group<NT>(a, gs[gi], sums[gi], t0);
}

template <DType kFmt, bool kWide>
void groups_of_acts(const QMatmulArgs& a, int64_t g0, int64_t g1) {
  const U4x4Layout l = u4x4_layout(*a.w);
  over_groups(a.x.n, g0, g1,
              [&]<int NT, int G>(const int64_t(&gs)[G], int64_t t0) { tile<kFmt, NT, kWide, G>(a, l, gs, t0); });
}

template <DType kFmt>
void groups_of(const QMatmulArgs& a, int64_t g0, int64_t g1) {
  if (a.x.q2) return groups_of_acts<kFmt, true>(a, g0, g1);
  groups_of_acts<kFmt, false>(a, g0, g1);
}

// ---- 8-bit weights in U8x4 --------------------------------------------------------------
#if defined(__AVX512BW__)
// Two registers of 2 rows each (256-bit lane = row).
struct Rows8 {
  static constexpr int kRegs = 2, kRowsPerReg = 2;
  using I = __m512i;
  using F = __m512;
  struct W {  // a block's codes of 2 rows: |w| and the lanes where w < 0
    I abs;
    __mmask64 neg;
  };
  static W load(const uint8_t* p, int h) {
    const I v = _mm512_loadu_si512(p + 64 * h);
    return {_mm512_abs_epi8(v), _mm512_movepi8_mask(v)};
  }
  static I bcast32(const int8_t* p) { return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static I dot(const W& w, I x) {
    const I sx = _mm512_mask_sub_epi8(x, w.neg, _mm512_setzero_si512(), x);
#if defined(__AVX512VNNI__)
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.abs, sx);
#else
    return _mm512_madd_epi16(_mm512_maddubs_epi16(w.abs, sx), _mm512_set1_epi16(1));
#endif
  }
  static I join(I hi, I lo) {  // 254 hi + lo = (hi << 8) - (hi << 1) + lo
    return _mm512_add_epi32(_mm512_sub_epi32(_mm512_slli_epi32(hi, 8), _mm512_slli_epi32(hi, 1)), lo);
  }
  static F spread(__m128 v4, int h) {  // rows 2h and 2h + 1 on lanes 0-7 and 8-15
    const __m512i idx = h ? _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2)
                          : _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v4));
  }
  // Q6_K: d * sc of rows 2h and 2h + 1 per 16 codes (lanes 0-3 the first 16 of row 2h, 4-7
  // its second, 8-15 row 2h + 1's), from the block's int8 [row][half] at sc and d4 = d[4].
  static F spread_halves(const uint8_t* sc, __m128 d4, int h) {
    int32_t four;
    std::memcpy(&four, sc + 4 * h, 4);
    const __m128 d = _mm_permutevar_ps(d4, h ? _mm_set_epi32(3, 3, 2, 2) : _mm_set_epi32(1, 1, 0, 0));
    const __m128 c = _mm_mul_ps(_mm_cvtepi32_ps(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(four))), d);
    return _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
                                 _mm512_castps128_ps512(c));
  }
  static F zero() { return _mm512_setzero_ps(); }
  static F splat(float a) { return _mm512_set1_ps(a); }
  static F cvt(I v) { return _mm512_cvtepi32_ps(v); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static void row_sums(F v, float* out) {
    const __m256 lo = _mm512_castps512_ps256(v), hi = _mm512_extractf32x8_ps(v, 1);
    out[0] = hsum8(lo);
    out[1] = hsum8(hi);
  }
  static float hsum8(__m256 a) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
  }
};
#else
// Four registers of one row each.
struct Rows8 {
  static constexpr int kRegs = 4, kRowsPerReg = 1;
  using I = __m256i;
  using F = __m256;
  struct W {  // a block's codes of one row and their |w|
    I abs, w;
  };
  static W load(const uint8_t* p, int h) {
    const I v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * h));
    return {_mm256_sign_epi8(v, v), v};
  }
  static I bcast32(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static I dot(const W& w, I x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w.abs, _mm256_sign_epi8(x, w.w)), _mm256_set1_epi16(1));
  }
  static I join(I hi, I lo) {  // as above
    return _mm256_add_epi32(_mm256_sub_epi32(_mm256_slli_epi32(hi, 8), _mm256_slli_epi32(hi, 1)), lo);
  }
  static F spread(__m128 v4, int h) { return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v4), _mm256_set1_epi32(h)); }
  // Q6_K: row h's d * sc per 16 codes (lanes 0-3, 4-7), as Rows8's AVX-512 version.
  static F spread_halves(const uint8_t* sc, __m128 d4, int h) {
    int16_t two;
    std::memcpy(&two, sc + 2 * h, 2);
    const __m128 c = _mm_mul_ps(_mm_cvtepi32_ps(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(two))),
                                _mm_permutevar_ps(d4, _mm_set1_epi32(h)));
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(c), _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0));
  }
  static F zero() { return _mm256_setzero_ps(); }
  static F splat(float a) { return _mm256_set1_ps(a); }
  static F cvt(I v) { return _mm256_cvtepi32_ps(v); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static void row_sums(F a, float* out) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    out[0] = _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
  }
};
#endif

int64_t u8x4_segment_bytes(const U4x4Layout& l) { return l.header_bytes + l.blocks_per_segment * kU8x4BlockBytes; }

// NT tokens from t0 against registers [reg0, reg0 + NREG) of the rows of each of G groups
// read side by side (Rows8): sums[gi][t][row in the group]; kWide: 16-bit activations.
template <DType kFmt, int NT, int NREG, bool kWide, int G>
void group_tile8(const QMatmulArgs& a, const uint8_t* const (&groups)[G], const U4x4Layout& l, int reg0,
                 float (&sums)[G][NT][kU4x4Rows], int64_t t0) {
  using R = Rows8;
  const int64_t k = a.x.k, nb = k / kBlock, per_seg = l.blocks_per_segment, seg_bytes = u8x4_segment_bytes(l);
  typename R::F acc[G][NT][NREG];
  for (int gi = 0; gi < G; ++gi)
    for (int t = 0; t < NT; ++t)
      for (int h = 0; h < NREG; ++h) acc[gi][t][h] = R::zero();
  for (int64_t s = 0; s < nb / per_seg; ++s) {
    // Q8_0's c, W8's c, Q6_K's and Q5_K's d.
    __m128 c4[G];
    typename R::F c[G][NREG];
    for (int gi = 0; gi < G; ++gi) {
      const uint8_t* hdr = groups[gi] + s * seg_bytes;
      c4[gi] = kFmt == DType::W8 ? _mm_loadu_ps(reinterpret_cast<const float*>(hdr)) : f16x4(hdr);
      if constexpr (kFmt != DType::Q6_K && kFmt != DType::Q5_K)
        for (int h = 0; h < NREG; ++h) c[gi][h] = R::spread(c4[gi], reg0 + h);
    }
    for (int64_t i = 0; i < per_seg; ++i) {
      const int64_t b = s * per_seg + i;
      for (int gi = 0; gi < G; ++gi) {
        const uint8_t* hdr = groups[gi] + s * seg_bytes;
        const uint8_t* p = hdr + l.header_bytes + i * kU8x4BlockBytes;
        if constexpr (kFmt == DType::Q6_K)
          for (int h = 0; h < NREG; ++h) c[gi][h] = R::spread_halves(hdr + 8 + 8 * i, c4[gi], reg0 + h);
        if constexpr (kFmt == DType::Q5_K) {
          const __m128 cb = _mm_mul_ps(c4[gi], u8x4(hdr + 16 + 4 * i));
          for (int h = 0; h < NREG; ++h) c[gi][h] = R::spread(cb, reg0 + h);
        }
        __builtin_prefetch(p + kPrefetch);
        __builtin_prefetch(p + kPrefetch + 64);
        typename R::W w[NREG];
        for (int h = 0; h < NREG; ++h) w[h] = R::load(p, reg0 + h);
        for (int t = 0; t < NT; ++t) {
          const typename R::I x = R::bcast32(a.x.q + (t0 + t) * k + b * kBlock);
          typename R::I x2;
          if constexpr (kWide) x2 = R::bcast32(a.x.q2 + (t0 + t) * k + b * kBlock);
          const typename R::F dx = R::splat(a.x.db[(t0 + t) * nb + b]);
          for (int h = 0; h < NREG; ++h) {
            typename R::I dot = R::dot(w[h], x);
            if constexpr (kWide) dot = R::join(dot, R::dot(w[h], x2));
            acc[gi][t][h] = R::fma(R::cvt(dot), R::mul(c[gi][h], dx), acc[gi][t][h]);
          }
        }
      }
    }
  }
  for (int gi = 0; gi < G; ++gi)
    for (int t = 0; t < NT; ++t)
      for (int h = 0; h < NREG; ++h) R::row_sums(acc[gi][t][h], sums[gi][t] + (reg0 + h) * R::kRowsPerReg);
}

// Q5_K's offsets: sums[t][r] += sum over blocks b of o(r, b) * sb(t, b), o = 16 c - dmin * mn
// (the codes are q5 - 16), from the segment headers alone.
template <int NT>
void add_q5k_offsets(const QMatmulArgs& a, const uint8_t* group, const U4x4Layout& l, float (&sums)[NT][kU4x4Rows],
                     int64_t t0) {
  const int64_t nb = a.x.k / kBlock, per_seg = l.blocks_per_segment, seg_bytes = u8x4_segment_bytes(l);
  __m128 corr[NT];
  for (int t = 0; t < NT; ++t) corr[t] = _mm_setzero_ps();
  for (int64_t s = 0; s < nb / per_seg; ++s) {
    const uint8_t* hdr = group + s * seg_bytes;
    const __m128 d4 = f16x4(hdr), dmin4 = f16x4(hdr + 8);
    for (int64_t i = 0; i < per_seg; ++i) {
      const __m128 c = _mm_mul_ps(d4, u8x4(hdr + 16 + 4 * i));
      const __m128 o = _mm_sub_ps(_mm_mul_ps(_mm_set1_ps(16.0f), c), _mm_mul_ps(dmin4, u8x4(hdr + 48 + 4 * i)));
      for (int t = 0; t < NT; ++t)
        corr[t] = _mm_add_ps(corr[t], _mm_mul_ps(o, _mm_set1_ps(a.x.sb[(t0 + t) * nb + s * per_seg + i])));
    }
  }
  for (int t = 0; t < NT; ++t) {
    float o[kU4x4Rows];
    _mm_storeu_ps(o, corr[t]);
    for (int r = 0; r < kU4x4Rows; ++r) sums[t][r] += o[r];
  }
}

template <DType kFmt, int NT, bool kWide, int G>
void tile8(const QMatmulArgs& a, const U4x4Layout& l, const int64_t (&gs)[G], int64_t t0) {
  const int64_t n_seg = a.x.k / kBlock / l.blocks_per_segment;
  const uint8_t* groups[G];
  for (int gi = 0; gi < G; ++gi)
    groups[gi] = static_cast<const uint8_t*>(a.packed) + gs[gi] * n_seg * u8x4_segment_bytes(l);
  float sums[G][NT][kU4x4Rows];
  if constexpr (Rows8::kRegs == 4 && NT > 1) {  // 256-bit: two passes of 2 rows
    group_tile8<kFmt, NT, 2, kWide, G>(a, groups, l, 0, sums, t0);
    group_tile8<kFmt, NT, 2, kWide, G>(a, groups, l, 2, sums, t0);
  } else {
    group_tile8<kFmt, NT, Rows8::kRegs, kWide, G>(a, groups, l, 0, sums, t0);
  }
  for (int gi = 0; gi < G; ++gi) {
    if constexpr (kFmt == DType::Q5_K) add_q5k_offsets<NT>(a, groups[gi], l, sums[gi], t0);
    store_group<NT>(a, gs[gi], sums[gi], t0);
  }
}

template <DType kFmt, bool kWide>
void groups8_of_acts(const QMatmulArgs& a, int64_t g0, int64_t g1) {
  const U4x4Layout l = u8x4_layout(*a.w);
  over_groups(a.x.n, g0, g1,
              [&]<int NT, int G>(const int64_t(&gs)[G], int64_t t0) { tile8<kFmt, NT, kWide, G>(a, l, gs, t0); });
}

template <DType kFmt>
void groups8_of(const QMatmulArgs& a, int64_t g0, int64_t g1) {
  if (a.x.q2) return groups8_of_acts<kFmt, true>(a, g0, g1);
  groups8_of_acts<kFmt, false>(a, g0, g1);
}

}  // namespace

// Row groups [g0, g1) of 4 rows against all tokens.
void qmatmul_u4x4(const QMatmulArgs& a, int64_t g0, int64_t g1) {
  switch (a.w->dtype) {
    case DType::Q4_0: return groups_of<DType::Q4_0>(a, g0, g1);
    case DType::Q4_1: return groups_of<DType::Q4_1>(a, g0, g1);
    case DType::W4: return groups_of<DType::W4>(a, g0, g1);
    case DType::Q4_K: return groups_of<DType::Q4_K>(a, g0, g1);
    default: TF_ASSERT(false, "U4x4 matmul: no packed layout for {}", dtype_name(a.w->dtype));
  }
}

void qmatmul_u8x4(const QMatmulArgs& a, int64_t g0, int64_t g1) {
  switch (a.w->dtype) {
    case DType::Q8_0: return groups8_of<DType::Q8_0>(a, g0, g1);
    case DType::W8: return groups8_of<DType::W8>(a, g0, g1);
    case DType::Q6_K: return groups8_of<DType::Q6_K>(a, g0, g1);
    case DType::Q5_K: return groups8_of<DType::Q5_K>(a, g0, g1);
    default: TF_ASSERT(false, "U8x4 matmul: no packed layout for {}", dtype_name(a.w->dtype));
  }
}
#endif

}  // namespace tf::cpu::TF_CPU_ISA_NS

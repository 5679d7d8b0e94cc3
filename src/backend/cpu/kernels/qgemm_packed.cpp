// Integer GEMM for prefill over the repacked weights (U4x4: Q4_0, Q4_1, W4, Q4_K; U8x4:
// Q8_0, W8; backend/cpu/quant_pack.h) against activations quantized per block of 32
// (kernels.h), for many tokens at once. AVX2 and above.
//
// The few-token kernel (qmatmul_packed.cpp) keeps 4 rows x 4 partial sums in a register and
// converts and scales them per block and token: about as many float ops as dot products. Here
// a register lane is one weight row (a strip of kRows = 16 rows with AVX-512, 8 with AVX2),
// so a dot-product instruction covers 4 elements of every row of the strip and a block of 32
// takes 8 of them per token (16 with 16-bit activations) against one conversion and two
// FMAs. Two packings make that possible, each once per call:
//  - a strip (pack_strip*): the strip's codes per block as [8 element quads][kRows lanes][4
//    bytes], unsigned (nibbles 0..15; 8-bit codes + 128 where the level has VNNI, signed
//    otherwise), then the lanes' c and m as floats (w = c q - m per block: Q4_0 m = 8 c,
//    8-bit + 128: m = 128 c). One strip lives in the thread's scratch and every token tile
//    runs over it (it stays in L2: k / 32 x 40 x kRows bytes).
//  - the activations (qgemm_pack_acts), in tiles of kTok tokens: per block, each plane's 8
//    quads x kTok tokens as int32, then the tokens' d and d sum(Q); a broadcast of one quad
//    is then a fixed offset from one pointer.
// Per block and token: acc += c * (d * dot) - m * (d sum(Q)); with 16-bit activations dot is
// 254 dot(w, q) + dot(w, q2) (the first plane's sum times 254 by shifts, then the second
// plane's products added to it). A lane's dot of a block stays below 2^31: 32 x 255 x 127 x
// 254 + 32 x 255 x 127 for 8-bit codes + 128.
//
// Lanes are not rows in order: the unpacking of 4 registers of 4 rows (or 2 x 2 rows)
// transposes 32-bit quads, which leaves row row_of_slot(s) in lane s; the scales are put in
// the same order, and each token's sums are permuted back into row order before the store.
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

constexpr int64_t kBlock = 32, kQuads = 8;

#if defined(__AVX512BW__)
struct L {
  static constexpr int kRows = 16, kTok = 8;
  using I = __m512i;
  using F = __m512;
  static I load(const void* p) { return _mm512_loadu_si512(p); }
  static void store(void* p, I v) { _mm512_storeu_si512(p, v); }
  static I bcast(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
  }
  static I zero() { return _mm512_setzero_si512(); }
  static I nibbles(I v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0F)); }
  static I shr4(I v) { return _mm512_srli_epi16(v, 4); }
  static I flip_sign(I v) { return _mm512_xor_si512(v, _mm512_set1_epi8(char(0x80))); }
  // acc + per lane the sum of 4 products of unsigned u and signed s bytes (u <= 15, or any
  // with VNNI, whose sum does not saturate).
  static I dot_u(I acc, I u, I s) {
#if defined(__AVX512VNNI__)
    return _mm512_dpbusd_epi32(acc, u, s);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
#endif
  }
  // The same for signed codes w: |w| times s with w's sign (|products| <= 127 x 127).
  static I dot_s(I acc, I w, I s) {
    const I sx = _mm512_mask_sub_epi8(s, _mm512_movepi8_mask(w), _mm512_setzero_si512(), s);
    return dot_u(acc, _mm512_abs_epi8(w), sx);
  }
  static I mul254(I v) { return _mm512_sub_epi32(_mm512_slli_epi32(v, 8), _mm512_slli_epi32(v, 1)); }
  // Without VNNI: int16 sums of adjacent byte products; their sum; acc + the int16 pairs added.
  static I pairs(I u, I s) { return _mm512_maddubs_epi16(u, s); }
  static I add16(I a, I b) { return _mm512_add_epi16(a, b); }
  static I widen_add(I acc, I h) { return _mm512_add_epi32(acc, _mm512_madd_epi16(h, _mm512_set1_epi16(1))); }
  static F zerof() { return _mm512_setzero_ps(); }
  static F loadf(const void* p) { return _mm512_loadu_ps(p); }
  static void storef(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F splat(const uint8_t* p) {
    float v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_ps(v);
  }
  static F cvt(I v) { return _mm512_cvtepi32_ps(v); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F fnma(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  // Lane s holds row row_of_slot(s) of the strip: register u (group u of 4 rows), 128-bit
  // lane r (row r of the group) ends up in lane 4 r + u.
  static constexpr int row_of_slot(int s) { return 4 * (s & 3) + (s >> 2); }
  // v with lane r holding row r (the slots of a 4 x 4 transposition: its own inverse).
  static F rows_in_order(F v) {
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), v);
  }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  // The 4 registers of a block's codes (4 groups of 4 rows, one 128-bit lane a row).
  static void load_units(const uint8_t* const* p, I* u) {
    for (int g = 0; g < 4; ++g) u[g] = load(p[g]);
  }
  // The 8 quads of a block of 8-bit codes of 4 groups (p[g]: 4 rows x 32 bytes) into
  // dst[8][kRows][4], lanes in the order of row_of_slot. Registers u[h][g] hold rows 2h, 2h + 1
  // of group g, 128-bit lanes (row 2h, quads 0-3), (row 2h, 4-7), (row 2h + 1, 0-3), (2h + 1,
  // 4-7); the transposition of 4 registers gives each quad with lanes (row, group), and the
  // 128-bit lanes of the two halves h are then regrouped by quad.
  static void quads8(const uint8_t* const* p, uint8_t* dst) {
    I y[2][4];
    for (int h = 0; h < 2; ++h) {
      I u[4];
      for (int g = 0; g < 4; ++g) u[g] = load(p[g] + 64 * h);
      transpose4(u, y[h]);
    }
    for (int q = 0; q < 4; ++q) {
      store(dst + q * kRows * 4, _mm512_shuffle_i32x4(y[0][q], y[1][q], _MM_SHUFFLE(2, 0, 2, 0)));
      store(dst + (4 + q) * kRows * 4, _mm512_shuffle_i32x4(y[0][q], y[1][q], _MM_SHUFFLE(3, 1, 3, 1)));
    }
  }
  // out[q] lane l = (u[0] u[1] u[2] u[3]) dword q of lane l, per 128-bit lane.
  static void transpose4(const I* u, I* out) {
    const I lo01 = _mm512_unpacklo_epi32(u[0], u[1]), hi01 = _mm512_unpackhi_epi32(u[0], u[1]);
    const I lo23 = _mm512_unpacklo_epi32(u[2], u[3]), hi23 = _mm512_unpackhi_epi32(u[2], u[3]);
    out[0] = _mm512_unpacklo_epi64(lo01, lo23);
    out[1] = _mm512_unpackhi_epi64(lo01, lo23);
    out[2] = _mm512_unpacklo_epi64(hi01, hi23);
    out[3] = _mm512_unpackhi_epi64(hi01, hi23);
  }
};
#else
struct L {
  static constexpr int kRows = 8, kTok = 4;
  using I = __m256i;
  using F = __m256;
  static I load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  static void store(void* p, I v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }
  static I bcast(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
  }
  static I zero() { return _mm256_setzero_si256(); }
  static I nibbles(I v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
  static I shr4(I v) { return _mm256_srli_epi16(v, 4); }
  static I flip_sign(I v) { return _mm256_xor_si256(v, _mm256_set1_epi8(char(0x80))); }
  static I dot_u(I acc, I u, I s) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
  }
  static I dot_s(I acc, I w, I s) { return dot_u(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(s, w)); }
  static I mul254(I v) { return _mm256_sub_epi32(_mm256_slli_epi32(v, 8), _mm256_slli_epi32(v, 1)); }
  static I pairs(I u, I s) { return _mm256_maddubs_epi16(u, s); }
  static I add16(I a, I b) { return _mm256_add_epi16(a, b); }
  static I widen_add(I acc, I h) { return _mm256_add_epi32(acc, _mm256_madd_epi16(h, _mm256_set1_epi16(1))); }
  static F zerof() { return _mm256_setzero_ps(); }
  static F loadf(const void* p) { return _mm256_loadu_ps(static_cast<const float*>(p)); }
  static void storef(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F splat(const uint8_t* p) {
    float v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_ps(v);
  }
  static F cvt(I v) { return _mm256_cvtepi32_ps(v); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F fnma(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }
  // Registers u = 0..3 are rows {0,1}, {2,3} of group 0, then of group 1 (one 128-bit lane a
  // row); register u's lane h ends up in lane 4 h + u.
  static constexpr int row_of_slot(int s) { return 4 * ((s & 3) >> 1) + 2 * (s & 1) + (s >> 2); }
  // v with lane r holding row r: row r sits in slot 4 (r % 2) + r / 2.
  static F rows_in_order(F v) { return _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static void load_units(const uint8_t* const* p, I* u) {
    for (int g = 0; g < 2; ++g) {
      u[2 * g] = load(p[g]);
      u[2 * g + 1] = load(p[g] + 32);
    }
  }
  // The 8 quads of a block of 8-bit codes of 2 groups (p[g]: 4 rows x 32 bytes) into
  // dst[8][kRows][4] in the order of row_of_slot: register u of rows (a, a + 1) = (4 (u / 2) +
  // 2 (u % 2), + 1) takes quads 0-3 (then 4-7) of row a in its low 128-bit lane and of row a + 1
  // in its high one, as load_units has the nibbles, and the same transposition follows.
  static void quads8(const uint8_t* const* p, uint8_t* dst) {
    for (int half = 0; half < 2; ++half) {
      I u[4], y[4];
      for (int r = 0; r < 4; ++r) {
        const uint8_t* row_a = p[r / 2] + 32 * (2 * (r % 2));
        const I a = load(row_a), b = load(row_a + 32);
        u[r] = half ? _mm256_permute2x128_si256(a, b, 0x31) : _mm256_permute2x128_si256(a, b, 0x20);
      }
      transpose4(u, y);
      for (int q = 0; q < 4; ++q) store(dst + (4 * half + q) * kRows * 4, y[q]);
    }
  }
  static void transpose4(const I* u, I* out) {
    const I lo01 = _mm256_unpacklo_epi32(u[0], u[1]), hi01 = _mm256_unpackhi_epi32(u[0], u[1]);
    const I lo23 = _mm256_unpacklo_epi32(u[2], u[3]), hi23 = _mm256_unpackhi_epi32(u[2], u[3]);
    out[0] = _mm256_unpacklo_epi64(lo01, lo23);
    out[1] = _mm256_unpackhi_epi64(lo01, lo23);
    out[2] = _mm256_unpacklo_epi64(hi01, hi23);
    out[3] = _mm256_unpackhi_epi64(hi01, hi23);
  }
};
#endif

constexpr int kRows = L::kRows, kTok = L::kTok, kGroups = kRows / 4;
using I = L::I;
using F = L::F;

// 8-bit codes go + 128 into the unsigned operand where VNNI sums them without saturating.
#if defined(__AVX512VNNI__)
constexpr bool kVnni = true;
#else
constexpr bool kVnni = false;
#endif
constexpr bool kSigned8 = !kVnni;

constexpr int64_t strip_block_bytes() { return kQuads * kRows * 4 + 2 * kRows * 4; }
int64_t tile_block_bytes(bool wide) { return (wide ? 2 : 1) * kQuads * kTok * 4 + 2 * kTok * 4; }

// The lanes' scales of one block from the rows' (row order) into the strip at dst.
void put_scales(const float* c_rows, const float* m_rows, uint8_t* dst) {
  float c[kRows], m[kRows];
  for (int s = 0; s < kRows; ++s) {
    c[s] = c_rows[L::row_of_slot(s)];
    m[s] = m_rows[L::row_of_slot(s)];
  }
  std::memcpy(dst, c, sizeof(c));
  std::memcpy(dst + sizeof(c), m, sizeof(m));
}

// Strip `strip` of a U4x4 weight into out (strip_block_bytes() per block).
template <DType kFmt>
void pack_strip4(const QMatmulArgs& a, int64_t strip, uint8_t* out) {
  const U4x4Layout l = u4x4_layout(*a.w);
  const int64_t nb = a.x.k / kBlock, per_seg = l.blocks_per_segment, n_seg = nb / per_seg, seg_bytes = l.segment_bytes();
  const int64_t n_groups = (a.m + kU4x4Rows - 1) / kU4x4Rows;
  const uint8_t* packed = static_cast<const uint8_t*>(a.packed);
  alignas(64) static const uint8_t kZero[64] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t s = b / per_seg, i = b % per_seg;
    const uint8_t* codes[kGroups];
    float c_rows[kRows], m_rows[kRows];
    for (int g = 0; g < kGroups; ++g) {
      const int64_t grp = strip * kGroups + g;
      __m128 c4 = _mm_setzero_ps(), m4 = _mm_setzero_ps();
      codes[g] = kZero;
      if (grp < n_groups) {
        const uint8_t* hdr = packed + (grp * n_seg + s) * seg_bytes;
        block_scales<kFmt>(hdr, i, &c4, &m4);
        if constexpr (kFmt == DType::Q4_0) m4 = _mm_mul_ps(c4, _mm_set1_ps(8.0f));
        codes[g] = hdr + l.header_bytes + i * kU4x4BlockBytes;
      }
      _mm_storeu_ps(c_rows + 4 * g, c4);
      _mm_storeu_ps(m_rows + 4 * g, m4);
    }
    I u[4];
    L::load_units(codes, u);
    uint8_t* dst = out + b * strip_block_bytes();
    for (int half = 0; half < 2; ++half) {  // low nibbles: quads 0-3 (elements 0-15); high: 4-7
      I v[4], y[4];
      for (int r = 0; r < 4; ++r) v[r] = L::nibbles(half ? L::shr4(u[r]) : u[r]);
      L::transpose4(v, y);
      for (int q = 0; q < 4; ++q) L::store(dst + (4 * half + q) * kRows * 4, y[q]);
    }
    put_scales(c_rows, m_rows, dst + kQuads * kRows * 4);
  }
}

// Strip `strip` of a U8x4 weight (Q8_0, W8) into out.
template <DType kFmt>
void pack_strip8(const QMatmulArgs& a, int64_t strip, uint8_t* out) {
  const U4x4Layout l = u8x4_layout(*a.w);
  const int64_t nb = a.x.k / kBlock, per_seg = l.blocks_per_segment, n_seg = nb / per_seg;
  const int64_t seg_bytes = l.header_bytes + per_seg * kU8x4BlockBytes;
  const int64_t n_groups = (a.m + kU4x4Rows - 1) / kU4x4Rows;
  const uint8_t* packed = static_cast<const uint8_t*>(a.packed);
  alignas(64) static const uint8_t kZero[kU8x4BlockBytes] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t s = b / per_seg, i = b % per_seg;
    float c_rows[kRows], m_rows[kRows];
    uint8_t* dst = out + b * strip_block_bytes();
    const uint8_t* codes[kGroups];
    for (int g = 0; g < kGroups; ++g) {
      const int64_t grp = strip * kGroups + g;
      __m128 c4 = _mm_setzero_ps();
      codes[g] = kZero;
      if (grp < n_groups) {
        const uint8_t* hdr = packed + (grp * n_seg + s) * seg_bytes;
        c4 = kFmt == DType::Q8_0 ? f16x4(hdr) : _mm_loadu_ps(reinterpret_cast<const float*>(hdr));
        codes[g] = hdr + l.header_bytes + i * kU8x4BlockBytes;
      }
      _mm_storeu_ps(c_rows + 4 * g, c4);
      _mm_storeu_ps(m_rows + 4 * g, _mm_mul_ps(c4, _mm_set1_ps(kSigned8 ? 0.0f : 128.0f)));
    }
    L::quads8(codes, dst);
    if constexpr (!kSigned8)
      for (int64_t j = 0; j < kQuads; ++j) L::store(dst + j * kRows * 4, L::flip_sign(L::load(dst + j * kRows * 4)));
    put_scales(c_rows, m_rows, dst + kQuads * kRows * 4);
  }
}

// d += the products of one plane's quads of a block (x: kQuads x kTok int32) with the strip's.
template <bool kSigned>
inline void plane(const uint8_t* w, const uint8_t* x, I (&d)[kTok]) {
  if constexpr (!kSigned && !kVnni) {
    // Nibbles without VNNI: the 8 quads' byte-pair sums (at most 2 x 15 x 127 each) add up in
    // 16 bits (8 x 3810 < 2^15), widened to 32 once per block.
    I h[kTok];
    for (int64_t j = 0; j < kQuads; ++j) {
      const I wj = L::load(w + j * kRows * 4);
      for (int t = 0; t < kTok; ++t) {
        const I p = L::pairs(wj, L::bcast(x + (j * kTok + t) * 4));
        h[t] = j == 0 ? p : L::add16(h[t], p);
      }
    }
    for (int t = 0; t < kTok; ++t) d[t] = L::widen_add(d[t], h[t]);
    return;
  }
  for (int64_t j = 0; j < kQuads; ++j) {
    const I wj = L::load(w + j * kRows * 4);
    for (int t = 0; t < kTok; ++t) {
      const I xt = L::bcast(x + (j * kTok + t) * 4);
      d[t] = kSigned ? L::dot_s(d[t], wj, xt) : L::dot_u(d[t], wj, xt);
    }
  }
}

// The tile's kTok tokens against the strip: acc[t] lane s = row row_of_slot(s)'s output.
template <bool kSigned, bool kWide, bool kHasM>
void strip_tile(const uint8_t* strip, const uint8_t* tile, int64_t nb, F (&acc)[kTok]) {
  for (int t = 0; t < kTok; ++t) acc[t] = L::zerof();
  const int64_t tb = tile_block_bytes(kWide);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* w = strip + b * strip_block_bytes();
    const uint8_t* x = tile + b * tb;
    I d[kTok];
    for (int t = 0; t < kTok; ++t) d[t] = L::zero();
    plane<kSigned>(w, x, d);
    if constexpr (kWide) {
      for (int t = 0; t < kTok; ++t) d[t] = L::mul254(d[t]);
      plane<kSigned>(w, x + kQuads * kTok * 4, d);
    }
    const uint8_t* ds = x + (kWide ? 2 : 1) * kQuads * kTok * 4;  // d[kTok], d sum(Q)[kTok]
    const F c = L::loadf(w + kQuads * kRows * 4);
    for (int t = 0; t < kTok; ++t) acc[t] = L::fma(L::mul(L::cvt(d[t]), L::splat(ds + 4 * t)), c, acc[t]);
    if constexpr (kHasM) {
      const F m = L::loadf(w + kQuads * kRows * 4 + kRows * 4);
      for (int t = 0; t < kTok; ++t) acc[t] = L::fnma(m, L::splat(ds + 4 * (kTok + t)), acc[t]);
    }
  }
}

template <bool kSigned, bool kWide, bool kHasM>
void strip_all_tiles(const QMatmulArgs& a, const uint8_t* strip, const uint8_t* acts, int64_t strip_index) {
  const int64_t nb = a.x.k / kBlock, n = a.x.n, tile_bytes = nb * tile_block_bytes(kWide);
  const int64_t row0 = strip_index * kRows, n_rows = std::min<int64_t>(kRows, a.m - row0);
  alignas(64) float bias[kRows] = {};
  if (a.bias) std::memcpy(bias, a.bias + row0, size_t(n_rows) * sizeof(float));
  const F bias_v = L::loadf(bias);
  for (int64_t t0 = 0; t0 < n; t0 += kTok) {
    F acc[kTok];
    strip_tile<kSigned, kWide, kHasM>(strip, acts + (t0 / kTok) * tile_bytes, nb, acc);
    const int n_tok = int(std::min<int64_t>(kTok, n - t0));
    for (int t = 0; t < n_tok; ++t) {
      const F v = L::add(L::rows_in_order(acc[t]), bias_v);
      float* out = a.out + (t0 + t) * a.m + row0;
      if (n_rows == kRows) {
        L::storef(out, v);
      } else {
        alignas(64) float tmp[kRows];
        L::storef(tmp, v);
        std::memcpy(out, tmp, size_t(n_rows) * sizeof(float));
      }
    }
  }
}

template <bool kSigned, bool kHasM>
void strip_all_tiles_acts(const QMatmulArgs& a, const uint8_t* strip, const uint8_t* acts, int64_t s) {
  if (a.x.q2) return strip_all_tiles<kSigned, true, kHasM>(a, strip, acts, s);
  strip_all_tiles<kSigned, false, kHasM>(a, strip, acts, s);
}

template <DType kFmt>
void strips_of(const QMatmulArgs& a, const uint8_t* acts, int64_t s0, int64_t s1, uint8_t* scratch) {
  constexpr bool k8 = kFmt == DType::Q8_0 || kFmt == DType::W8;
  for (int64_t s = s0; s < s1; ++s) {
    if constexpr (k8) {
      pack_strip8<kFmt>(a, s, scratch);
      strip_all_tiles_acts<kSigned8, !kSigned8>(a, scratch, acts, s);
    } else {
      pack_strip4<kFmt>(a, s, scratch);
      strip_all_tiles_acts<false, true>(a, scratch, acts, s);
    }
  }
}

}  // namespace

int64_t qgemm_rows() { return kRows; }
int64_t qgemm_tokens() { return kTok; }
int64_t qgemm_strip_bytes(int64_t k) { return k / kBlock * strip_block_bytes(); }
int64_t qgemm_tile_bytes(int64_t k, bool wide) { return k / kBlock * tile_block_bytes(wide); }

// Token tiles [tile0, tile1) of x; tokens past n are zeros (they add nothing and are not stored).
void qgemm_pack_acts(const QuantizedActs& x, int64_t tile0, int64_t tile1, uint8_t* out) {
  const bool wide = x.q2 != nullptr;
  const int64_t nb = x.k / kBlock, tb = tile_block_bytes(wide), planes = wide ? 2 : 1;
  for (int64_t tile = tile0; tile < tile1; ++tile) {
    uint8_t* dst_tile = out + tile * nb * tb;
    std::memset(dst_tile, 0, size_t(nb * tb));
    for (int t = 0; t < kTok; ++t) {
      const int64_t tok = tile * kTok + t;
      if (tok >= x.n) break;
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* dst = dst_tile + b * tb;
        for (int64_t p = 0; p < planes; ++p) {
          const int8_t* src = (p ? x.q2 : x.q) + tok * x.k + b * kBlock;
          for (int64_t j = 0; j < kQuads; ++j) std::memcpy(dst + ((p * kQuads + j) * kTok + t) * 4, src + 4 * j, 4);
        }
        uint8_t* ds = dst + planes * kQuads * kTok * 4;
        std::memcpy(ds + 4 * t, x.db + tok * nb + b, 4);
        std::memcpy(ds + 4 * (kTok + t), x.sb + tok * nb + b, 4);
      }
    }
  }
}

// Strips [s0, s1) of kRows rows of a.w (its repacked copy in a.packed) against all tokens
// of acts (qgemm_pack_acts), each strip packed into scratch (qgemm_strip_bytes).
void qgemm(const QMatmulArgs& a, const uint8_t* acts, int64_t s0, int64_t s1, uint8_t* scratch) {
  switch (a.w->dtype) {
    case DType::Q4_0: return strips_of<DType::Q4_0>(a, acts, s0, s1, scratch);
    case DType::Q4_1: return strips_of<DType::Q4_1>(a, acts, s0, s1, scratch);
    case DType::W4: return strips_of<DType::W4>(a, acts, s0, s1, scratch);
    case DType::Q4_K: return strips_of<DType::Q4_K>(a, acts, s0, s1, scratch);
    case DType::Q8_0: return strips_of<DType::Q8_0>(a, acts, s0, s1, scratch);
    case DType::W8: return strips_of<DType::W8>(a, acts, s0, s1, scratch);
    default: TF_ASSERT(false, "integer GEMM: no repacked layout for {}", dtype_name(a.w->dtype));
  }
}
#endif

}  // namespace tf::cpu::TF_CPU_ISA_NS

// Integer matmul kernels for quantized weights (KernelTable::qmatmul_blocks, quantize_row):
// out[n, m] = x[n, k] @ w[m, k]^T (+ bias) with w in W8, W4, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K or Q6_K
// (src/quant/formats.h) and x quantized per block of 32 to 8 bits, or to 16 bits held as two
// int8 planes whose byte dot products are joined as 254 * dot(w, q) + dot(w, q2) (kernels.h,
// QuantizedActs).
//
// Every format is, per block b of 32 weights of a row, int8 or unsigned values q (4 to 6
// bits) with a scale c and an offset m per lane of 4 (one pair for the whole block except in
// Q6_K):  w = c * q - m. The dot-product instructions sum the products
// of 4 bytes into each int32 lane (8 lanes per block); with the activation block's scale dx
// and each lane's sum xs of its 4 quantized activations, a lane contributes
//   dx * (c * dot(q, xq) - m * xs)
//   W8    q signed,   c = scale[row],                 m = 0
//   Q8_0  q signed,   c = d (f16 in the block),       m = 0
//   Q4_0  q 0..15,    c = d,                          m = 8 d
//   Q4_1  q 0..15,    c = d,                          m = -m (f16 in the block: w = d q + m)
//   W4    q 0..15,    c = scale[row, g] (f16),        m = c * zero[row, g]   (g: group of b)
//   Q4_K  q 0..15,    c = d * sc_j (6-bit),           m = dmin * m_j         (j: sub-block)
//   Q5_K  q 0..31,    as Q4_K, the fifth bit of q from the block's 32 bytes of high bits
//   Q6_K  q 0..63,    c = d * sc_i (int8, per 16),    m = 32 c               (i: lanes 0-3, 4-7)
// and the lanes are summed once at the end of the row. Unsigned 4-bit weights go straight
// into vpdpbusd (VNNI) or vpmaddubsw + vpmaddwd as the unsigned operand; signed int8
// weights first move their sign onto the activation (|w| . sign(x, w)), since those
// instructions multiply unsigned by signed bytes (|w| <= 128 and |x| <= 127 keep
// vpmaddubsw's int16 pair sums below saturation).
//
// A step is one block (256-bit vectors: AVX2) or two (512-bit: AVX-512; an odd last block
// then takes a 256-bit step). A tile is R weight rows x NT tokens: each step's weights are
// loaded, unpacked and scaled once and used for the NT tokens. The threads take blocks of
// kRows (4) rows; a block runs as one tile of 4 rows when it has fewer than kMaxTok tokens
// (decode: 4 row streams in flight per thread keep more loads waiting on memory at once),
// and as tiles of 2 rows x kMaxTok tokens otherwise (prefill: 8 accumulators; 16 would not
// fit the registers beside the steps). The baseline level sums the same products in plain
// integer loops.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/simd.h"
#include "core/error.h"
#include "quant/gguf_dequant.h"

namespace tf::cpu::TF_CPU_ISA_NS {
namespace {

constexpr int kRows = 4;      // weight rows per block (the threads' unit of work; a decode tile)
constexpr int kPairRows = 2;  // weight rows of a tile of kMaxTok tokens
constexpr int kMaxTok = 4;    // tokens per tile
constexpr int64_t kBlock = 32, kLanesPerBlock = 8;
// Software prefetch distance along a weight row (bytes): the rows are read once, front to
// back, a few in parallel; the hardware prefetchers alone leave the loads waiting.
constexpr int64_t kPrefetch = 512;

inline float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_f32(h);
}

#if defined(__AVX2__)
// ---- vectors of one block (256-bit) and of two (512-bit) ----------------------------------
struct V256 {
  static constexpr int kBlocks = 1;
  using I = __m256i;
  using F = __m256;
  static I bytes(const uint8_t* p0, const uint8_t*) { return _mm256_loadu_si256(reinterpret_cast<const I*>(p0)); }
  // 16 bytes of nibbles -> [low nibbles (16) | high nibbles (16)]
  static I nibbles16(const uint8_t* p0, const uint8_t*) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p0));
    return _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(b), _mm_srli_epi16(b, 4), 1),
                            _mm256_set1_epi8(0x0F));
  }
  // Sub-block j of 32 bytes of nibbles: their low (j even) or high nibbles.
  static I nibbles32(const uint8_t* p, int j) {
    I v = _mm256_loadu_si256(reinterpret_cast<const I*>(p));
    if (j % 2) v = _mm256_srli_epi16(v, 4);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
  }
  // 32 bytes at p0: their low (hi false) or high nibbles.
  static I nibbles(const uint8_t* p0, const uint8_t*, bool hi) {
    I v = _mm256_loadu_si256(reinterpret_cast<const I*>(p0));
    if (hi) v = _mm256_srli_epi16(v, 4);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
  }
  // 32 bytes at p, each shifted right by s0 and masked.
  static I bits(const uint8_t* p, int s0, int, int mask) {
    const I v = _mm256_srl_epi16(_mm256_loadu_si256(reinterpret_cast<const I*>(p)), _mm_cvtsi32_si128(s0));
    return _mm256_and_si256(v, _mm256_set1_epi8(char(mask)));
  }
  static I or_shl4(I lo, I hi) { return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)); }  // hi bytes < 16
  // The 2 int8 values at s (one per 16 weights) times mul, each on 4 lanes.
  static F lanes_i8(const uint8_t* s, float mul) {
    int16_t two;
    std::memcpy(&two, s, 2);
    const __m128 v = _mm_mul_ps(_mm_cvtepi32_ps(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(two))), _mm_set1_ps(mul));
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0));
  }
  static F lanes(float a, float) { return _mm256_set1_ps(a); }
  // The F16 values at byte offsets o0 (first block) and o1 (second) of p, on their lanes.
  template <int o0, int o1>
  static F lanes_f16(const uint8_t* p) { return _mm256_set1_ps(half(p + o0)); }
  static F splat(float a) { return _mm256_set1_ps(a); }
  static F zero() { return _mm256_setzero_ps(); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static I load_x(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const I*>(p)); }
  static I dot_u8s8(I u, I s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
  }
  static I dot_s8s8(I w, I x) { return dot_u8s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)); }
  static I join(I hi, I lo) {  // 254 hi + lo = (hi << 8) - (hi << 1) + lo
    return _mm256_add_epi32(_mm256_sub_epi32(_mm256_slli_epi32(hi, 8), _mm256_slli_epi32(hi, 1)), lo);
  }
  // The same for |hi| < 2^15 (a lane's 4 products of unsigned weights below 64 and an int8).
  static I join_small(I hi, I lo) { return join254_small(hi, lo); }
  static F cvt(I v) { return _mm256_cvtepi32_ps(v); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F fnma(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a * b
  static float sum(F a) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
  }
};
#endif

#if defined(__AVX512BW__)
struct V512 {
  static constexpr int kBlocks = 2;
  using I = __m512i;
  using F = __m512;
  static I bytes(const uint8_t* p0, const uint8_t* p1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0))),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1)), 1);
  }
  // Two blocks of 16 bytes of nibbles -> [low0 | high0 | low1 | high1] (16 bytes each)
  static I nibbles16(const uint8_t* p0, const uint8_t* p1) {
    const __m256i v = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1)), 1);
    const I both = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);  // [0, 1, 0>>4, 1>>4]
    return _mm512_and_si512(_mm512_shuffle_i64x2(both, both, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(0x0F));
  }
  // Sub-blocks j and j + 1 (j even) of 32 bytes of nibbles: [low (32) | high (32)]
  static I nibbles32(const uint8_t* p, int) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1),
                            _mm512_set1_epi8(0x0F));
  }
  // 32 bytes at p0 (first block) and 32 at p1 (second): their low (hi false) or high nibbles.
  static I nibbles(const uint8_t* p0, const uint8_t* p1, bool hi) {
    I v = bytes(p0, p1);
    if (hi) v = _mm512_srli_epi16(v, 4);
    return _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
  }
  // 32 bytes at p, shifted right by s0 (first block) and by s1 (second), masked.
  static I bits(const uint8_t* p, int s0, int s1, int mask) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const I both = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_srl_epi16(v, _mm_cvtsi32_si128(s0))),
                                      _mm256_srl_epi16(v, _mm_cvtsi32_si128(s1)), 1);
    return _mm512_and_si512(both, _mm512_set1_epi8(char(mask)));
  }
  static I or_shl4(I lo, I hi) { return _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4)); }  // hi bytes < 16
  // The 4 int8 values at s (one per 16 weights) times mul, each on 4 lanes.
  static F lanes_i8(const uint8_t* s, float mul) {
    int32_t four;
    std::memcpy(&four, s, 4);
    const __m128 v = _mm_mul_ps(_mm_cvtepi32_ps(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(four))), _mm_set1_ps(mul));
    return _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
                                 _mm512_castps128_ps512(v));
  }
  static F lanes(float a, float b) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(a)), _mm256_set1_ps(b), 1);
  }
  // The F16 values at byte offsets o0 and o1 of p on lanes 0-7 and 8-15: one conversion of
  // the 16 halves from o0 and a permute (3 instructions instead of 7 for two scalars), where
  // those 32 bytes lie within the caller's blocks (a pair of GGUF blocks, each longer than
  // o1 - o0); two adjacent halves (W4's scales of groups g and g + 1, possibly the last two of
  // the array) are read alone.
  template <int o0, int o1>
  static F lanes_f16(const uint8_t* p) {
    if constexpr (o1 - o0 > 2 && o1 - o0 < 32) {
      const F f = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + o0)));
      constexpr int i = (o1 - o0) / 2;
      return _mm512_permutexvar_ps(_mm512_set_epi32(i, i, i, i, i, i, i, i, 0, 0, 0, 0, 0, 0, 0, 0), f);
    } else {
      uint16_t h0, h1;
      std::memcpy(&h0, p + o0, 2);
      std::memcpy(&h1, p + o1, 2);
      const __m512 f = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(int(h0 | uint32_t(h1) << 16))));
      return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), f);
    }
  }
  static F splat(float a) { return _mm512_set1_ps(a); }
  static F zero() { return _mm512_setzero_ps(); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static I load_x(const int8_t* p) { return _mm512_loadu_si512(p); }
  static I dot_u8s8(I u, I s) {
#if defined(__AVX512VNNI__)
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s);
#else
    return _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1));
#endif
  }
  static I dot_s8s8(I w, I x) {
    const I neg_x = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
    return dot_u8s8(_mm512_abs_epi8(w), neg_x);
  }
  static I join(I hi, I lo) {  // 254 hi + lo = (hi << 8) - (hi << 1) + lo
    return _mm512_add_epi32(_mm512_sub_epi32(_mm512_slli_epi32(hi, 8), _mm512_slli_epi32(hi, 1)), lo);
  }
  static I join_small(I hi, I lo) { return join254_small(hi, lo); }  // as V256's
  static F cvt(I v) { return _mm512_cvtepi32_ps(v); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F fnma(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  static float sum(F a) { return _mm512_reduce_add_ps(a); }
};
#endif

#if defined(__AVX2__)
// ---- formats: the step at block b of a row -------------------------------------------------
// Each has kSigned (q signed int8) and kOffset (m != 0), row(r) -> the row's base, and
// step<V>(r, base, b) -> {q, c, m} for blocks [b, b + V::kBlocks).
template <typename V>
struct Step {
  typename V::I q;
  typename V::F c, m;
};

struct FmtW8 {
  static constexpr bool kSigned = true, kOffset = false;
  const int8_t* q;
  const float* scales;
  int64_t k;
  explicit FmtW8(const TensorView& w) : q(w.as<int8_t>()), scales(static_cast<const float*>(w.scales)), k(w.shape[1]) {}
  const uint8_t* row(int64_t r) const { return reinterpret_cast<const uint8_t*>(q + r * k); }
  const uint8_t* prefetch_at(const uint8_t* base, int64_t b) const { return base + b * kBlock + kPrefetch; }
  template <typename V>
  Step<V> step(int64_t r, const uint8_t* base, int64_t b) const {
    const uint8_t* p = base + b * kBlock;
    return {V::bytes(p, p + kBlock), V::splat(scales[r]), V::zero()};
  }
};

// Rows of self-contained GGUF blocks of kBytes bytes per kElems weights.
template <int64_t kElems, int64_t kBytes>
struct GgufRows {
  const uint8_t* data;
  int64_t row_bytes;
  explicit GgufRows(const TensorView& w) : data(w.as<uint8_t>()), row_bytes(w.shape[1] / kElems * kBytes) {}
  const uint8_t* row(int64_t r) const { return data + r * row_bytes; }
  const uint8_t* prefetch_at(const uint8_t* base, int64_t b) const {
    return base + b * kBlock / kElems * kBytes + kPrefetch;
  }
};

struct FmtQ8_0 : GgufRows<32, 34> {
  static constexpr bool kSigned = true, kOffset = false;
  static constexpr int64_t kBytes = 34;
  using GgufRows::GgufRows;
  template <typename V>
  Step<V> step(int64_t, const uint8_t* base, int64_t b) const {
    const uint8_t* p = base + b * kBytes;
    return {V::bytes(p + 2, p + kBytes + 2), V::template lanes_f16<0, kBytes>(p), V::zero()};
  }
};

struct FmtQ4_0 : GgufRows<32, 18> {
  static constexpr bool kSigned = false, kOffset = true;
  static constexpr int64_t kBytes = 18;
  using GgufRows::GgufRows;
  template <typename V>
  Step<V> step(int64_t, const uint8_t* base, int64_t b) const {
    const uint8_t* p = base + b * kBytes;
    const typename V::F c = V::template lanes_f16<0, kBytes>(p);
    return {V::nibbles16(p + 2, p + kBytes + 2), c, V::mul(c, V::splat(8.0f))};
  }
};

struct FmtQ4_1 : GgufRows<32, 20> {
  static constexpr bool kSigned = false, kOffset = true;
  static constexpr int64_t kBytes = 20;
  using GgufRows::GgufRows;
  template <typename V>
  Step<V> step(int64_t, const uint8_t* base, int64_t b) const {
    const uint8_t* p = base + b * kBytes;
    const typename V::F m = V::template lanes_f16<2, kBytes + 2>(p);
    return {V::nibbles16(p + 4, p + kBytes + 4), V::template lanes_f16<0, kBytes>(p), V::mul(m, V::splat(-1.0f))};
  }
};

struct FmtW4 {
  static constexpr bool kSigned = false, kOffset = true;
  const uint8_t* q;
  const uint8_t* scales;  // F16 [m, k / G]
  const uint8_t* zeros;   // U8 [m, k / G]
  int64_t k, blocks_per_group, groups;
  explicit FmtW4(const TensorView& w)
      : q(w.as<uint8_t>()),
        scales(static_cast<const uint8_t*>(w.scales)),
        zeros(static_cast<const uint8_t*>(w.zeros)),
        k(w.shape[1]),
        blocks_per_group(w.group_size / kBlock),
        groups(w.shape[1] / w.group_size) {}
  const uint8_t* row(int64_t r) const { return q + r * (k / 2); }
  const uint8_t* prefetch_at(const uint8_t* base, int64_t b) const { return base + b * (kBlock / 2) + kPrefetch; }
  template <typename V>
  Step<V> step(int64_t r, const uint8_t* base, int64_t b) const {
    const int64_t g0 = r * groups + b / blocks_per_group;
    const uint8_t* p = base + b * (kBlock / 2);
    if (V::kBlocks == 1 || blocks_per_group > 1) {  // both blocks in group g0 (b is even)
      const typename V::F c = V::splat(half(scales + 2 * g0));
      return {V::nibbles16(p, p + kBlock / 2), c, V::mul(c, V::splat(float(zeros[g0])))};
    }
    const typename V::F c = V::template lanes_f16<0, 2>(scales + 2 * g0);  // groups g0, g0 + 1
    return {V::nibbles16(p, p + kBlock / 2), c, V::mul(c, V::lanes(float(zeros[g0]), float(zeros[g0 + 1])))};
  }
};

// Q4_K's and Q5_K's step over sub-blocks [j, j + V::kBlocks) of the super-block at p, with
// their values q: c = d * sc, m = dmin * min (6-bit, from the 12 bytes at p + 4).
template <typename V>
Step<V> k4_step(const uint8_t* p, int j, typename V::I q) {
  const float d = half(p), dmin = half(p + 2);
  int sc0, m0, sc1 = 0, m1 = 0;
  k4_scale_min(j, p + 4, &sc0, &m0);
  if (V::kBlocks == 2) k4_scale_min(j + 1, p + 4, &sc1, &m1);
  return {q, V::lanes(d * float(sc0), d * float(sc1)), V::lanes(dmin * float(m0), dmin * float(m1))};
}

struct FmtQ4_K : GgufRows<256, 144> {
  static constexpr bool kSigned = false, kOffset = true;
  static constexpr int64_t kBytes = 144;
  using GgufRows::GgufRows;
  template <typename V>
  Step<V> step(int64_t, const uint8_t* base, int64_t b) const {
    const uint8_t* p = base + (b / 8) * kBytes;
    const int j = int(b % 8);
    return k4_step<V>(p, j, V::nibbles32(p + 16 + 32 * (j / 2), j));
  }
};

// Q5_K: {f16 d, f16 dmin, scales[12], qh[32], qs[128]}; sub-block j: the low (j even) or high
// nibbles of qs[32 (j / 2) ..], fifth bits (qh[l] >> j) & 1.
struct FmtQ5_K : GgufRows<256, 176> {
  static constexpr bool kSigned = false, kOffset = true;
  static constexpr int64_t kBytes = 176;
  using GgufRows::GgufRows;
  template <typename V>
  Step<V> step(int64_t, const uint8_t* base, int64_t b) const {
    const uint8_t* p = base + (b / 8) * kBytes;
    const int j = int(b % 8);
    return k4_step<V>(p, j, V::or_shl4(V::nibbles32(p + 48 + 32 * (j / 2), j), V::bits(p + 16, j, j + 1, 1)));
  }
};

// Q6_K: {ql[128], qh[64], int8 scales[16], f16 d}; sub-block j = 4 h + i (h: half): low (i < 2)
// or high nibbles of ql[64 h + 32 (i % 2) ..], two high bits (qh[32 h + l] >> 2 i) & 3, scales
// 8 h + 2 i and 8 h + 2 i + 1 (16 weights each); w = d * scale * (q - 32).
struct FmtQ6_K : GgufRows<256, 210> {
  static constexpr bool kSigned = false, kOffset = true;
  static constexpr int64_t kBytes = 210;
  using GgufRows::GgufRows;
  template <typename V>
  Step<V> step(int64_t, const uint8_t* base, int64_t b) const {
    const uint8_t* p = base + (b / 8) * kBytes;
    const int h = int(b % 8) / 4, i = int(b % 4);
    const uint8_t* ql = p + 64 * h + 32 * (i % 2);
    const typename V::I q = V::or_shl4(V::nibbles(ql, ql + 32, i >= 2), V::bits(p + 128 + 32 * h, 2 * i, 2 * i + 2, 3));
    const typename V::F c = V::lanes_i8(p + 192 + 8 * h + 2 * i, half(p + 208));
    return {q, c, V::mul(c, V::splat(32.0f))};
  }
};

// Adds blocks [b0, b1) (steps of V::kBlocks) of NT tokens x R rows to sums; kWide: 16-bit
// activations (two planes). The vector accumulators are local to this function so that GCC
// keeps them in registers.
template <typename V, typename Fmt, int R, int NT, bool kWide>
inline void accumulate(const Fmt& f, const QuantizedActs& x, int64_t t0, const int64_t* rows,
                       const uint8_t* const* base, int64_t b0, int64_t b1, float (&sums)[NT][R]) {
  const int64_t k = x.k, k4 = x.k / 4;
  typename V::F acc[NT][R];
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < R; ++r) acc[t][r] = V::zero();
  for (int64_t b = b0; b < b1; b += V::kBlocks) {
    for (int r = 0; r < R; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(f.prefetch_at(base[r], b)), _MM_HINT_T0);
      const Step<V> s = f.template step<V>(rows[r], base[r], b);
      for (int t = 0; t < NT; ++t) {
        const typename V::I xq = V::load_x(x.q + (t0 + t) * k + b * kBlock);
        typename V::I dot = Fmt::kSigned ? V::dot_s8s8(s.q, xq) : V::dot_u8s8(s.q, xq);
        if constexpr (kWide) {
          const typename V::I xq2 = V::load_x(x.q2 + (t0 + t) * k + b * kBlock);
          if constexpr (Fmt::kSigned) dot = V::join(dot, V::dot_s8s8(s.q, xq2));  // |dot| up to 4 * 128 * 127
          else dot = V::join_small(dot, V::dot_u8s8(s.q, xq2));                  // q < 64: below 2^15
        }
        typename V::F v = V::mul(s.c, V::cvt(dot));
        const int64_t lane = (t0 + t) * k4 + b * kLanesPerBlock;
        if constexpr (Fmt::kOffset) v = V::fnma(s.m, V::load(x.xs + lane), v);
        acc[t][r] = V::fma(v, V::load(x.dl + lane), acc[t][r]);
      }
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < R; ++r) sums[t][r] += V::sum(acc[t][r]);
}
#endif

// ---- the tile -------------------------------------------------------------------------------
#if defined(__AVX2__)
// R rows (rows[0, R), the first n_rows of them distinct) x NT tokens from t0.
template <typename Fmt, int R, int NT, bool kWide>
void tile(const Fmt& f, const QMatmulArgs& a, const int64_t* rows, int n_rows, int64_t t0) {
  const int64_t nb = a.x.k / kBlock;
  const uint8_t* base[R];
  for (int r = 0; r < R; ++r) base[r] = f.row(rows[r]);
  float sums[NT][R] = {};
#if defined(__AVX512BW__)
  const int64_t nb2 = nb / 2 * 2;
  accumulate<V512, Fmt, R, NT, kWide>(f, a.x, t0, rows, base, 0, nb2, sums);
#else
  const int64_t nb2 = 0;
#endif
  if (nb2 < nb) accumulate<V256, Fmt, R, NT, kWide>(f, a.x, t0, rows, base, nb2, nb, sums);
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < n_rows; ++r)
      a.out[(t0 + t) * a.m + rows[r]] = sums[t][r] + (a.bias ? a.bias[rows[r]] : 0.0f);
}
#else
// Baseline: every weight as (q, c, m) from the layouts, integer dot products per half block
// of 16 (c and m per half: Q6_K's scales are per 16 weights).
struct ScalarBlock {
  int8_t q[32];
  float c[2], m[2];
};

ScalarBlock scalar_block(const TensorView& w, int64_t row, int64_t b) {
  ScalarBlock s{};
  float c = 0, m = 0;  // both halves' (all formats but Q6_K)
  const int64_t k = w.shape[1];
  const uint8_t* data = w.as<uint8_t>();
  const auto nib16 = [&](const uint8_t* p) {
    for (int i = 0; i < 16; ++i) {
      s.q[i] = int8_t(p[i] & 0xF);
      s.q[i + 16] = int8_t(p[i] >> 4);
    }
  };
  switch (w.dtype) {
    case DType::W8:
      std::memcpy(s.q, data + row * k + b * kBlock, kBlock);
      c = static_cast<const float*>(w.scales)[row];
      break;
    case DType::Q8_0: {
      const uint8_t* p = data + row * (k / kBlock * 34) + b * 34;
      std::memcpy(s.q, p + 2, kBlock);
      c = half(p);
      break;
    }
    case DType::Q4_0: {
      const uint8_t* p = data + row * (k / kBlock * 18) + b * 18;
      nib16(p + 2);
      c = half(p);
      m = 8.0f * c;
      break;
    }
    case DType::Q4_1: {
      const uint8_t* p = data + row * (k / kBlock * 20) + b * 20;
      nib16(p + 4);
      c = half(p);
      m = -half(p + 2);
      break;
    }
    case DType::W4: {
      nib16(data + row * (k / 2) + b * (kBlock / 2));
      const int64_t g = row * (k / w.group_size) + b * kBlock / w.group_size;
      c = half(static_cast<const uint8_t*>(w.scales) + 2 * g);
      m = c * float(static_cast<const uint8_t*>(w.zeros)[g]);
      break;
    }
    case DType::Q4_K: {
      const uint8_t* p = data + row * (k / 256 * 144) + (b / 8) * 144;
      const int j = int(b % 8);
      int sc, mn;
      k4_scale_min(j, p + 4, &sc, &mn);
      for (int i = 0; i < 32; ++i) s.q[i] = int8_t(j % 2 ? p[16 + 32 * (j / 2) + i] >> 4 : p[16 + 32 * (j / 2) + i] & 0xF);
      c = half(p) * float(sc);
      m = half(p + 2) * float(mn);
      break;
    }
    case DType::Q5_K: {
      const uint8_t* p = data + row * (k / 256 * 176) + (b / 8) * 176;
      const int j = int(b % 8);
      int sc, mn;
      k4_scale_min(j, p + 4, &sc, &mn);
      for (int i = 0; i < 32; ++i) {
        const uint8_t byte = p[48 + 32 * (j / 2) + i];
        s.q[i] = int8_t((j % 2 ? byte >> 4 : byte & 0xF) | (((p[16 + i] >> j) & 1) << 4));
      }
      c = half(p) * float(sc);
      m = half(p + 2) * float(mn);
      break;
    }
    case DType::Q6_K: {
      const uint8_t* p = data + row * (k / 256 * 210) + (b / 8) * 210;
      const int h = int(b % 8) / 4, i4 = int(b % 4);
      for (int i = 0; i < 32; ++i) {
        const uint8_t lo = p[64 * h + 32 * (i4 % 2) + i], hi = p[128 + 32 * h + i];
        s.q[i] = int8_t((i4 >= 2 ? lo >> 4 : lo & 0xF) | (((hi >> (2 * i4)) & 3) << 4));
      }
      const float d = half(p + 208);
      for (int hf = 0; hf < 2; ++hf) {
        s.c[hf] = d * float(int8_t(p[192 + 8 * h + 2 * i4 + hf]));
        s.m[hf] = 32.0f * s.c[hf];
      }
      return s;
    }
    default: TF_ASSERT(false, "quantized matmul: no layout for {}", dtype_name(w.dtype));
  }
  s.c[0] = s.c[1] = c;
  s.m[0] = s.m[1] = m;
  return s;
}

template <typename Fmt, int R, int NT, bool kWide>
void tile(const Fmt& f, const QMatmulArgs& a, const int64_t* rows, int n_rows, int64_t t0) {
  (void)f;
  const int64_t k = a.x.k, k4 = k / 4, nb = k / kBlock;
  float sums[NT][R] = {};
  for (int64_t b = 0; b < nb; ++b) {
    for (int r = 0; r < R; ++r) {
      const ScalarBlock s = scalar_block(*a.w, rows[r], b);
      for (int t = 0; t < NT; ++t) {
        const int8_t* xq = a.x.q + (t0 + t) * k + b * kBlock;
        const int8_t* xq2 = kWide ? a.x.q2 + (t0 + t) * k + b * kBlock : nullptr;
        float v = 0;
        for (int hf = 0; hf < 2; ++hf) {
          int32_t dot = 0;
          for (int i = 16 * hf; i < 16 * hf + 16; ++i) dot += int32_t(s.q[i]) * int32_t(xq[i]);
          if constexpr (kWide) {  // Q = 254 q + q2
            int32_t dot2 = 0;
            for (int i = 16 * hf; i < 16 * hf + 16; ++i) dot2 += int32_t(s.q[i]) * int32_t(xq2[i]);
            dot = 254 * dot + dot2;
          }
          float xs = 0;  // the half block's sum of quantized activations
          for (int l = 4 * hf; l < 4 * hf + 4; ++l) xs += a.x.xs[(t0 + t) * k4 + b * kLanesPerBlock + l];
          v += s.c[hf] * float(dot) - s.m[hf] * xs;
        }
        sums[t][r] += a.x.dl[(t0 + t) * k4 + b * kLanesPerBlock] * v;
      }
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < n_rows; ++r)
      a.out[(t0 + t) * a.m + rows[r]] = sums[t][r] + (a.bias ? a.bias[rows[r]] : 0.0f);
}

// The baseline reads every format through scalar_block; the format types only name it.
struct FmtW8 { explicit FmtW8(const TensorView&) {} };
struct FmtQ8_0 { explicit FmtQ8_0(const TensorView&) {} };
struct FmtQ4_0 { explicit FmtQ4_0(const TensorView&) {} };
struct FmtQ4_1 { explicit FmtQ4_1(const TensorView&) {} };
struct FmtW4 { explicit FmtW4(const TensorView&) {} };
struct FmtQ4_K { explicit FmtQ4_K(const TensorView&) {} };
struct FmtQ5_K { explicit FmtQ5_K(const TensorView&) {} };
struct FmtQ6_K { explicit FmtQ6_K(const TensorView&) {} };
#endif

template <typename Fmt, bool kWide>
void blocks_of_acts(const QMatmulArgs& a, int64_t b0, int64_t b1) {
  const Fmt f(*a.w);
  const int64_t n = a.x.n;
  for (int64_t blk = b0; blk < b1; ++blk) {
    const int64_t r0 = blk * kRows;
    const int n_rows = int(std::min<int64_t>(kRows, a.m - r0));
    int64_t rows[kRows];
    for (int r = 0; r < kRows; ++r) rows[r] = r0 + std::min(r, n_rows - 1);  // a tail repeats its last row
    int64_t t = 0;
    if (n >= kMaxTok) {
      for (int h = 0; h * kPairRows < n_rows; ++h) {  // the block's pairs of rows
        const int64_t* pair = rows + h * kPairRows;
        const int pair_rows = std::min(kPairRows, n_rows - h * kPairRows);
        for (t = 0; t + kMaxTok <= n; t += kMaxTok) tile<Fmt, kPairRows, kMaxTok, kWide>(f, a, pair, pair_rows, t);
      }
    }
    switch (n - t) {  // the tokens left: fewer than kMaxTok, all rows of the block at once
      case 0: break;
      case 1: tile<Fmt, kRows, 1, kWide>(f, a, rows, n_rows, t); break;
      case 2: tile<Fmt, kRows, 2, kWide>(f, a, rows, n_rows, t); break;
      default: tile<Fmt, kRows, 3, kWide>(f, a, rows, n_rows, t); break;
    }
  }
}

template <typename Fmt>
void blocks_of(const QMatmulArgs& a, int64_t b0, int64_t b1) {
  if (a.x.q2) return blocks_of_acts<Fmt, true>(a, b0, b1);
  blocks_of_acts<Fmt, false>(a, b0, b1);
}

}  // namespace

int64_t qmatmul_block_rows() { return kRows; }

void qmatmul_w8(const QMatmulArgs& a, int64_t b0, int64_t b1) { blocks_of<FmtW8>(a, b0, b1); }
void qmatmul_w4(const QMatmulArgs& a, int64_t b0, int64_t b1) { blocks_of<FmtW4>(a, b0, b1); }
void qmatmul_q8_0(const QMatmulArgs& a, int64_t b0, int64_t b1) { blocks_of<FmtQ8_0>(a, b0, b1); }
void qmatmul_q4_0(const QMatmulArgs& a, int64_t b0, int64_t b1) { blocks_of<FmtQ4_0>(a, b0, b1); }
void qmatmul_q4_1(const QMatmulArgs& a, int64_t b0, int64_t b1) { blocks_of<FmtQ4_1>(a, b0, b1); }
void qmatmul_q4_k(const QMatmulArgs& a, int64_t b0, int64_t b1) { blocks_of<FmtQ4_K>(a, b0, b1); }
void qmatmul_q5_k(const QMatmulArgs& a, int64_t b0, int64_t b1) { blocks_of<FmtQ5_K>(a, b0, b1); }
void qmatmul_q6_k(const QMatmulArgs& a, int64_t b0, int64_t b1) { blocks_of<FmtQ6_K>(a, b0, b1); }

// Blocks of 32 (kernels.h, QuantizedActs): 8-bit d = max|x| / 127, 16-bit d = max|x| / 32258;
// Q = round(x * (1 / d)) (ties to even), the 16-bit Q split into 254 q + q2 with |q2| <= 127
// by integer arithmetic; per lane of 4 values dl = d and xs = their sum of Q; per block db = d
// and sb = d * sum(Q). With w4_order the 32 values go evens first, then odds.
// The AVX2 path (element order) computes the same values: Q by cvtps (round to nearest even,
// as nearbyint), the 16-bit split's (|Q| + 126) / 254 as a truncated float product, exact for
// |Q| <= 32258 since (|Q| + 126.5) / 254 lies at least 0.5 / 254 from an integer.
void quantize_row(const float* x, int64_t k, bool w4_order, const QuantizedRow& o) {
  constexpr int32_t kSplit = 254, kMax16 = 127 * kSplit;
  const bool wide = o.q2 != nullptr;
#if defined(__AVX2__)
  if (!w4_order) {
    const __m256i quad_order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i lim = _mm256_set1_epi32(wide ? kMax16 : 127);
    for (int64_t b = 0; b < k / kBlock; ++b) {
      const float* xb = x + b * kBlock;
      __m256 v[4], mx = _mm256_setzero_ps();
      for (int i = 0; i < 4; ++i) {
        v[i] = _mm256_loadu_ps(xb + 8 * i);
        mx = _mm256_max_ps(mx, _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v[i]));
      }
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
      const float amax = _mm_cvtss_f32(m4);
      const float d = amax / (wide ? float(kMax16) : 127.0f), inv = d > 0 ? 1.0f / d : 0.0f;
      __m256i q[4];
      for (int i = 0; i < 4; ++i) {
        q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(inv)));
        q[i] = _mm256_min_epi32(_mm256_max_epi32(q[i], _mm256_sub_epi32(_mm256_setzero_si256(), lim)), lim);
      }
      // Sums of the 8 quads (lanes), in order.
      const __m256i quads = _mm256_permutevar8x32_epi32(
          _mm256_hadd_epi32(_mm256_hadd_epi32(q[0], q[1]), _mm256_hadd_epi32(q[2], q[3])), quad_order);
      _mm256_storeu_ps(o.xs + b * kLanesPerBlock, _mm256_cvtepi32_ps(quads));
      _mm256_storeu_ps(o.dl + b * kLanesPerBlock, _mm256_set1_ps(d));
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(quads), _mm256_extracti128_si256(quads, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
      o.db[b] = d;
      o.sb[b] = d * float(_mm_cvtsi128_si32(s4));
      __m256i lo[4];
      if (wide) {
        for (int i = 0; i < 4; ++i) {
          const __m256 mag = _mm256_cvtepi32_ps(_mm256_abs_epi32(q[i]));
          const __m256i hi = _mm256_cvttps_epi32(
              _mm256_mul_ps(_mm256_add_ps(mag, _mm256_set1_ps(126.5f)), _mm256_set1_ps(1.0f / float(kSplit))));
          const __m256i q1 = _mm256_sign_epi32(hi, q[i]);
          lo[i] = _mm256_sub_epi32(q[i], _mm256_sub_epi32(_mm256_slli_epi32(q1, 8), _mm256_slli_epi32(q1, 1)));
          q[i] = q1;
        }
      }
      const auto pack = [&](const __m256i* w, int8_t* dst) {  // 32 int32 in -127..127 to bytes, in order
        const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(w[0], w[1]), _mm256_packs_epi32(w[2], w[3]));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_permutevar8x32_epi32(p, quad_order));
      };
      pack(q, o.q + b * kBlock);
      if (wide) pack(lo, o.q2 + b * kBlock);
    }
    return;
  }
#endif
  for (int64_t b = 0; b < k / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    float amax = 0;
    for (int i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / (wide ? float(kMax16) : 127.0f), inv = d > 0 ? 1.0f / d : 0.0f;
    int32_t qb[kBlock];
    for (int i = 0; i < kBlock; ++i)
      qb[i] = std::clamp(int32_t(std::nearbyint(xb[i] * inv)), wide ? -kMax16 : -127, wide ? kMax16 : 127);
    int32_t ordered[kBlock];
    for (int i = 0; i < kBlock; ++i) ordered[i] = w4_order ? qb[i < kBlock / 2 ? 2 * i : 2 * (i - kBlock / 2) + 1] : qb[i];
    int8_t* out = o.q + b * kBlock;
    for (int i = 0; i < kBlock; ++i) {
      if (!wide) {
        out[i] = int8_t(ordered[i]);
        continue;
      }
      const int32_t mag = std::abs(ordered[i]), hi = (mag + kSplit / 2 - 1) / kSplit;  // |Q - 254 hi| <= 127
      const int32_t q1 = ordered[i] < 0 ? -hi : hi;
      out[i] = int8_t(q1);
      o.q2[b * kBlock + i] = int8_t(ordered[i] - kSplit * q1);
    }
    int64_t sum = 0;
    for (int l = 0; l < kLanesPerBlock; ++l) {
      const int32_t lane = ordered[4 * l] + ordered[4 * l + 1] + ordered[4 * l + 2] + ordered[4 * l + 3];
      o.dl[b * kLanesPerBlock + l] = d;
      o.xs[b * kLanesPerBlock + l] = float(lane);
      sum += lane;
    }
    o.db[b] = d;
    o.sb[b] = d * float(sum);
  }
}

}  // namespace tf::cpu::TF_CPU_ISA_NS

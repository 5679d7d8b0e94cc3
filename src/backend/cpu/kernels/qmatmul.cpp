// Integer matmul kernels for quantized weights (KernelTable::qmatmul_blocks, quantize_row):
// out[n, m] = x[n, k] @ w[m, k]^T (+ bias) with w in W8, W4, Q8_0, Q4_0 or Q4_K
// (src/quant/formats.h) and x quantized to INT8 per block of 32 (kernels.h, QuantizedActs).
//
// Every format is, per block b of 32 weights of a row, int8 or uint4 values q_b with a float
// scale c_b and an offset term z_b:  w = c_b * q - z_b / 32 (as a sum over the block), so
//   sum_j w_j x_j  ~=  sum_b [ c_b * dx_b * dot(q_b, xq_b) - z_b * s_b ]
// with dx_b the activation block's scale and s_b = dx_b * sum(xq_b) (QuantizedActs::s):
//   W8    q signed,   c = scale[row],                     z = 0
//   Q8_0  q signed,   c = d (f16 in the block),           z = 0
//   Q4_0  q 0..15,    c = d,                              z = 8 d
//   W4    q 0..15,    c = scale[row, g] (f16),            z = c * zero[row, g]   (g = group of b)
//   Q4_K  q 0..15,    c = d * sc_j (6-bit sub-scale),     z = dmin * m_j         (j = sub-block)
// The integer dot of 32 pairs: unsigned 4-bit weights go straight into vpdpbusd (VNNI) or
// vpmaddubsw + vpmaddwd (AVX2) as the unsigned operand; signed int8 weights first move
// their sign onto the activation (|w| . sign(x, w)), the usual trick, since those
// instructions multiply unsigned by signed bytes. |w| <= 128 and |x| <= 127 keep
// vpmaddubsw's int16 pair sums below saturation. The baseline level does the same sums in
// plain integer loops.
//
// A tile is kRows weight rows x NT tokens: each weight block is loaded and unpacked once
// and dotted with the NT tokens' blocks; per (token, row) a vector of float partial sums
// (one FMA per block) and a scalar offset sum; one horizontal sum at the end of the row.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/simd.h"
#include "core/error.h"

namespace tf::cpu::TF_CPU_ISA_NS {
namespace {

constexpr int kRows = 4;      // weight rows in flight
constexpr int kMaxTok = 4;    // tokens per tile
constexpr int64_t kBlock = 32;

inline float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// ggml's 6-bit scale and min of sub-block j of a Q4_K super-block (scales[12]).
inline void q4k_scale_min(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// ---- the 32 values of one weight block --------------------------------------------------
#if defined(__AVX2__)
using Q32 = __m256i;
inline Q32 load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
// 16 bytes of nibbles -> [low nibbles (16) | high nibbles (16)] as bytes 0..15.
inline Q32 nibbles16(const uint8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(b), _mm_srli_epi16(b, 4), 1);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}
// 32 bytes -> their low (hi = false) or high nibbles.
inline Q32 nibbles32(const uint8_t* p, bool hi) {
  __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if (hi) v = _mm256_srli_epi16(v, 4);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}
// 8 int32 partial sums of u[i] * s[i] (u unsigned bytes, s signed bytes).
inline __m256i dot_u8s8(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}
inline __m256i dot_s8s8(__m256i w, __m256i x) { return dot_u8s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)); }

using Acc = __m256;
inline Acc acc_zero() { return _mm256_setzero_ps(); }
template <bool kSigned>
inline Acc acc_block(Acc acc, Q32 q, const int8_t* x, float scale) {
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i d = kSigned ? dot_s8s8(q, xv) : dot_u8s8(q, xv);
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(scale), acc);
}
inline float acc_sum(Acc a) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}
#else
struct Q32 {
  int8_t v[32];
};
inline Q32 load32(const void* p) {
  Q32 q;
  std::memcpy(q.v, p, 32);
  return q;
}
inline Q32 nibbles16(const uint8_t* p) {
  Q32 q;
  for (int i = 0; i < 16; ++i) {
    q.v[i] = int8_t(p[i] & 0xF);
    q.v[i + 16] = int8_t(p[i] >> 4);
  }
  return q;
}
inline Q32 nibbles32(const uint8_t* p, bool hi) {
  Q32 q;
  for (int i = 0; i < 32; ++i) q.v[i] = int8_t(hi ? p[i] >> 4 : p[i] & 0xF);
  return q;
}
using Acc = float;
inline Acc acc_zero() { return 0.0f; }
template <bool kSigned>
inline Acc acc_block(Acc acc, const Q32& q, const int8_t* x, float scale) {
  int32_t d = 0;
  for (int i = 0; i < 32; ++i) d += int32_t(q.v[i]) * int32_t(x[i]);
  return acc + float(d) * scale;
}
inline float acc_sum(Acc a) { return a; }
#endif

// ---- formats: block b of row `row` as values, scale c and offset z --------------------------
struct Block32 {
  Q32 q;
  float c, z;
};

struct FmtW8 {
  static constexpr bool kSigned = true;
  const int8_t* q;
  const float* scales;
  int64_t k;
  explicit FmtW8(const TensorView& w) : q(w.as<int8_t>()), scales(static_cast<const float*>(w.scales)), k(w.shape[1]) {}
  Block32 block(int64_t row, int64_t b) const { return {load32(q + row * k + b * kBlock), scales[row], 0.0f}; }
};

struct FmtQ8_0 {
  static constexpr bool kSigned = true;
  static constexpr int64_t kBytes = 34;
  const uint8_t* data;
  int64_t row_bytes;
  explicit FmtQ8_0(const TensorView& w) : data(w.as<uint8_t>()), row_bytes(w.shape[1] / 32 * kBytes) {}
  Block32 block(int64_t row, int64_t b) const {
    const uint8_t* p = data + row * row_bytes + b * kBytes;
    return {load32(p + 2), half(p), 0.0f};
  }
};

struct FmtQ4_0 {
  static constexpr bool kSigned = false;
  static constexpr int64_t kBytes = 18;
  const uint8_t* data;
  int64_t row_bytes;
  explicit FmtQ4_0(const TensorView& w) : data(w.as<uint8_t>()), row_bytes(w.shape[1] / 32 * kBytes) {}
  Block32 block(int64_t row, int64_t b) const {
    const uint8_t* p = data + row * row_bytes + b * kBytes;
    const float d = half(p);
    return {nibbles16(p + 2), d, 8.0f * d};
  }
};

struct FmtW4 {
  static constexpr bool kSigned = false;
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
  Block32 block(int64_t row, int64_t b) const {
    const int64_t g = row * groups + b / blocks_per_group;
    const float c = half(scales + 2 * g);
    return {nibbles16(q + row * (k / 2) + b * 16), c, c * float(zeros[g])};
  }
};

struct FmtQ4_K {
  static constexpr bool kSigned = false;
  static constexpr int64_t kBytes = 144;
  const uint8_t* data;
  int64_t row_bytes;
  explicit FmtQ4_K(const TensorView& w) : data(w.as<uint8_t>()), row_bytes(w.shape[1] / 256 * kBytes) {}
  Block32 block(int64_t row, int64_t b) const {
    const uint8_t* p = data + row * row_bytes + (b / 8) * kBytes;
    const int j = int(b % 8);
    int sc, m;
    q4k_scale_min(j, p + 4, &sc, &m);
    return {nibbles32(p + 16 + 32 * (j / 2), j % 2 == 1), half(p) * float(sc), half(p + 2) * float(m)};
  }
};

// ---- the tile -------------------------------------------------------------------------------
template <typename Fmt, int NT>
void tile(const Fmt& f, const QMatmulArgs& a, const int64_t* rows, int n_rows, int64_t t0) {
  const int64_t k = a.x.k, nb = k / kBlock;
  Acc acc[NT][kRows];
  float off[NT][kRows] = {};
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < kRows; ++r) acc[t][r] = acc_zero();
  const int8_t* xq = a.x.q + t0 * k;
  const float* dx = a.x.d + t0 * nb;
  const float* sx = a.x.s + t0 * nb;
  for (int64_t b = 0; b < nb; ++b) {
    for (int r = 0; r < kRows; ++r) {
      const Block32 w = f.block(rows[r], b);
      for (int t = 0; t < NT; ++t) {
        acc[t][r] = acc_block<Fmt::kSigned>(acc[t][r], w.q, xq + t * k + b * kBlock, w.c * dx[t * nb + b]);
        off[t][r] += w.z * sx[t * nb + b];
      }
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < n_rows; ++r)
      a.out[(t0 + t) * a.m + rows[r]] = acc_sum(acc[t][r]) - off[t][r] + (a.bias ? a.bias[rows[r]] : 0.0f);
}

template <typename Fmt>
void blocks_of(const QMatmulArgs& a, int64_t b0, int64_t b1) {
  const Fmt f(*a.w);
  const int64_t n = a.x.n;
  for (int64_t blk = b0; blk < b1; ++blk) {
    const int64_t r0 = blk * kRows;
    const int n_rows = int(std::min<int64_t>(kRows, a.m - r0));
    int64_t rows[kRows];
    for (int r = 0; r < kRows; ++r) rows[r] = r0 + std::min(r, n_rows - 1);  // a tail repeats its last row
    int64_t t = 0;
    for (; t + kMaxTok <= n; t += kMaxTok) tile<Fmt, kMaxTok>(f, a, rows, n_rows, t);
    switch (n - t) {
      case 0: break;
      case 1: tile<Fmt, 1>(f, a, rows, n_rows, t); break;
      case 2: tile<Fmt, 2>(f, a, rows, n_rows, t); break;
      default: tile<Fmt, 3>(f, a, rows, n_rows, t); break;
    }
  }
}

}  // namespace

int64_t qmatmul_block_rows() { return kRows; }

void qmatmul_w8(const QMatmulArgs& a, int64_t b0, int64_t b1) { blocks_of<FmtW8>(a, b0, b1); }
void qmatmul_w4(const QMatmulArgs& a, int64_t b0, int64_t b1) { blocks_of<FmtW4>(a, b0, b1); }
void qmatmul_q8_0(const QMatmulArgs& a, int64_t b0, int64_t b1) { blocks_of<FmtQ8_0>(a, b0, b1); }
void qmatmul_q4_0(const QMatmulArgs& a, int64_t b0, int64_t b1) { blocks_of<FmtQ4_0>(a, b0, b1); }
void qmatmul_q4_k(const QMatmulArgs& a, int64_t b0, int64_t b1) { blocks_of<FmtQ4_K>(a, b0, b1); }

// Blocks of 32: d = max|x| / 127, q = round(x / d) (ties to even), s = d * sum(q). With
// w4_order the 32 values go evens first, then odds.
void quantize_row(const float* x, int64_t k, bool w4_order, int8_t* q, float* d, float* s) {
  for (int64_t b = 0; b < k / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    float amax = 0;
    for (int i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float db = amax / 127.0f, inv = db > 0 ? 1.0f / db : 0.0f;
    int8_t qb[kBlock];
    int32_t sum = 0;
    for (int i = 0; i < kBlock; ++i) {
      qb[i] = int8_t(std::nearbyint(xb[i] * inv));
      sum += qb[i];
    }
    int8_t* out = q + b * kBlock;
    if (w4_order) {
      for (int i = 0; i < kBlock / 2; ++i) {
        out[i] = qb[2 * i];
        out[kBlock / 2 + i] = qb[2 * i + 1];
      }
    } else {
      std::memcpy(out, qb, kBlock);
    }
    d[b] = db;
    s[b] = db * float(sum);
  }
}

}  // namespace tf::cpu::TF_CPU_ISA_NS

// Float matmul kernel for few tokens: out[n, m] = x[n, k] @ w[m, k]^T (+ bias) for a range
// of weight row blocks (kernels.h, KernelTable::matmul_blocks), used below the prefill
// GEMM's token tile (kernels/gemm.cpp).
//
// Weights are [out, in] as checkpoints store them, so every output is a dot product of two
// contiguous rows. A block is kRows weight rows; the register tile is kTok tokens x kRows
// rows of vector accumulators over k (each loaded weight vector serves kTok tokens, each
// loaded activation vector kRows rows), reduced horizontally once at the end of k.
//  - Decode (n <= kStreamTok): the weights are read in their stored type and BF16/F16 widened in
//    registers. A range of rows is cut in two halves read side by side, one row of each at a
//    time, front to back: each half is one sequential stream (a row continues where the one
//    before it ended), so the hardware prefetchers stay on it, and a software prefetch runs
//    kPrefetch bytes ahead of both. Rows of a kRows block read side by side were as many
//    4 KiB streams that each restarted the prefetchers (the 1B shape's rows are 4 KiB).
//  - Up to kTok tokens: the register tile over a block's whole k, weights as stored.
//  - A few more tokens: k is cut in chunks of kChunk. Per block and chunk, the rows' chunk
//    is widened once to F32 (kRows x kChunk floats: stays in L1) and every token tile runs
//    over it; the tiles' vector accumulators are parked in scratch between chunks, so the
//    FMAs read the weights from L1 and the activations from L2 instead of both from L2.
// A tail block of fewer rows points its missing rows at its last row (results discarded);
// a tail of tokens runs a narrower tile; k past the last full vector is summed as scalars.
#include <algorithm>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/simd.h"
#include "core/error.h"

namespace tf::cpu::TF_CPU_ISA_NS {
namespace {

// Accumulators kTok x kRows plus kRows weight vectors must fit the register file with one
// to spare: 32 vector registers with AVX-512, 16 below it (activations as memory operands).
#if defined(__AVX512F__)
constexpr int kRows = 6, kTok = 4;
#else
constexpr int kRows = 4, kTok = 3;
#endif

constexpr int64_t kChunk = 512;  // k per chunk (prefill): kRows x kChunk floats of weights stay in L1

// Up to this many tokens the two-stream path; from there to kTok the kRows x NT tile, whose
// loaded weight vectors serve 3 or 4 tokens x kRows accumulators (1B-shape prefill of 4 tokens
// 55 tok/s against 51 on the two streams, of 2 tokens 28 against 30).
constexpr int64_t kStreamTok = 2;

// Decode: bytes a software prefetch runs ahead of each of a thread's two streams (docs/PERF.md,
// "Decode as two sequential streams": 512 B to 2 KiB measured within 3% on a 2-core Xeon VM).
constexpr int64_t kPrefetch = 1024;

// The register tile: NT tokens x kRows rows over the vector part of [c0, c0 + len) of k,
// w[r] pointing at element c0 of row r. The accumulators start from `partial` (or zero
// when it is null) and end in `partial` (when keep) or, reduced, in out (+ the scalar tail
// [k_vec, k) of x and w_full, + bias). One function with a local accumulator array, so
// GCC keeps all of it in registers.
struct TileIo {
  float* partial;  // [NT, kRows, kLanes] vector sums of earlier chunks, or null
  bool resume;     // start from partial (else from zero)
  bool keep;       // end in partial (else reduce into out)
};
template <int NT, typename W, typename WF>
inline void tile(const float* x, int64_t k, const W* const* w, int64_t c0, int64_t len, const TileIo& io,
                 const WF* const* w_full, float* out, int64_t ldo, const float* bias, int n_rows) {
  float* partial = io.partial;
  VecF acc[NT][kRows];
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < kRows; ++r) acc[t][r] = io.resume ? load(partial + (t * kRows + r) * kLanes) : VecF{};
  for (int64_t i = 0; i < len; i += kLanes) {
    VecF wv[kRows];
    for (int r = 0; r < kRows; ++r) wv[r] = load_w(w[r] + i);
    for (int t = 0; t < NT; ++t) {
      const VecF xv = load(x + t * k + c0 + i);
      for (int r = 0; r < kRows; ++r) acc[t][r] += xv * wv[r];
    }
  }
  if (io.keep) {
    for (int t = 0; t < NT; ++t)
      for (int r = 0; r < kRows; ++r) store(partial + (t * kRows + r) * kLanes, acc[t][r]);
    return;
  }
  const int64_t k_vec = k / kLanes * kLanes;
  for (int t = 0; t < NT; ++t) {
    for (int r = 0; r < n_rows; ++r) {
      float s = hsum(acc[t][r]);
      for (int64_t i = k_vec; i < k; ++i) s += x[t * k + i] * to_f32(w_full[r][i]);
      out[t * ldo + r] = s + (bias ? bias[r] : 0.0f);
    }
  }
}

// Decode: rows wa and wb (both rows' dot products with NT tokens of x), read front to back
// with U vectors a row per step; out[t * ldo] and out[t * ldo + ob] get the two results.
template <int NT, typename W>
inline void row_pair(const float* x, int64_t k, const W* wa, const W* wb, float* out, int64_t ldo, int64_t ob,
                     bool has_b, float bias_a, float bias_b) {
  static_assert(NT <= kStreamTok);
  constexpr int U = NT == 1 ? 4 : 2;  // accumulators 2 x NT x U
  constexpr int64_t kStep = U * kLanes;
  constexpr int64_t kStepBytes = kStep * int64_t(sizeof(W));
  VecF acc[NT][2][U];
  for (int t = 0; t < NT; ++t)
    for (int s = 0; s < 2; ++s)
      for (int u = 0; u < U; ++u) acc[t][s][u] = VecF{};
  const int64_t k_vec = k / kLanes * kLanes, k_step = k / kStep * kStep;
  const char* pa = reinterpret_cast<const char*>(wa) + kPrefetch;
  const char* pb = reinterpret_cast<const char*>(wb) + kPrefetch;
  int64_t i = 0;
  for (; i < k_step; i += kStep) {
    for (int64_t off = 0; off < kStepBytes; off += 64) {
      __builtin_prefetch(pa + i * int64_t(sizeof(W)) + off);
      __builtin_prefetch(pb + i * int64_t(sizeof(W)) + off);
    }
    for (int u = 0; u < U; ++u) {
      const VecF va = load_w(wa + i + u * kLanes), vb = load_w(wb + i + u * kLanes);
      for (int t = 0; t < NT; ++t) {
        const VecF xv = load(x + t * k + i + u * kLanes);
        acc[t][0][u] += xv * va;
        acc[t][1][u] += xv * vb;
      }
    }
  }
  for (; i < k_vec; i += kLanes) {
    const VecF va = load_w(wa + i), vb = load_w(wb + i);
    for (int t = 0; t < NT; ++t) {
      const VecF xv = load(x + t * k + i);
      acc[t][0][0] += xv * va;
      acc[t][1][0] += xv * vb;
    }
  }
  for (int t = 0; t < NT; ++t) {
    for (int s = 0; s < (has_b ? 2 : 1); ++s) {
      VecF v = acc[t][s][0];
      for (int u = 1; u < U; ++u) v += acc[t][s][u];
      const W* w = s == 0 ? wa : wb;
      float sum = hsum(v);
      for (int64_t j = k_vec; j < k; ++j) sum += x[t * k + j] * to_f32(w[j]);
      out[t * ldo + (s == 0 ? 0 : ob)] = sum + (s == 0 ? bias_a : bias_b);
    }
  }
}

// Decode over rows [r0, r1): the two halves side by side (an odd range's last row alone, its
// partner pointing at it with the result dropped).
template <int NT, typename W>
void stream_rows(const MatmulArgs& a, const float* x, float* out, int64_t r0, int64_t r1) {
  const W* w = static_cast<const W*>(a.w);
  const int64_t half = (r1 - r0 + 1) / 2;
  for (int64_t j = 0; j < half; ++j) {
    const int64_t ra = r0 + j, rb = ra + half;
    const bool has_b = rb < r1;
    const int64_t rb_read = has_b ? rb : ra;
    row_pair<NT>(x, a.k, w + ra * a.k, w + rb_read * a.k, out + ra, a.m, half, has_b, a.bias ? a.bias[ra] : 0.0f,
                 a.bias ? a.bias[rb_read] : 0.0f);
  }
}

// Calls fn.template operator()<NT>(t) over tokens [0, n) in tiles of kTok, then the tail.
template <typename Fn>
inline void for_token_tiles(int64_t n, Fn&& fn) {
  int64_t t = 0;
  for (; t + kTok <= n; t += kTok) fn.template operator()<kTok>(t);
  switch (n - t) {
    case 0: break;
    case 1: fn.template operator()<1>(t); break;
    case 2: fn.template operator()<2>(t); break;
    default:
      if constexpr (kTok > 3) fn.template operator()<3>(t);
  }
}

template <typename W>
void blocks_of(const MatmulArgs& a, int64_t b0, int64_t b1, float* scratch) {
  const W* w = static_cast<const W*>(a.w);
  const int64_t k_vec = a.k / kLanes * kLanes;
  float* wbuf = scratch;                     // [kRows, kChunk]
  float* partial = scratch + kRows * kChunk;  // [n, kRows, kLanes]
  if (a.n <= kStreamTok) {  // decode: two streams, the whole of k, weights as stored
    const int64_t r0 = b0 * kRows, r1 = std::min(a.m, b1 * kRows);
    if (a.n == 1) return stream_rows<1, W>(a, a.x, a.out, r0, r1);
    return stream_rows<2, W>(a, a.x, a.out, r0, r1);
  }
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t r0 = b * kRows;
    const int n_rows = int(std::min<int64_t>(kRows, a.m - r0));
    const W* rows[kRows];
    for (int r = 0; r < kRows; ++r) rows[r] = w + (r0 + std::min(r, n_rows - 1)) * a.k;
    const float* bias = a.bias ? a.bias + r0 : nullptr;
    if (a.n <= kTok) {  // a few tokens: the kRows x NT tile, the whole of k, weights as stored
      for_token_tiles(a.n, [&]<int NT>(int64_t t) {
        tile<NT>(a.x + t * a.k, a.k, rows, 0, k_vec, TileIo{}, rows, a.out + t * a.m + r0, a.m, bias, n_rows);
      });
      continue;
    }
    for (int64_t c0 = 0; c0 < std::max<int64_t>(k_vec, 1); c0 += kChunk) {  // one pass when k < kLanes
      const int64_t len = std::min(kChunk, k_vec - c0);
      const bool first = c0 == 0, last = c0 + kChunk >= k_vec;
      const float* wc[kRows];
      for (int r = 0; r < kRows; ++r) {
        if constexpr (std::is_same_v<W, float>) {
          wc[r] = rows[r] + c0;
        } else {
          float* dst = wbuf + r * kChunk;
          for (int64_t i = 0; i < len; i += kLanes) store(dst + i, load_w(rows[r] + c0 + i));
          wc[r] = dst;
        }
      }
      for_token_tiles(a.n, [&]<int NT>(int64_t t) {
        const TileIo io{.partial = partial + t * kRows * kLanes, .resume = !first, .keep = !last};
        tile<NT>(a.x + t * a.k, a.k, wc, c0, len, io, rows, a.out + t * a.m + r0, a.m, bias, n_rows);
      });
    }
  }
}

}  // namespace

int64_t matmul_block_rows() { return kRows; }

int64_t matmul_scratch_floats(int64_t n, int64_t k) {
  (void)k;
  return kRows * kChunk + n * kRows * kLanes;
}

void matmul_blocks(const MatmulArgs& a, int64_t b0, int64_t b1, float* scratch) {
  switch (a.w_dtype) {
    case DType::F32: return blocks_of<float>(a, b0, b1, scratch);
    case DType::BF16: return blocks_of<Bf16>(a, b0, b1, scratch);
    case DType::F16: return blocks_of<F16>(a, b0, b1, scratch);
    default: TF_ASSERT(false, "matmul: weight dtype {} is not a float type", dtype_name(a.w_dtype));
  }
}

}  // namespace tf::cpu::TF_CPU_ISA_NS

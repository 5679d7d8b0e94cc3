// Float GEMM for prefill (KernelTable::gemm_*): out[n, m] = x[n, k] @ w[m, k]^T (+ bias)
// when n fills at least one token tile.
//
// The activations are transposed once per call into token tiles, xt [n_tiles][k][kTileTokens]
// (gemm_pack_x; the last tile zero-padded), so a vector holds one k element of kLanes
// tokens. The register tile is kRowsG weight rows x kTv vectors of tokens: per k element it
// loads kTv activation vectors and broadcasts each of the kRowsG weights, kRowsG x kTv FMAs
// for kTv + kRowsG loads, the weight broadcasts from L1. For each group of token tiles whose
// transposed activations stay in L2 (kGroupBytes), weights are walked in blocks of kRowsG
// rows and chunks of kChunk along k, kPair blocks at a time: their chunks are widened to F32
// once (row major, kRowsG x kChunk floats each, L1-resident) and every token tile runs over
// them one after the other (its activations read from L2 once for the pair), parking its
// accumulators in scratch between chunks. Nothing is reduced horizontally (a lane is one
// token's output), and k needs no tail: the transposed tiles cover every k element.
// A tail block of fewer rows points its missing rows at its last row (results discarded);
// padded tokens' outputs are not written. Quantized weights (MatmulArgs::wq) are dequantized
// into the chunk instead of widened (dequant.h), at about one operation a weight shared by
// all tokens.
#include <algorithm>

#include "backend/cpu/kernels/dequant.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/simd.h"
#include "core/error.h"

namespace tf::cpu::TF_CPU_ISA_NS {
namespace {

// kRowsG x kTv accumulators, kTv activation vectors and one broadcast weight in registers:
// 27 of 32 with AVX-512, 15 of 16 below it.
#if defined(__AVX512F__)
constexpr int kRowsG = 12, kTv = 2;
#else
constexpr int kRowsG = 6, kTv = 2;
#endif
constexpr int64_t kTileTokens = kTv * kLanes;
// k per chunk: 128 for float weights (the block's chunk and a tile's 128 x kTileTokens activations
// stay in L1: 1B-shape prefill of 64 and 512 tokens 5-12% faster than with 512, docs/PERF.md,
// "The prefill GEMM beside OpenBLAS and oneDNN"); 256 for quantized ones, a multiple of every
// block size (the K types' super-blocks are 256). kMaxChunk, the larger, sizes the scratch.
constexpr int64_t kChunkFloat = 128, kChunkQuant = 256, kMaxChunk = std::max(kChunkFloat, kChunkQuant);
// Token tiles are taken in groups whose transposed activations (all of k) stay in L2 while the
// thread's weight blocks run over them: past that (512 tokens of k = 2048 are 4 MiB) every block
// streamed them from L3 again.
constexpr int64_t kGroupBytes = int64_t(1) << 20;
// Weight blocks whose chunks are widened together and run back to back over each token tile,
// so a tile's activations come from L2 once for kPair blocks (the tile fed from L2 ran 8%
// slower than from L1, docs/PERF.md).
constexpr int kPair = 2;

// Tokens [t0, t0 + kTileTokens) against the block's rows wc[r] (widened, element c0 first)
// over [c0, c0 + len) of k; xt points at element c0 of the tile.
template <bool kResume, bool kKeep>
inline void tile(const float* xt, const float* const* wc, int64_t len, float* partial, const MatmulArgs& a,
                 int64_t t0, int64_t r0, int n_rows) {
  VecF acc[kRowsG][kTv];
  for (int r = 0; r < kRowsG; ++r)
    for (int v = 0; v < kTv; ++v) acc[r][v] = kResume ? load(partial + (r * kTv + v) * kLanes) : VecF{};
  for (int64_t i = 0; i < len; ++i) {
    VecF xv[kTv];
    for (int v = 0; v < kTv; ++v) xv[v] = load(xt + i * kTileTokens + v * kLanes);
    for (int r = 0; r < kRowsG; ++r) {
      const VecF wb = splat(wc[r][i]);
      for (int v = 0; v < kTv; ++v) acc[r][v] += wb * xv[v];
    }
  }
  if constexpr (kKeep) {
    for (int r = 0; r < kRowsG; ++r)
      for (int v = 0; v < kTv; ++v) store(partial + (r * kTv + v) * kLanes, acc[r][v]);
  } else {
    const int64_t n_tok = std::min<int64_t>(kTileTokens, a.n - t0);
    for (int r = 0; r < n_rows; ++r) {
      const float b = a.bias ? a.bias[r0 + r] : 0.0f;
      for (int v = 0; v < kTv; ++v)
        for (int l = 0; l < kLanes && v * kLanes + l < n_tok; ++l)
          a.out[(t0 + v * kLanes + l) * a.m + r0 + r] = acc[r][v][l] + b;
    }
  }
}

// The storage type of quantized weights (a.wq): rows of row_bytes, chunks dequantized.
struct Quant {};

template <typename W>
void blocks_of(const MatmulArgs& a, const float* xt, int64_t b0, int64_t b1, float* scratch) {
  constexpr bool kQuant = std::is_same_v<W, Quant>;
  const auto* w = static_cast<const uint8_t*>(a.w);
  constexpr int64_t kChunk = kQuant ? kChunkQuant : kChunkFloat;
  // Bytes of a row and of the elements before c0 (chunks start at multiples of kChunk, a
  // multiple of every block size).
  const int64_t row_bytes = kQuant ? int64_t(dtype_row_bytes(a.wq->dtype, a.k)) : a.k * int64_t(sizeof(W));
  const auto offset = [&](int64_t c0) {
    return kQuant ? int64_t(dtype_row_bytes(a.wq->dtype, c0)) : c0 * int64_t(sizeof(W));
  };
  const int64_t chunk_bytes = offset(std::min(kChunk, a.k));
  const int64_t n_tiles = (a.n + kTileTokens - 1) / kTileTokens;
  constexpr int64_t kTileFloats = kRowsG * kTv * kLanes;
  float* wbuf = scratch;                               // [kPair, kRowsG, kChunk]
  float* partial = scratch + kPair * kRowsG * kChunk;  // [n_tiles, kPair, kRowsG, kTv, kLanes]
  const int64_t group_tiles = std::max<int64_t>(1, kGroupBytes / (a.k * kTileTokens * int64_t(sizeof(float))));
  for (int64_t tg0 = 0; tg0 < n_tiles; tg0 += group_tiles) {
    const int64_t tg1 = std::min(n_tiles, tg0 + group_tiles);
    for (int64_t bp = b0; bp < b1; bp += kPair) {
      const int nb = int(std::min<int64_t>(kPair, b1 - bp));
      int64_t r0[kPair];
      int n_rows[kPair];
      for (int j = 0; j < nb; ++j) {
        r0[j] = (bp + j) * kRowsG;
        n_rows[j] = int(std::min<int64_t>(kRowsG, a.m - r0[j]));
      }
      for (int64_t c0 = 0; c0 < a.k; c0 += kChunk) {
        const int64_t len = std::min(kChunk, a.k - c0);
        const float* wc[kPair][kRowsG];
        for (int j = 0; j < nb; ++j) {
          for (int r = 0; r < kRowsG; ++r) {
            const int64_t row = r0[j] + std::min(r, n_rows[j] - 1);
            const uint8_t* src_bytes = w + row * row_bytes + offset(c0);
            // The next chunk of this row (or the next pair's), fetched while the tiles run
            // over this one: the weights come from memory once per call.
            const int64_t next_row = row + (c0 + kChunk < a.k ? 0 : nb * kRowsG);
            if (next_row < a.m) {
              const uint8_t* next = w + next_row * row_bytes + (c0 + kChunk < a.k ? offset(c0 + kChunk) : 0);
              for (int64_t i = 0; i < chunk_bytes; i += 64) __builtin_prefetch(next + i);
            }
            float* dst = wbuf + (j * kRowsG + r) * kChunk;
            if constexpr (std::is_same_v<W, float>) {
              wc[j][r] = reinterpret_cast<const float*>(src_bytes);
            } else if constexpr (kQuant) {
              dequant_slice(*a.wq, row, c0, len, dst);
              wc[j][r] = dst;
            } else {
              const W* src = reinterpret_cast<const W*>(src_bytes);
              int64_t i = 0;
              for (; i + kLanes <= len; i += kLanes) store(dst + i, load_w(src + i));
              for (; i < len; ++i) dst[i] = to_f32(src[i]);
              wc[j][r] = dst;
            }
          }
        }
        const bool first = c0 == 0, last = c0 + kChunk >= a.k;
        for (int64_t t = tg0; t < tg1; ++t) {
          const float* xtc = xt + (t * a.k + c0) * kTileTokens;
          const int64_t t0 = t * kTileTokens;
          for (int j = 0; j < nb; ++j) {
            float* p = partial + (t * kPair + j) * kTileFloats;
            if (first && last) tile<false, false>(xtc, wc[j], len, p, a, t0, r0[j], n_rows[j]);
            else if (first) tile<false, true>(xtc, wc[j], len, p, a, t0, r0[j], n_rows[j]);
            else if (last) tile<true, false>(xtc, wc[j], len, p, a, t0, r0[j], n_rows[j]);
            else tile<true, true>(xtc, wc[j], len, p, a, t0, r0[j], n_rows[j]);
          }
        }
      }
    }
  }
}

}  // namespace

int64_t gemm_tile_tokens() { return kTileTokens; }
int64_t gemm_block_rows() { return kRowsG; }
int64_t gemm_scratch_floats(int64_t n) {
  return kPair * kRowsG * kMaxChunk + (n + kTileTokens - 1) / kTileTokens * kPair * kRowsG * kTileTokens;
}

// xt[t][i][j] = x[t * kTileTokens + j][i] for tiles [tile0, tile1), zero past n.
void gemm_pack_x(const float* x, int64_t n, int64_t k, int64_t tile0, int64_t tile1, float* xt) {
  for (int64_t t = tile0; t < tile1; ++t) {
    float* dst = xt + t * k * kTileTokens;
    for (int64_t j = 0; j < kTileTokens; ++j) {
      const int64_t tok = t * kTileTokens + j;
      if (tok < n) {
        const float* src = x + tok * k;
        for (int64_t i = 0; i < k; ++i) dst[i * kTileTokens + j] = src[i];
      } else {
        for (int64_t i = 0; i < k; ++i) dst[i * kTileTokens + j] = 0.0f;
      }
    }
  }
}

void gemm_blocks(const MatmulArgs& a, const float* xt, int64_t b0, int64_t b1, float* scratch) {
  if (a.wq) {
    TF_ASSERT(dequant_slice_covers(a.wq->dtype) && a.k % 32 == 0 && a.k % dtype_block_elems(a.wq->dtype) == 0,
              "gemm: quantized weight dtype {} with k {} unsupported", dtype_name(a.wq->dtype), a.k);
    return blocks_of<Quant>(a, xt, b0, b1, scratch);
  }
  switch (a.w_dtype) {
    case DType::F32: return blocks_of<float>(a, xt, b0, b1, scratch);
    case DType::BF16: return blocks_of<Bf16>(a, xt, b0, b1, scratch);
    case DType::F16: return blocks_of<F16>(a, xt, b0, b1, scratch);
    default: TF_ASSERT(false, "gemm: weight dtype {} is not a float type", dtype_name(a.w_dtype));
  }
}

}  // namespace tf::cpu::TF_CPU_ISA_NS

// The tensor-core kernels for quantized weights (W4, W8, FP8) at small and middle batches:
// out = x @ dequant(w)^T for up to 64 rows per block row (more rows: more block rows, each
// streaming the weights again). Internal to src/backend/cuda: quant_mma_w4.cu, _w8.cu and
// _fp8.cu instantiate it (one file per format so they compile in parallel); quant_gemm.cuh
// declares the launcher.
//
// Why tensor cores for a memory-bound product: dequantizing on the CUDA cores and multiplying
// there costs about five instructions per weight and per input row (unpack, convert, the
// activation's conversion, the FMA), so a W4 GEMV is issue-bound well below the memory's
// speed, and at 2..8 rows more so. Here a weight is dequantized once into a BF16 register
// pair (1.4 to 2.5 instructions per weight, whatever the rows) and one mma.m16n8k16 multiplies
// 16 features x 16 k by up to 8 input rows.
//
// Roles. A (16 x 16, row-major) = 16 output features x 16 k of the weights, dequantized in
// registers; B (16 x 8) = 16 k x 8 input rows (tokens); C (16 x 8, FP32) = features x tokens.
// mma sums over k, so k may be permuted freely as long as A and B share the permutation:
// lane (g = lane / 4, q = lane % 4) reads one 16-byte chunk of features g and g + 8 of a tile
// at k-block kb (4 chunks of E elements: E = 32 for W4, 16 for W8/FP8, so a k-block is 128
// or 64 elements and the four lanes of a quad read 64 contiguous bytes of a row), and the E
// elements of its chunk become the lane's k slots {2q, 2q+1, 2q+8, 2q+9} of E / 4 mma steps,
// in whatever pairing its dequantization produces cheapest:
//   W4:  nibbles j and j + 4 of a 32-bit word, (w >> 4j) & 0x000F000F | BF16 pair (128, 128),
//        are the BF16 integers 128 + code (exact); one packed subtraction of 128 + zero
//        leaves code - zero, exact. Pairs (8w + j, 8w + j + 4).
//   W8:  bytes 0, 2 and 1, 3 of a word: (b & 0x7F) | 128 minus (b & 0x80) | 128 (the sign bit
//        lands on the exponent's lowest bit: 128 or 256) is the int8 value, exact. Pairs
//        (4w, 4w + 2) and (4w + 1, 4w + 3).
//   FP8: bytes 0, 1 and 2, 3 through the hardware's cvt e4m3x2 -> f16x2 (exact: every E4M3
//        value is a normal F16 or zero), then F16 bits to BF16 bits by a shift (exponent into
//        the low bits of BF16's, value x 2^-112) and one exact multiply by 2^112. Pairs
//        (4w, 4w + 1) and (4w + 2, 4w + 3): the activations' own pairs.
// The lane's B registers hold the activations of token g at the same elements: one byte
// permute per register where the pairing is not the memory's (W4, W8).
//
// Scales. W8 and FP8 have one scale per output feature: it multiplies the FP32 sum once, in
// the epilogue. W4's group scale applies per k-block: with a group size that is a multiple
// of 128, a k-block lies in one group for every lane of the quad, so the mma sums code - zero
// (exact) times x into a temporary and `acc += scale * tmp` follows (FP32). Smaller groups
// (32, 64) put the quad's four chunks in different groups, so the scale enters the BF16
// weight itself ((code - zero) * BF16(scale), rounded once to BF16): the kernel's only
// rounding beyond FP32 summation.
//
// Two kernels share this core (the weight ring, mma_kblock):
//   quant_mma_kernel (decode, rows <= 16): a block of KW warps on the same 16 FT features
//     splits k (warp w takes k-blocks w, w + KW, ...), so even a narrow matrix spreads over
//     the GPU; each lane reads its activations from global memory (L1) into registers, one
//     k-block ahead with its weights; the warps' sums meet in shared memory and the block
//     finishes each (feature, token) with the row scale, the bias and the epilogue of
//     gemv.cuh (store_output: Store, AddTo, Swiglu; RopeKv: rope_kv_pair, a block's 16
//     features being 8 rotation pairs of one head), after the RMSNorm prologue if asked.
//   quant_mma_tiled_kernel (rows 9..64 per block row): a block of WF warps on different
//     features shares one tile of activations staged in shared memory (so they cross L2
//     once per block, not once per warp), with deterministic split-K across blocks where the
//     features alone give too few blocks.
#pragma once

#include <algorithm>
#include <atomic>
#include <type_traits>
#include <utility>

#include "backend/cuda/gemv_kernel.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/quant_gemm.cuh"

namespace tf::cuda::qmma {

// Word i of a 16-byte chunk (i a compile-time constant after unrolling).
__device__ __forceinline__ uint32_t word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// A format: elements per 16-byte chunk, the A pairs of mma step s of a chunk (first: k slots
// 2q, 2q + 1; second: 2q + 8, 2q + 9) and the B pairs of the activations at the same
// elements. Steps 2p and 2p + 1 read the p-th 16-byte piece (8 elements) of the chunk's
// activations.
struct W4 {
  static constexpr DType kDType = DType::W4;
  static constexpr int kElems = 32;
  static constexpr bool kRowScale = false;
  __device__ static int64_t row_bytes(int64_t k) { return k / 2; }
  // zz: the BF16 pair (128 + zero, 128 + zero)
  __device__ static void a_pairs(const uint4& w, int s, uint32_t zz, uint32_t& first, uint32_t& second) {
    const uint32_t wd = word(w, s / 2);
    const int j = 2 * (s % 2);  // nibbles j, j + 4 (first) and j + 1, j + 5 (second)
    first = bf16x2_sub(((wd >> (4 * j)) & 0x000F000Fu) | kBf16Pair128, zz);
    second = bf16x2_sub(((wd >> (4 * j + 4)) & 0x000F000Fu) | kBf16Pair128, zz);
  }
  // xp: the 16-byte piece s / 2 of the chunk's activations (elements 8w .. 8w + 7, w = s / 2)
  __device__ static void b_pairs(const uint4& xp, int s, uint32_t& first, uint32_t& second) {
    const uint32_t lo = word(xp, s % 2), hi = word(xp, 2 + s % 2);
    first = prmt(lo, hi, 0x5410);   // elements 8w + j, 8w + j + 4 (the low halves)
    second = prmt(lo, hi, 0x7632);  // 8w + j + 1, 8w + j + 5 (the high halves)
  }
};

struct W8 {
  static constexpr DType kDType = DType::W8;
  static constexpr int kElems = 16;
  static constexpr bool kRowScale = true;
  __device__ static int64_t row_bytes(int64_t k) { return k; }
  __device__ static void a_pairs(const uint4& w, int s, uint32_t, uint32_t& first, uint32_t& second) {
    const uint32_t wd = word(w, s);
    first = int8_pair(wd);        // elements 4s, 4s + 2 (bytes 0 and 2)
    second = int8_pair(wd >> 8);  // 4s + 1, 4s + 3
  }
  __device__ static void b_pairs(const uint4& xp, int s, uint32_t& first, uint32_t& second) {
    const uint32_t lo = word(xp, 2 * (s % 2)), hi = word(xp, 2 * (s % 2) + 1);  // elements 4s .. 4s + 3
    first = prmt(lo, hi, 0x5410);
    second = prmt(lo, hi, 0x7632);
  }
};

struct Fp8 {
  static constexpr DType kDType = DType::FP8;
  static constexpr int kElems = 16;
  static constexpr bool kRowScale = true;
  __device__ static int64_t row_bytes(int64_t k) { return k; }
  __device__ static void a_pairs(const uint4& w, int s, uint32_t, uint32_t& first, uint32_t& second) {
    const uint32_t wd = word(w, s);
    first = e4m3_pair(wd);         // elements 4s, 4s + 1
    second = e4m3_pair(wd >> 16);  // 4s + 2, 4s + 3
  }
  __device__ static void b_pairs(const uint4& xp, int s, uint32_t& first, uint32_t& second) {
    first = word(xp, 2 * (s % 2));
    second = word(xp, 2 * (s % 2) + 1);
  }
};

// ---- pieces shared by both kernels ------------------------------------------------------------

// The weight rows of a lane: features gq and gq + 8 (h = 0, 1) of each of its FT tiles, the
// lane's 16-byte chunk of each k-block (byte 64 kb + 16 q of the row; a k-block is 64 bytes of
// a row in every format), and W4's first group of the row.
template <class F, int FT>
struct LaneRows {
  const uint8_t* ptr[FT][2];
  int64_t group0[FT][2];
  bool ok[FT][2];
  int group_shift;  // W4: log2 of the group size (a power of two: quant_mma_supported)
};

// row_of(f) -> the weight row of the warp's feature f (16 t + gq + 8 h), or -1 past the matrix.
template <class F, int FT, typename RowOf>
__device__ __forceinline__ LaneRows<F, FT> lane_rows(const GemmArgs& g, int gq, int q, RowOf&& row_of) {
  LaneRows<F, FT> rows;
#pragma unroll
  for (int t = 0; t < FT; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = row_of(16 * t + gq + 8 * h), rr = row < 0 ? 0 : row;
      rows.ok[t][h] = row >= 0;
      rows.ptr[t][h] = g.wq.q + rr * F::row_bytes(g.k) + 16 * q;
      rows.group0[t][h] = F::kDType == DType::W4 ? rr * (g.k / g.wq.group_size) : 0;
    }
  rows.group_shift = F::kDType == DType::W4 ? __ffs(g.wq.group_size) - 1 : 0;
  return rows;
}

// One k-block of a lane's weights: the chunks and (W4) each chunk's group scale and zero.
template <int FT>
struct WeightStage {
  uint4 w[FT][2];
  float scale[FT][2];
  uint32_t zz[FT][2];  // BF16 pair (128 + zero)
};

// Weights stream through a ring of shared memory, kStages k-blocks deep per warp, filled by
// cp.async (L2 only: weights are read once), so a warp has kStages - 1 k-blocks of loads in
// flight while it computes one, without holding them in registers. A lane owns the 16-byte
// slots of its chunks: stage s, tile t, half h at ring + ((s FT + t) 2 + h) 512 + 16 lane.
// Each lane reads back only what it copied itself, so the warps need no barrier for it.
// W4's group scale and zero ride along in registers, one set per stage.
template <int FT>
constexpr int ring_stage_bytes() { return FT * 2 * 512; }

template <class F, int FT>
__device__ __forceinline__ void issue_weights(const LaneRows<F, FT>& rows, int64_t kb, uint8_t* slots) {
#pragma unroll
  for (int t = 0; t < FT; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) cp_async_16(smem_addr(slots + (t * 2 + h) * 512), rows.ptr[t][h] + kb * 64, rows.ok[t][h]);
}

template <class F, int FT>
__device__ __forceinline__ void load_group_params(const GemmArgs& g, const LaneRows<F, FT>& rows, int64_t kb, int q,
                                                  WeightStage<FT>& st) {
#pragma unroll
  for (int t = 0; t < FT; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t gi = rows.group0[t][h] + ((kb * 4 * F::kElems + F::kElems * q) >> rows.group_shift);
      st.scale[t][h] = __half2float(__ldg(static_cast<const __half*>(g.wq.scales) + gi));
      const uint32_t z = __ldg(g.wq.zeros + gi);
      st.zz[t][h] = kBf16Pair128 | z | z << 16;
    }
}

template <int FT>
__device__ __forceinline__ void read_weights(const uint8_t* slots, WeightStage<FT>& st) {
#pragma unroll
  for (int t = 0; t < FT; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) st.w[t][h] = *reinterpret_cast<const uint4*>(slots + (t * 2 + h) * 512);
}

// A kStages-deep pipeline over n steps: issue(i, stage) starts step i's copies (and commits
// one cp.async group, also past the end, so the count stays uniform), consume(i, stage) runs
// once step i's group has landed. `stage` is a compile-time constant (std::integral_constant)
// so that register arrays indexed by it stay in registers. The first kStages - 1 issues are
// the caller's (pipeline_prologue), so it can start them before pdl_begin.
template <typename Fn, int... I>
__device__ __forceinline__ void static_for(Fn&& fn, std::integer_sequence<int, I...>) {
  (fn(std::integral_constant<int, I>{}), ...);
}
template <int N, typename Fn>
__device__ __forceinline__ void static_for(Fn&& fn) {
  static_for(fn, std::make_integer_sequence<int, N>{});
}
template <int kStages, typename Issue>
__device__ __forceinline__ void pipeline_prologue(Issue&& issue) {
  static_for<kStages - 1>([&](auto s) { issue(int64_t(s), s); });
}
template <int kStages, typename Issue, typename Consume>
__device__ __forceinline__ void pipeline_run(int64_t n, Issue&& issue, Consume&& consume) {
  for (int64_t i = 0; i < n; i += kStages) {
    static_for<kStages>([&](auto u) {
      if (i + u >= n) return;
      issue(i + u + kStages - 1, std::integral_constant<int, (decltype(u)::value + kStages - 1) % kStages>{});
      cp_async_wait<kStages - 1>();
      consume(i + u, u);
    });
  }
  cp_async_wait<0>();
}

// The mma steps 2p and 2p + 1 of a k-block: weights `st`, activations xp[n] (piece p of token
// tile n's chunk), sums into dst. `ss`: W4 with groups smaller than a k-block, the BF16 pair
// of each chunk's scale (multiplied into the weights); otherwise unused.
template <class F, int FT, int NT>
__device__ __forceinline__ void mma_piece(const WeightStage<FT>& st, int p, const uint4 (&xp)[NT], bool scale_weights,
                                          const uint32_t (&ss)[FT][2], float (&dst)[FT][NT][4]) {
#pragma unroll
  for (int s = 2 * p; s < 2 * p + 2; ++s) {
    uint32_t b[NT][2];
#pragma unroll
    for (int n = 0; n < NT; ++n) F::b_pairs(xp[n], s, b[n][0], b[n][1]);
#pragma unroll
    for (int t = 0; t < FT; ++t) {
      uint32_t a[4];
      F::a_pairs(st.w[t][0], s, st.zz[t][0], a[0], a[2]);
      F::a_pairs(st.w[t][1], s, st.zz[t][1], a[1], a[3]);
      if (F::kDType == DType::W4 && scale_weights) {
        a[0] = bf16x2_mul(a[0], ss[t][0]), a[2] = bf16x2_mul(a[2], ss[t][0]);
        a[1] = bf16x2_mul(a[1], ss[t][1]), a[3] = bf16x2_mul(a[3], ss[t][1]);
      }
#pragma unroll
      for (int n = 0; n < NT; ++n) mma_bf16(dst[t][n], a, b[n][0], b[n][1]);
    }
  }
}

// W4: the BF16 scale pairs of mma_piece, and the sums of a k-block joining the accumulators
// (times the group scale when it was not in the weights). C rows gq (i = 0, 1) and gq + 8
// (i = 2, 3) are features h = 0 and 1.
template <int FT>
__device__ __forceinline__ void scale_pairs(const WeightStage<FT>& st, uint32_t (&ss)[FT][2]) {
#pragma unroll
  for (int t = 0; t < FT; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) ss[t][h] = pack_bf16(st.scale[t][h], st.scale[t][h]);
}
template <int FT, int NT>
__device__ __forceinline__ void add_scaled(const WeightStage<FT>& st, bool scale_weights, float (&tmp)[FT][NT][4],
                                           float (&acc)[FT][NT][4]) {
#pragma unroll
  for (int t = 0; t < FT; ++t)
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        acc[t][n][i] += (scale_weights ? 1.0f : st.scale[t][i / 2]) * tmp[t][n][i];
        tmp[t][n][i] = 0.0f;
      }
}

template <int FT, int NT>
__device__ __forceinline__ void zero(float (&a)[FT][NT][4]) {
#pragma unroll
  for (int t = 0; t < FT; ++t)
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) a[t][n][i] = 0.0f;
}

// One k-block's product into acc, for activations fetched piece by piece by xpiece(p, xp).
template <class F, int FT, int NT, typename XPiece>
__device__ __forceinline__ void mma_kblock(const WeightStage<FT>& st, bool scale_weights, XPiece&& xpiece,
                                           float (&tmp)[FT][NT][4], float (&acc)[FT][NT][4]) {
  constexpr bool kW4 = F::kDType == DType::W4;
  uint32_t ss[FT][2] = {};
  if constexpr (kW4) scale_pairs(st, ss);
#pragma unroll
  for (int p = 0; p < F::kElems / 8; ++p) {
    uint4 xp[NT];
    xpiece(p, xp);
    mma_piece<F, FT, NT>(st, p, xp, scale_weights, ss, kW4 ? tmp : acc);
  }
  if constexpr (kW4) add_scaled(st, scale_weights, tmp, acc);
}

// The per-feature part of the epilogue: row scale (W8, FP8) and bias, for weight row `row`.
template <class F>
__device__ __forceinline__ float finish(const GemmArgs& g, int64_t row, float y) {
  if constexpr (F::kRowScale) y *= static_cast<const float*>(g.wq.scales)[row];
  return g.bias ? y + to_float(g.bias[row]) : y;
}

// ---- the decode kernel: rows <= 16, k split among a block's warps --------------------------------

// RopeKv: the weight row of feature fl (0..15) of block b. A block owns 8 rotation pairs
// (i, i + d / 2) of one head, i = 8 (b % (d / 16)) + fl % 8, the first elements as features
// 0..7 and the second as 8..15 (d a multiple of 16: quant_mma_supported), so that the
// block's reduction holds both elements of each pair.
__device__ __forceinline__ int64_t rope_row(const RopeKvArgs& r, int64_t b, int fl) {
  const int64_t octs = r.head_dim / 16;
  return b / octs * r.head_dim + (fl / 8) * (r.head_dim / 2) + b % octs * 8 + fl % 8;
}

constexpr int kDecodeStages = 4;

// Block: KW warps, all on the same FT tiles (16 FT features; Swiglu: 8 FT gate rows and the
// matching up rows), warp w on k-blocks w, w + KW, ...; NT token tiles (8 NT rows) per block
// row. Weights stream through each warp's ring; activations are read from global memory (L1:
// every warp of the SM reads the same few rows) as each k-block is consumed.
template <class F, int FT, int NT, int KW, bool kNorm, GemvEpilogue kEpi>
__global__ void __launch_bounds__(KW * 32) quant_mma_kernel(GemmArgs g, GemvFusion f) {
  constexpr int E = F::kElems, KB = 4 * E, kPieces = E / 8;
  constexpr int FB = 16 * FT, TB = 8 * NT;   // features and tokens of the block
  constexpr bool kSwiglu = kEpi == GemvEpilogue::Swiglu;
  constexpr bool kRope = kEpi == GemvEpilogue::RopeKv;  // FT = 1: 8 rotation pairs (rope_row)
  static_assert(!kRope || FT == 1, "RopeKv: one 16-feature tile per block");
  constexpr int FO = kSwiglu ? FB / 2 : FB;  // output features of the block
  extern __shared__ uint4 smem[];            // kNorm: normalized x [rows][k / 8]; then the reduction
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gq = lane / 4, q = lane % 4;
  const int64_t k = g.k, n_kb = k / KB, m_out = kSwiglu ? g.m / 2 : g.m;
  const int64_t j0 = int64_t(blockIdx.x) * FO, r0 = int64_t(blockIdx.y) * TB;
  const bool scale_weights = F::kDType == DType::W4 && g.wq.group_size % KB != 0;

  const LaneRows<F, FT> rows = lane_rows<F, FT>(g, gq, q, [&](int fl) -> int64_t {
    if constexpr (kSwiglu) {  // the first FO features are gate rows, the others the matching up rows
      const int64_t jj = j0 + fl % FO;
      return jj >= m_out ? -1 : fl < FO ? jj : m_out + jj;
    }
    if constexpr (kRope) return rope_row(f.rope, blockIdx.x, fl);
    return j0 + fl < g.m ? j0 + fl : -1;
  });

  // Shared memory: the warps' weight rings, then (kNorm) the normalized rows.
  constexpr int R = kDecodeStages;
  uint8_t* const ring = reinterpret_cast<uint8_t*>(smem) + warp * R * ring_stage_bytes<FT>() + 16 * lane;
  const uint4* xsrc =
      kNorm ? reinterpret_cast<const uint4*>(reinterpret_cast<uint8_t*>(smem) + KW * R * ring_stage_bytes<FT>())
            : reinterpret_cast<const uint4*>(g.x);
  float acc[FT][NT][4], tmp[FT][NT][4];
  zero(acc);
  zero(tmp);
  WeightStage<FT> params[R];  // W4: the group scale and zero of each stage in flight

  // Step i of this warp: k-block warp + i KW.
  const int64_t n_mine = warp < n_kb ? (n_kb - 1 - warp) / KW + 1 : 0;
  auto issue = [&](int64_t i, auto stage) {
    if (i < n_mine) {
      const int64_t kb = warp + i * KW;
      issue_weights(rows, kb, ring + stage * ring_stage_bytes<FT>());
      if constexpr (F::kDType == DType::W4) load_group_params(g, rows, kb, q, params[stage]);
    }
    cp_async_commit();
  };
  const uint4* xlane[NT];  // token 8 n + gq of this block row, the lane's chunk of k-block 0
  bool xok[NT];
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const int64_t r = r0 + 8 * n + gq;
    xok[n] = r < g.rows;
    xlane[n] = xsrc + (xok[n] ? (r * k + E * q) / 8 : 0);
  }
  auto consume = [&](int64_t i, auto stage) {
    const int64_t kb = warp + i * KW;
    uint4 x[NT][kPieces];
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int v = 0; v < kPieces; ++v) {
        if (!xok[n])
          x[n][v] = make_uint4(0, 0, 0, 0);
        else if constexpr (kNorm)
          x[n][v] = xlane[n][kb * (KB / 8) + v];
        else
          x[n][v] = __ldg(xlane[n] + kb * (KB / 8) + v);
      }
    WeightStage<FT> w = params[stage];
    read_weights(ring + stage * ring_stage_bytes<FT>(), w);
    mma_kblock<F, FT, NT>(w, scale_weights,
                          [&](int p, uint4(&xp)[NT]) {
#pragma unroll
                            for (int n = 0; n < NT; ++n) xp[n] = x[n][p];
                          },
                          tmp, acc);
  };
  // Weights never change during a launch: their first stages start before pdl_begin.
  pipeline_prologue<R>(issue);
  pdl_begin();
  if constexpr (kNorm) gemv_detail::normalize_rows<4, KW * 32>(g, f, const_cast<uint4*>(xsrc));
  pipeline_run<R>(n_mine, issue, consume);
  __syncthreads();  // the reduction below reuses the rings

  // The KW warps' sums meet in shared memory: red[warp][feature][token].
  float* red = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int t = 0; t < FT; ++t)
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        red[(warp * FB + 16 * t + gq + 8 * (i / 2)) * TB + 8 * n + 2 * q + i % 2] = acc[t][n][i];
  __syncthreads();
  if constexpr (kRope) {  // features fl and fl + 8 are pair fl of rope_row; y rounded to BF16 first
    for (int idx = threadIdx.x; idx < 8 * TB; idx += KW * 32) {
      const int tl = idx / 8, p = idx % 8;
      const int64_t r = r0 + tl, row0 = rope_row(f.rope, blockIdx.x, p);
      if (r >= g.rows) continue;
      float y0 = 0.0f, y1 = 0.0f;
#pragma unroll
      for (int w = 0; w < KW; ++w) {
        y0 += red[(w * FB + p) * TB + tl];
        y1 += red[(w * FB + 8 + p) * TB + tl];
      }
      y0 = to_float(from_float<bf16>(finish<F>(g, row0, y0)));
      y1 = to_float(from_float<bf16>(finish<F>(g, row0 + f.rope.head_dim / 2, y1)));
      const int64_t hd = f.rope.head_dim;
      gemv_detail::rope_kv_pair_any(f.rope, static_cast<bf16*>(g.out), row0 / hd, row0 % hd, int(r), y0, y1);
    }
  } else {
    for (int idx = threadIdx.x; idx < FO * TB; idx += KW * 32) {
      const int tl = idx / FO, fl = idx % FO;  // consecutive threads: consecutive features
      const int64_t j = j0 + fl, r = r0 + tl;
      if (j >= m_out || r >= g.rows) continue;
      float y = 0.0f, y_up = 0.0f;
#pragma unroll
      for (int w = 0; w < KW; ++w) {
        y += red[(w * FB + fl) * TB + tl];
        if constexpr (kSwiglu) y_up += red[(w * FB + FO + fl) * TB + tl];
      }
      y = finish<F>(g, j, y);
      if constexpr (kSwiglu) y_up = finish<F>(g, m_out + j, y_up);
      gemv_detail::store_output<kEpi>(g, m_out, j, r, y, y_up);
    }
  }
}

// ---- the tiled kernel: rows up to 64 per block row, activations through shared memory --------

// Block: WF warps on different features (FT tiles each: 16 FT WF features per block), all on
// the same k-blocks, with the block's 8 NT tokens x k-block of activations staged in shared
// memory by cp.async, kTiledStages deep, and read by every warp (so activations cross L2 once
// per block, not once per warp); each warp's weights stream through its ring as in the
// decode kernel.
//
// Shared layout of one stage: a row per token, pitch KB * 2 + 64 bytes; the 16-byte piece v of
// lane q's chunk (elements E q + 8 v) at 16 (4 v + q): a quarter-warp's reads (two tokens,
// four lanes, one v) then cover all 32 banks once.
//
// Split-K: gridDim.z blocks share a tile, each over a contiguous share of the k-blocks. They
// write FP32 partial sums to `partials` [z][rows][m]; the last to finish (a counter per tile,
// reset by that block for the next launch) adds them in order of z, so the result does not
// depend on timing.
struct SplitK {
  float* partials = nullptr;   // [splits][rows][m]
  uint32_t* counters = nullptr;  // one per (row-block, feature-block), zero between launches
};

template <int E>
constexpr int tiled_pitch() { return 4 * E * 2 + 64; }
template <int E, int NT>
constexpr int tiled_stage_bytes() { return 8 * NT * tiled_pitch<E>(); }
constexpr int kTiledStages = 3;

template <class F, int FT, int NT, int WF>
__global__ void __launch_bounds__(WF * 32) quant_mma_tiled_kernel(GemmArgs g, SplitK split) {
  constexpr int E = F::kElems, KB = 4 * E, kPieces = E / 8;
  constexpr int FB = 16 * FT * WF, TB = 8 * NT, kPitch = tiled_pitch<E>();
  constexpr int kStageBytes = tiled_stage_bytes<E, NT>();
  extern __shared__ __align__(16) uint8_t xt[];  // [kTiledStages][TB][kPitch]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gq = lane / 4, q = lane % 4;
  const int64_t k = g.k, n_kb = k / KB;
  const int64_t f0 = int64_t(blockIdx.x) * FB + warp * 16 * FT, r0 = int64_t(blockIdx.y) * TB;
  const int64_t kb_begin = n_kb * blockIdx.z / gridDim.z, kb_end = n_kb * (blockIdx.z + 1) / gridDim.z;
  const bool scale_weights = F::kDType == DType::W4 && g.wq.group_size % KB != 0;

  const LaneRows<F, FT> rows =
      lane_rows<F, FT>(g, gq, q, [&](int f) -> int64_t { return f0 + f < g.m ? f0 + f : -1; });

  // Shared memory: kTiledStages activation tiles, then the warps' weight rings.
  constexpr int R = kTiledStages;
  uint8_t* const ring = xt + R * kStageBytes + warp * R * ring_stage_bytes<FT>() + 16 * lane;
  float acc[FT][NT][4], tmp[FT][NT][4];
  zero(acc);
  zero(tmp);
  WeightStage<FT> params[R];  // W4: the group scale and zero of each stage in flight

  // Step i: k-block kb_begin + i. Its activations: TB rows x 4 kPieces pieces of 16 bytes,
  // copied by the whole block.
  const int64_t n_steps = kb_end - kb_begin;
  auto issue_x = [&](int64_t kb, auto stage) {
    for (int c = threadIdx.x; c < TB * 4 * kPieces; c += WF * 32) {
      const int tok = c / (4 * kPieces), piece = c % (4 * kPieces);
      const int lq = piece / kPieces, v = piece % kPieces;  // lane q's piece v
      const int64_t r = r0 + tok;
      const bool ok = r < g.rows;
      const bf16* src = g.x + (ok ? r * k + kb * KB + 8 * piece : 0);
      cp_async_16(smem_addr(xt + stage * kStageBytes + tok * kPitch + 16 * (4 * v + lq)), src, ok);
    }
  };
  auto issue_w = [&](int64_t kb, auto stage) {
    issue_weights(rows, kb, ring + stage * ring_stage_bytes<FT>());
    if constexpr (F::kDType == DType::W4) load_group_params(g, rows, kb, q, params[stage]);
  };
  auto issue = [&](int64_t i, auto stage) {
    if (i < n_steps) issue_x(kb_begin + i, stage), issue_w(kb_begin + i, stage);
    cp_async_commit();
  };
  auto consume = [&](int64_t, auto stage) {
    __syncthreads();  // every thread's copies of this stage have landed
    WeightStage<FT> w = params[stage];
    read_weights(ring + stage * ring_stage_bytes<FT>(), w);
    const uint8_t* xs = xt + stage * kStageBytes + gq * kPitch + 16 * q;
    mma_kblock<F, FT, NT>(w, scale_weights,
                          [&](int p, uint4(&xp)[NT]) {
#pragma unroll
                            for (int n = 0; n < NT; ++n)
                              xp[n] = *reinterpret_cast<const uint4*>(xs + 8 * n * kPitch + 64 * p);
                          },
                          tmp, acc);
    __syncthreads();  // the stage is refilled by a later issue
  };
  // The first stages' weights before pdl_begin (weights never change during a launch; they
  // join the first cp.async group, committed with the activations after pdl_begin).
  static_for<R - 1>([&](auto s) {
    if (s < n_steps) issue_w(kb_begin + s, s);
  });
  pdl_begin();
  static_for<R - 1>([&](auto s) {
    if (s < n_steps) issue_x(kb_begin + s, s);
    cp_async_commit();
  });
  pipeline_run<R>(n_steps, issue, consume);

  // C fragment element e of tile (t, n): feature f0 + 16 t + gq + 8 (e / 2), token 8 n + 2 q + e % 2.
  auto each_output = [&](auto&& fn) {
#pragma unroll
    for (int t = 0; t < FT; ++t)
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t j = f0 + 16 * t + gq + 8 * (e / 2), r = r0 + 8 * n + 2 * q + e % 2;
          if (j < g.m && r < g.rows) fn(acc[t][n][e], j, r);
        }
  };
  if (gridDim.z > 1) {
    float* part = split.partials + int64_t(blockIdx.z) * g.rows * g.m;
    each_output([&](float& y, int64_t j, int64_t r) { part[r * g.m + j] = y; });
    __threadfence();
    __syncthreads();
    __shared__ bool last;
    uint32_t* counter = split.counters + blockIdx.y * gridDim.x + blockIdx.x;
    if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == gridDim.z - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    each_output([&](float& y, int64_t j, int64_t r) {
      y = 0.0f;
      for (unsigned z = 0; z < gridDim.z; ++z) y += __ldcg(split.partials + (int64_t(z) * g.rows + r) * g.m + j);
    });
    if (threadIdx.x == 0) *counter = 0;
  }
  each_output([&](float& y, int64_t j, int64_t r) {
    gemv_detail::store_output<GemvEpilogue::Store>(g, g.m, j, r, finish<F>(g, j, y), 0.0f);
  });
}

// ---- launchers ------------------------------------------------------------------------------------

// Shared memory of a decode launch: the weight rings and the normalized rows (kNorm), then
// in their place the warps' partial sums.
template <int FT, int NT, int KW>
size_t smem_bytes(const GemmArgs& g, const GemvFusion& f) {
  const size_t red = size_t(KW) * 16 * FT * 8 * NT * 4;
  const size_t rings = size_t(KW) * kDecodeStages * ring_stage_bytes<FT>();
  const size_t norm = f.norm_w ? size_t(g.rows) * size_t(g.k) * 2 : 0;
  return std::max(red, rings + norm);
}

// Kernels whose shared memory may pass 48 KB say so once per device.
template <typename Kernel>
void allow_smem(Kernel kernel, std::atomic<uint64_t>& done, int bytes) {
  once_per_device(done, [&] {
    TF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  });
}

template <class F, int FT, int NT, int KW, bool kNorm, GemvEpilogue kEpi>
void launch_tile(const GemmArgs& g, const GemvFusion& f, cudaStream_t stream) {
  constexpr int FO = kEpi == GemvEpilogue::Swiglu ? 8 * FT : 16 * FT;
  const int64_t m_out = kEpi == GemvEpilogue::Swiglu ? g.m / 2 : g.m;
  const dim3 grid(unsigned((m_out + FO - 1) / FO), unsigned((g.rows + 8 * NT - 1) / (8 * NT)));
  static std::atomic<uint64_t> attr_done{0};
  auto kernel = quant_mma_kernel<F, FT, NT, KW, kNorm, kEpi>;
  // the largest it can be: rings, and the normalized rows of the GEMV's limit
  allow_smem(kernel, attr_done, int(KW * kDecodeStages * ring_stage_bytes<FT>() + (kNorm ? kGemvNormMaxBytes : 0)));
  launch_pdl(kernel, grid, dim3(KW * 32), smem_bytes<FT, NT, KW>(g, f), stream, g, f);
}

// The fused variants exist for rows <= 8 (NT = 1) and the tiles below; everything else is a
// plain product (Store).
template <class F, int FT, int KW>
void launch_decode(const GemmArgs& g, const GemvFusion& f, int nt, cudaStream_t stream) {
  using E = GemvEpilogue;
  if (nt == 2) {
    if constexpr (FT <= 2) launch_tile<F, FT, 2, KW, false, E::Store>(g, f, stream);
    return;
  }
  if (f.norm_w) {
    if (f.epilogue == E::Swiglu) {
      launch_tile<F, FT, 1, KW, true, E::Swiglu>(g, f, stream);
    } else if (f.epilogue == E::RopeKv) {
      if constexpr (FT == 1) launch_tile<F, FT, 1, KW, true, E::RopeKv>(g, f, stream);
    } else {
      launch_tile<F, FT, 1, KW, true, E::Store>(g, f, stream);
    }
    return;
  }
  switch (f.epilogue) {
    case E::AddTo: launch_tile<F, FT, 1, KW, false, E::AddTo>(g, f, stream); break;
    case E::RopeKv:
      if constexpr (FT == 1) launch_tile<F, FT, 1, KW, false, E::RopeKv>(g, f, stream);
      break;
    case E::Swiglu: launch_tile<F, FT, 1, KW, false, E::Swiglu>(g, f, stream); break;
    default: launch_tile<F, FT, 1, KW, false, E::Store>(g, f, stream); break;
  }
}

template <class F, int FT, int NT, int WF>
void launch_tiled_nt(const GemmArgs& g, int splits, const SplitK& sk, cudaStream_t stream) {
  static std::atomic<uint64_t> attr_done{0};
  constexpr int kSmem = kTiledStages * (tiled_stage_bytes<F::kElems, NT>() + WF * ring_stage_bytes<FT>());
  auto kernel = quant_mma_tiled_kernel<F, FT, NT, WF>;
  allow_smem(kernel, attr_done, kSmem);
  const dim3 grid(unsigned((g.m + 16 * FT * WF - 1) / (16 * FT * WF)), unsigned((g.rows + 8 * NT - 1) / (8 * NT)),
                  unsigned(splits));
  launch_pdl(kernel, grid, dim3(WF * 32), kSmem, stream, g, sk);
}

template <class F, int FT, int WF>
void launch_tiled(const GemmArgs& g, int nt, int splits, const SplitK& sk, cudaStream_t stream) {
  switch (nt) {
    case 2: launch_tiled_nt<F, FT, 2, WF>(g, splits, sk, stream); break;
    case 4: launch_tiled_nt<F, FT, 4, WF>(g, splits, sk, stream); break;
    default: launch_tiled_nt<F, FT, 8, WF>(g, splits, sk, stream); break;
  }
}

// What quant_gemm.cu decided for one launch.
struct Plan {
  QuantMmaTile tile;
  int nt;      // token tiles of 8 per block row
  int splits;  // tiled kernel: blocks along k
  SplitK split;
};

// The launcher of one format.
template <class F>
void launch_format(const GemmArgs& g, const GemvFusion& f, const Plan& p, cudaStream_t stream) {
  switch (p.tile) {
    case QuantMmaTile::F16K16: launch_decode<F, 1, 16>(g, f, p.nt, stream); break;
    case QuantMmaTile::F16K8: launch_decode<F, 1, 8>(g, f, p.nt, stream); break;
    case QuantMmaTile::F16K4: launch_decode<F, 1, 4>(g, f, p.nt, stream); break;
    case QuantMmaTile::F32K8: launch_decode<F, 2, 8>(g, f, p.nt, stream); break;
    case QuantMmaTile::F64K4: launch_decode<F, 4, 4>(g, f, p.nt, stream); break;
    case QuantMmaTile::T64: launch_tiled<F, 1, 4>(g, p.nt, p.splits, p.split, stream); break;
    case QuantMmaTile::T128: launch_tiled<F, 2, 4>(g, p.nt, p.splits, p.split, stream); break;
    case QuantMmaTile::Auto: break;
  }
}

// quant_mma_w4.cu, quant_mma_w8.cu, quant_mma_fp8.cu: launch_format of each format.
void launch_w4(const GemmArgs& g, const GemvFusion& f, const Plan& p, cudaStream_t stream);
void launch_w8(const GemmArgs& g, const GemvFusion& f, const Plan& p, cudaStream_t stream);
void launch_fp8(const GemmArgs& g, const GemvFusion& f, const Plan& p, cudaStream_t stream);

}  // namespace tf::cuda::qmma

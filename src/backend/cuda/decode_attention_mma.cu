// Paged decode attention on tensor cores (head_dim 64, 128 or 256, up to 8 query heads per kv
// head) for BF16 pools and for the scaled INT8 and FP8 pools (one F32 scale per row): the same
// contract and split/workspace format as the CUDA-core kernel of decode_attention.cu, which
// serves the other pools and groups.
//
// Why: the CUDA-core kernel scores one key at a time per lane group (a shuffle reduction and
// two exponentials per key and head); at batch 32 it ran at ~11% of the DRAM bandwidth (ncu:
// 35 us per layer for 10 MB of K/V), and with FP8 pools at batch 64 and 256 it took twice the
// time of this kernel on BF16 pools of twice the bytes. Here the query heads of one kv head
// are the rows of an m16n8k16 tile (GQA packing: rows 0..group-1 are the heads, the rest
// zero), so a key tile costs a handful of mma instructions and the kernel streams K/V.
//
// Grid (decode item, kv head, split), 4 warps. The split's keys go through shared memory
// in tiles of kTileKeys = 64 (cp.async, 16-byte copies, double-buffered: tile j + 1 loads
// while tile j is used). A scaled pool's tile stays in shared memory as its 8-bit codes and
// row scales; ldmatrix reads the codes as 16-bit words and each lane converts its fragment's
// codes to BF16 codes in registers (exact: every INT8 and E4M3 value is a BF16 value), with
// the dims of each k16 step of Q K^T and the dims of O permuted to the order the codes arrive
// in. The scales enter as factors: a key's score is ks * (q . k_codes), and its
// weight for V is p * vs, so V's codes are multiplied as stored. Warp w owns keys 16w..16w+15
// of every tile and keeps its own online softmax state (m, l, O for the 16 rows) in registers:
//   S = Q K^T (scores of its 16 keys, FP32), masked keys -inf, scaled by scale * log2(e);
//   m' = max(m, rowmax S), p = 2^(S - m'), l' = l 2^(m - m') + rowsum p, O = O 2^(m - m') + P V
// with P rounded to BF16 for the product (l sums the FP32 p, as FlashAttention does). At the
// end the four warps' states are merged in shared memory:
//   M = max m_w, L = sum l_w 2^(m_w - M), A = sum O_w 2^(m_w - M), out = A / L,
// written to `out` (one split) or, with M in natural-log units, to the workspace for
// combine_kernel (decode_attention.cu). With kCluster the splits of an (item, kv head) are one
// thread block cluster (grid z = cluster z = n_splits <= kDecodeClusterMax): each block leaves
// its merged state (M in log2 units, L, A) in its own shared memory, and after a cluster
// barrier block r merges elements r, r + n, ... of all of them through distributed shared
// memory into `out`, the same sums as combine_kernel without the workspace round trip and the
// second kernel; a second barrier keeps every block's state alive until all have read it.
//
// Invariants: a row whose keys are all masked so far keeps m = -inf, l = 0, O = 0 (the
// exponent's base is 0 while m' = -inf, so no NaN); masked or missing keys (past the split,
// block-table entry -1) are zero-filled in shared memory (codes and scales) and score -inf.
// Padding rows (>= group) have zero queries and are never written.
#include "backend/cuda/attention.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_split.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma.cuh"

#include <cooperative_groups.h>

#include <type_traits>

namespace tf::cuda {
namespace {

constexpr int kWarps = 4, kTileKeys = 64, kWarpKeys = kTileKeys / kWarps;
constexpr int32_t kStagedBlocks = kDecodeStagedBlocks;
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
static_assert(kWarpKeys == 16, "a warp's keys are one k16 step of the P V product");

// Element types of the pools this kernel reads; kScaled: 8-bit codes with a row scale.
template <typename KvT>
constexpr bool kScaled = !std::is_same_v<KvT, bf16>;

// The tiles of one buffer pair: BF16 rows (kLd elements apart) or 8-bit codes (kRawLd bytes
// apart, so 8 consecutive rows start in distinct banks for ldmatrix) with their row scales.
template <int kD, bool kQuant>
struct DecodeTiles {
  static constexpr int kLd = kD + 8;
  alignas(16) bf16 k[2][kTileKeys * kLd];
  alignas(16) bf16 v[2][kTileKeys * kLd];
};
template <int kD>
struct DecodeTiles<kD, true> {
  static constexpr int kRawLd = kD + 16;
  alignas(16) uint8_t k[2][kTileKeys * kRawLd];
  alignas(16) uint8_t v[2][kTileKeys * kRawLd];
  float k_scale[2][kTileKeys], v_scale[2][kTileKeys];
};

template <int kD, bool kQuant>
struct DecodeSmem {
  static constexpr int kLd = kD + 8;  // BF16 row stride: 8 consecutive rows start in distinct banks
  struct SplitState {                 // kCluster: this split's merged state, read by the cluster
    float m[8], l[8], a[8][kD];
  };
  union {
    alignas(16) bf16 q[16 * kLd];  // read at every key tile, until the loop's last barrier
    SplitState split;              // written after the last
  };
  static_assert(sizeof(SplitState) <= sizeof(bf16) * 16 * kLd, "the split state fits in q's place");
  union {
    DecodeTiles<kD, kQuant> tiles;
    float o[kWarps][8][kD];  // the warps' O rows for the merge (after the last tile)
  };
  float m[kWarps][8], l[kWarps][8];
  int32_t blocks[kStagedBlocks];
  uint8_t valid[2][kTileKeys];
};

// 8-bit codes to BF16 pairs in registers. An INT8 pair is bytes 0 and 2 of a word, an E4M3
// pair the low 16 bits, so a word of four codes c0 c1 c2 c3 gives
//   INT8: (c0, c2) and (c1, c3);   E4M3: (c0, c1) and (c2, c3).
// K fragments take the pairs as they come and Q's fragments are ordered to match (kk below);
// V fragments need (c0, c2) and (c1, c3), so E4M3 words are reordered first.
__device__ __forceinline__ void code_pairs(int8_t, uint32_t w, uint32_t& first, uint32_t& second) {
  first = int8_pair(w);
  second = int8_pair(w >> 8);
}
__device__ __forceinline__ void code_pairs(fp8_e4m3, uint32_t w, uint32_t& first, uint32_t& second) {
  first = e4m3_pair(w);
  second = e4m3_pair(w >> 16);
}
__device__ __forceinline__ void code_pairs_02_13(int8_t, uint32_t w, uint32_t& first, uint32_t& second) {
  code_pairs(int8_t{}, w, first, second);
}
__device__ __forceinline__ void code_pairs_02_13(fp8_e4m3, uint32_t w, uint32_t& first, uint32_t& second) {
  code_pairs(fp8_e4m3{}, prmt(w, 0, 0x3120), first, second);
}

// The dimension held by column `col` (0..7) of O's n8 tile `n` for a scaled pool: n = 4j + 2h
// + p covers dims 32j + 16h + 2 col + p (the V fragments' order, see the P V product).
__device__ __forceinline__ int scaled_o_dim(int n, int col) { return 32 * (n / 4) + 16 * ((n / 2) % 2) + 2 * col + n % 2; }

// kCluster: merges the cluster's split states (each block's sm.split) into out; every block of
// the cluster calls it once.
template <int kD, typename Smem>
__device__ __forceinline__ void merge_cluster_splits(const PagedAttentionArgs& a, Smem& sm, int32_t it, int64_t kvh,
                                                     int group) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every split's state is in its block's shared memory
  const int n = int(cluster.num_blocks()), r = int(cluster.block_rank());
  for (int i = r * int(blockDim.x) + int(threadIdx.x); i < group * kD; i += n * int(blockDim.x)) {
    const int g = i / kD, d = i % kD;
    float mx = -INFINITY;
    for (int b = 0; b < n; ++b) mx = fmaxf(mx, cluster.map_shared_rank(sm.split.m, b)[g]);
    float sum_l = 0.0f, sum_a = 0.0f;
    for (int b = 0; b < n; ++b) {
      const float mb = cluster.map_shared_rank(sm.split.m, b)[g];
      if (mb == -INFINITY) continue;
      const float w = exp2f(mb - mx);
      sum_l += cluster.map_shared_rank(sm.split.l, b)[g] * w;
      sum_a += cluster.map_shared_rank(&sm.split.a[0][0], b)[g * kD + d] * w;
    }
    a.out[int64_t(it) * a.n_heads * kD + (kvh * group + g) * kD + d] = from_float<bf16>(sum_a / sum_l);
  }
  cluster.sync();  // no block leaves while another still reads its shared memory
}

// Blocks an SM the compiler is held to. An 8-bit pool's block at head_dim <= 128 has 43 KB of
// shared memory, so registers decide whether 4 fit: both 8-bit forms take more than 128 unbound
// (3 blocks an SM; E4M3 131 since the early reads, 126 before them) and 122 bound. Bound, FP8
// decode at batch 64 runs 1.6-2.2% below the 126-register kernel without early reads (H200);
// E4M3 at 131 unbound has not been timed. BF16 pools (73 KB a block) fit 3 an SM whatever the
// registers. docs/PERF.md, "Decode attention on 8-bit pools: four blocks an SM" and "Decode
// attention reading older keys before the wait".
template <typename KvT, int kD>
constexpr int kMinBlocks = kScaled<KvT> && kD <= 128 ? 4 : 1;

template <typename KvT, int kD, bool kCluster>
__global__ void __launch_bounds__(kWarps * 32, (kMinBlocks<KvT, kD>))
    decode_attention_mma_kernel(PagedAttentionArgs a) {
  constexpr bool kQuant = kScaled<KvT>;
  using Smem = DecodeSmem<kD, kQuant>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  constexpr int kLd = Smem::kLd, kChunks = kD / 8;
  // 16-byte copies per K/V row: BF16 8 values each, 8-bit codes 16
  constexpr int kCopies = kQuant ? kD / 16 : kChunks;

  // The batch metadata and block tables are uploaded before the step and never written by a
  // kernel, and the keys before the sequence's first position of this step were written by
  // earlier steps: with a.decode_early_keys all of them are read before griddepcontrol.wait
  // (under PDL, while the previous kernel, which writes the query and this step's keys, still
  // runs); the query and this step's keys after it.
  const bool early = a.decode_early_keys;
  if (!early) pdl_begin();
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int32_t s = a.batch.decode_seqs[blockIdx.x];
  const int64_t kvh = blockIdx.y;
  const int32_t split = int32_t(blockIdx.z);
  const int group = int(a.n_heads / a.n_kv_heads);
  const DecodeKeys keys = decode_keys(a, int32_t(blockIdx.x), split);
  const int32_t it = keys.it, k_begin = keys.k_begin, k_end = keys.k_end;
  if (k_begin >= k_end) {  // past this sequence's keys (uniform over the block)
    if (early) pdl_begin();
    if constexpr (kCluster) {
      if (tid < 8) sm.split.m[tid] = -INFINITY, sm.split.l[tid] = 0.0f;
      merge_cluster_splits<kD>(a, sm, it, kvh, group);
    } else {
      mark_split_empty(a, kvh, split);
    }
    return;
  }
  const int32_t* table = a.batch.block_tables + int64_t(s) * a.batch.max_blocks;
  const KvT* k_pool = static_cast<const KvT*>(a.k_pool);
  const KvT* v_pool = static_cast<const KvT*>(a.v_pool);
  const int32_t bs = int32_t(a.block_size);
  // Keys from this position on are written by this step (the previous kernel); without
  // early reads every key is copied after the wait, as an older one.
  const int32_t first_new = early ? a.batch.positions[a.batch.seq_starts[s]] : INT32_MAX;

  // ---- the split's block ids
  const int32_t b_first = k_begin / bs, b_last = (k_end - 1) / bs;
  const bool staged = b_last - b_first < kStagedBlocks;
  if (staged)
    for (int32_t i = tid; i <= b_last - b_first; i += kWarps * 32) sm.blocks[i] = table[b_first + i];
  __syncthreads();

  // The keys of tile `t` at positions [lo, hi) into buffer `buf` (one cp.async group):
  // thread tid copies 16-byte piece tid % kCopies of keys tid / kCopies + j * (threads /
  // kCopies) (cp.async.cg: through L2 only), and a scaled pool's row scales. Keys past the
  // split are zero-filled.
  auto issue = [&](int32_t t, int buf, int32_t lo = INT32_MIN, int32_t hi = INT32_MAX) {
    constexpr int kKeyStep = kWarps * 32 / kCopies;
    const int c = tid % kCopies;
    for (int j = tid / kCopies; j < kTileKeys; j += kKeyStep) {
      const int32_t kp = k_begin + t * kTileKeys + j;
      if (kp < lo || kp >= hi) continue;
      int32_t block = -1;
      if (kp < k_end) block = staged ? sm.blocks[kp / bs - b_first] : table[kp / bs];
      const bool ok = block >= 0;
      const int64_t row = ok ? (int64_t(block) * a.n_kv_heads + kvh) * bs + kp % bs : 0;
      if constexpr (kQuant) {
        constexpr int kRawLd = DecodeTiles<kD, true>::kRawLd;
        cp_async_16(smem_addr(sm.tiles.k[buf] + j * kRawLd + c * 16), k_pool + row * kD + c * 16, ok);
        cp_async_16(smem_addr(sm.tiles.v[buf] + j * kRawLd + c * 16), v_pool + row * kD + c * 16, ok);
        if (c == 0 && kp >= first_new) {
          // A key of this step: its scales' line may sit in this SM's L1 from a read before
          // the wait (the older keys of its block), so they come from L2.
          sm.tiles.k_scale[buf][j] = ok ? __ldcg(a.k_scale + row) : 0.0f;
          sm.tiles.v_scale[buf][j] = ok ? __ldcg(a.v_scale + row) : 0.0f;
        } else if (c == 0) {
          cp_async_4(smem_addr(&sm.tiles.k_scale[buf][j]), a.k_scale + row, ok);
          cp_async_4(smem_addr(&sm.tiles.v_scale[buf][j]), a.v_scale + row, ok);
        }
      } else {
        cp_async_16(smem_addr(sm.tiles.k[buf] + j * kLd + c * 8), k_pool + row * kD + c * 8, ok);
        cp_async_16(smem_addr(sm.tiles.v[buf] + j * kLd + c * 8), v_pool + row * kD + c * 8, ok);
      }
      if (c == 0) sm.valid[buf][j] = ok;
    }
    cp_async_commit();
  };
  // Tile 0 in two groups: the earlier steps' keys, then, after the wait, this step's (the
  // loop's first wait covers both).
  issue(0, 0, INT32_MIN, first_new);
  if (early) pdl_begin();

  // ---- Q rows (the group's heads; zero padding rows), visible after the loop's first barrier
  const bf16* qrow = a.qkv + int64_t(it) * (a.n_heads + 2 * a.n_kv_heads) * kD + kvh * group * kD;
  for (int i = tid; i < 16 * kChunks; i += kWarps * 32) {
    const int r = i / kChunks, c = i % kChunks;
    const uint4 z{0, 0, 0, 0};
    *reinterpret_cast<uint4*>(sm.q + r * kLd + c * 8) =
        r < group ? *reinterpret_cast<const uint4*>(qrow + r * kD + c * 8) : z;
  }
  issue(0, 0, first_new, INT32_MAX);
  const int32_t n_tiles = (k_end - k_begin + kTileKeys - 1) / kTileKeys;

  // Q's A fragment of k16 step kk, read from shared memory at every key tile rather than held
  // (32 registers at head_dim 128 freed: see the launch bounds). BF16 pools: ldmatrix (matrix m
  // holds rows (m % 2) * 8.., dims (m / 2) * 8..). Scaled pools: the k16 step kk's slots 2q,
  // 2q+1 | 2q+8, 2q+9 (q = lane % 4) hold the dims whose K codes code_pairs gives a lane:
  // 16 kk + 4q + {0, 1 | 2, 3} for E4M3 and 16 kk + 4q + {0, 2 | 1, 3} for INT8 (a dot
  // product may take its terms in any order).
  const int mi = lane / 8, mr = lane % 8;
  auto q_frag = [&](int kk, uint32_t(&f)[4]) {
    if constexpr (kQuant) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // rows lane / 4 and lane / 4 + 8
        const bf16* qr = sm.q + (lane / 4 + 8 * h) * kLd + kk * 16 + 4 * (lane % 4);
        const uint32_t lo = *reinterpret_cast<const uint32_t*>(qr), hi = *reinterpret_cast<const uint32_t*>(qr + 2);
        const bool int8 = std::is_same_v<KvT, int8_t>;
        f[h] = int8 ? prmt(lo, hi, 0x5410) : lo;
        f[2 + h] = int8 ? prmt(lo, hi, 0x7632) : hi;
      }
    } else {
      ldsm_x4(f, smem_addr(sm.q + ((mi % 2) * 8 + mr) * kLd + kk * 16 + (mi / 2) * 8));
    }
  };

  const float scale2 = a.scale * kLog2e;
  float o[kD / 8][4];
#pragma unroll
  for (int n = 0; n < kD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // rows lane/4 and lane/4 + 8
  const int key0 = warp * kWarpKeys;
  // Scaled pools: the byte of a code tile where this lane's ldmatrix row starts (K and V alike).
  [[maybe_unused]] const int code_lane =
      (key0 + (mi % 2) * 8 + mr) * DecodeTiles<kD, true>::kRawLd + (mi / 2) * 16;

  for (int32_t t = 0; t < n_tiles; ++t) {
    const int buf = t & 1;
    if (t + 1 < n_tiles) {
      issue(t + 1, buf ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    // S = Q K^T for keys key0..key0+15: two n8 tiles.
    float sc[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
    if constexpr (kQuant) {
      // ldmatrix on the codes (16 per matrix row): matrix m holds keys (m % 2) * 8.., bytes
      // 32 j + (m / 2) * 16..; lane (g, q) gets codes 4q..4q+3 of key g, i.e. the B pairs of
      // k16 step 2j + m / 2 for n tile m % 2.
      const uint8_t* kt = sm.tiles.k[buf] + code_lane;
#pragma unroll
      for (int j = 0; j < kD / 32; ++j) {
        uint32_t r[4], q[2][4];
        ldsm_x4(r, smem_addr(kt + 32 * j));
        q_frag(2 * j, q[0]);
        q_frag(2 * j + 1, q[1]);
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          uint32_t b0, b1;
          code_pairs(KvT{}, r[m], b0, b1);
          mma_bf16(sc[m % 2], q[m / 2], b0, b1);
        }
      }
    } else {
      // ldmatrix: matrix m holds keys (m / 2) * 8.., dims (m % 2) * 8..
      const bf16* kt = sm.tiles.k[buf];
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        uint32_t b[4], q[4];
        ldsm_x4(b, smem_addr(kt + (key0 + (mi / 2) * 8 + mr) * kLd + kk * 16 + (mi % 2) * 8));
        q_frag(kk, q);
        mma_bf16(sc[0], q, b[0], b[1]);
        mma_bf16(sc[1], q, b[2], b[3]);
      }
    }

    // Online softmax of this warp's 16 keys; lane holds keys key0 + n * 8 + 2 (lane % 4) + e
    // of rows lane / 4 (sc[n][e]) and lane / 4 + 8 (sc[n][2 + e]).
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = key0 + n * 8 + 2 * (lane % 4) + e;
        const bool ok = sm.valid[buf][key];
        float ks = scale2;
        if constexpr (kQuant) ks *= sm.tiles.k_scale[buf][key];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float& x = sc[n][2 * r + e];
          x = ok ? x * ks : -INFINITY;
          mx[r] = fmaxf(mx[r], x);
        }
      }
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(m_run[r], mx[r]);
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // all masked so far: p = 0, no NaN
      corr[r] = exp2f(m_run[r] - base);
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = sc[n][2 * r + e];
          x = exp2f(x - base);
          sum += x;
        }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      l_run[r] = l_run[r] * corr[r] + sum;
      m_run[r] = m_new;
    }
    if constexpr (kQuant) {  // V's row scales weigh the probabilities (after l took them)
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float vs = sm.tiles.v_scale[buf][key0 + n * 8 + 2 * (lane % 4) + e];
          sc[n][e] *= vs;
          sc[n][2 + e] *= vs;
        }
    }

    // O = O * corr + P V: P (16 rows x these 16 keys) is one A fragment (slot i = key key0 + i).
    const uint32_t pa[4] = {pack_bf16(sc[0][0], sc[0][1]), pack_bf16(sc[0][2], sc[0][3]),
                            pack_bf16(sc[1][0], sc[1][1]), pack_bf16(sc[1][2], sc[1][3])};
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) {
      o[n][0] *= corr[0];
      o[n][1] *= corr[0];
      o[n][2] *= corr[1];
      o[n][3] *= corr[1];
    }
    if constexpr (kQuant) {
      // Transposed ldmatrix on the codes: matrix m holds keys (m % 2) * 8.., bytes 32 j +
      // (m / 2) * 16..; lane (g, q) gets keys 2q, 2q+1 at codes 2g, 2g+1 (one 16-bit word
      // each), so code_pairs_02_13 gives the B pair of keys 2q, 2q+1 (m even: b0; odd: b1) at
      // dim 2g (n tile 4j + 2 (m / 2)) and at dim 2g + 1 (the next n tile): scaled_o_dim.
      const uint8_t* vt = sm.tiles.v[buf] + code_lane;
#pragma unroll
      for (int j = 0; j < kD / 32; ++j) {
        uint32_t r[4];
        ldsm_x4_trans(r, smem_addr(vt + 32 * j));
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          uint32_t even0, odd0, even1, odd1;
          code_pairs_02_13(KvT{}, r[2 * h], even0, odd0);
          code_pairs_02_13(KvT{}, r[2 * h + 1], even1, odd1);
          mma_bf16(o[4 * j + 2 * h], pa, even0, even1);
          mma_bf16(o[4 * j + 2 * h + 1], pa, odd0, odd1);
        }
      }
    } else {
      // V B fragments via transposed ldmatrix (matrix m holds keys (m % 2) * 8.., dims (m / 2) * 8..)
      const bf16* vt = sm.tiles.v[buf];
#pragma unroll
      for (int n = 0; n < kD / 16; ++n) {
        uint32_t b[4];
        ldsm_x4_trans(b, smem_addr(vt + (key0 + (mi % 2) * 8 + mr) * kLd + n * 16 + (mi / 2) * 8));
        mma_bf16(o[2 * n], pa, b[0], b[1]);
        mma_bf16(o[2 * n + 1], pa, b[2], b[3]);
      }
    }
    __syncthreads();  // the buffer is refilled by the next iteration's issue
  }

  // ---- merge the warps' states (rows < group live in lanes 0..4 * group - 1, row lane / 4)
  const int row = lane / 4;
  if (row < group) {
    if (lane % 4 == 0) {
      sm.m[warp][row] = m_run[0];
      sm.l[warp][row] = l_run[0];
    }
#pragma unroll
    for (int n = 0; n < kD / 8; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = 2 * (lane % 4) + e;
        sm.o[warp][row][kQuant ? scaled_o_dim(n, col) : n * 8 + col] = o[n][e];
      }
  }
  __syncthreads();
  for (int i = tid; i < group * kD; i += kWarps * 32) {
    const int g = i / kD, d = i % kD;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, sm.m[w][g]);
    float sum_l = 0.0f, sum_a = 0.0f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float wt = exp2f(sm.m[w][g] - mx);
        sum_l += sm.l[w][g] * wt;
        sum_a += sm.o[w][g][d] * wt;
      }
    }
    if constexpr (kCluster) {  // m in log2 units, as merge_cluster_splits weighs them
      sm.split.a[g][d] = sum_a;
      if (d == 0) sm.split.m[g] = mx, sm.split.l[g] = sum_l;
    } else {  // m in log2 units here; combine_kernel weighs splits by exp(m - M)
      store_split(a, it, kvh * group + g, split, d, mx * kLn2, sum_l, sum_a);
    }
  }
  if constexpr (kCluster) merge_cluster_splits<kD>(a, sm, it, kvh, group);
}

template <typename KvT, int kD, bool kCluster>
void launch_typed(const PagedAttentionArgs& a, cudaStream_t stream) {
  constexpr auto kernel = decode_attention_mma_kernel<KvT, kD, kCluster>;
  const size_t smem = sizeof(DecodeSmem<kD, kScaled<KvT>>);
  static std::atomic<uint64_t> configured{0};
  once_per_device(configured, [smem] {
    TF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  });
  const dim3 grid(unsigned(a.batch.n_decode), unsigned(a.n_kv_heads), unsigned(a.n_splits));
  // kCluster: a cluster holds the splits of one (item, kv head)
  const dim3 cluster(1, 1, kCluster ? unsigned(a.n_splits) : 1);
  // With early reads the kernel has work that needs no wait, so it also takes PDL where the
  // step gives it to the grid-sized kernels only (decode steps: pdl_decode_resident).
  const bool pdl = pdl_enabled().load(std::memory_order_relaxed) ||
                   (a.decode_early_keys && pdl_resident_enabled().load(std::memory_order_relaxed));
  launch_with(pdl, cluster, kernel, grid, dim3(kWarps * 32), smem, stream, a);
}

template <typename KvT>
void launch_dims(const PagedAttentionArgs& a, bool cluster, cudaStream_t stream) {
  with_head_dim(a.head_dim, [&](auto d) {
    if (cluster)
      launch_typed<KvT, decltype(d)::value, true>(a, stream);
    else
      launch_typed<KvT, decltype(d)::value, false>(a, stream);
  });
}

}  // namespace

bool decode_mma_supported(DType kv_dtype, int64_t head_dim, int64_t group) {
  const bool pool = kv_dtype == DType::BF16 || kv_dtype == DType::I8 || kv_dtype == DType::FP8;
  return pool && decode_supported(head_dim, group);
}

bool launch_decode_attention_mma(const PagedAttentionArgs& a, cudaStream_t stream) {
  const bool cluster = a.decode_cluster && a.n_splits > 1 && a.n_splits <= kDecodeClusterMax;
  switch (a.kv_dtype) {
    case DType::I8: launch_dims<int8_t>(a, cluster, stream); break;
    case DType::FP8: launch_dims<fp8_e4m3>(a, cluster, stream); break;
    default: launch_dims<bf16>(a, cluster, stream); break;
  }
  TF_CUDA_CHECK_LAUNCH("decode_attention_mma_kernel");
  return cluster;
}

}  // namespace tf::cuda

// Paged prefill attention for BF16, INT8 and FP8 KV pools: FlashAttention-2's forward pass on
// mma.sync tensor cores, with scores, probabilities and the output kept in registers (the
// path of launch_flash_attention for these pools at head_dim 64 and 128; flash_attention.cu
// serves the other pools and head_dim 256).
//
// Work item: a tile of up to kRows = 64 query rows of one sequence (batch.flash_tiles) and
// one query head; four warps, each owning 16 rows. The grid is (tiles, heads), read in
// reverse tile order with the heads innermost, so the tiles with the most keys (the last
// rows of a chunk) start first and the short ones fill the tail.
//   - Q: copied to shared memory once, then held in registers as m16n8k16 A fragments
//     (ldmatrix.x4) for the whole key loop.
//   - K/V: key tiles of kKeys = 64 rows, copied from the paged pool with 16-byte cp.async
//     into two buffers: tile j+1 is in flight while tile j is computed. Keys past the tile's
//     last position or in a missing block (index < 0, only outside a sliding window) are
//     zero-filled, so no unwritten or poisoned pool row reaches a product. The pool row of
//     each key comes from shared memory: 64 threads look up the block table two tiles ahead
//     (the load issued at the top of an iteration, the row stored at its end, so its latency
//     hides behind the compute). Shared tiles are unpadded [row][head_dim] with 16-byte
//     chunk c of row r stored at c ^ (r % 8): the 8 rows of every ldmatrix matrix hit 8
//     distinct bank groups. INT8 and FP8 pools: the two buffers hold the tiles' 8-bit codes
//     (unswizzled) and row scales; once a tile has arrived the block converts it into one
//     BF16 K and one BF16 V tile of the same swizzled layout, each value code * scale rounded
//     once to BF16 (as the WMMA kernel does), so the products below are the same for every
//     pool. The conversion costs a pass through shared memory and a barrier per tile; each
//     code is converted once, where converting in registers would repeat it in all four warps.
//   - S = Q K^T per warp (16 x 64, FP32 in registers), K as B fragments via ldmatrix (K rows
//     are [key][d], i.e. B column-major). Causal / window masking only on key tiles not
//     fully visible to every row.
//   - Online softmax in registers, in the log2 domain: m = running max of s * scale * log2(e)
//     per row (reduced over the 4 lanes of a quad), p = 2^(s * scale * log2(e) - m),
//     l = l * 2^(m_old - m) + sum p (each lane sums its own columns in FP32, before the BF16
//     rounding; the quad's partial sums are added at the end), O *= 2^(m_old - m).
//   - O += P V: the C fragments of two adjacent 8-key score tiles are exactly the A fragment
//     of a 16-key step, so P is rounded to BF16 in registers; V as B fragments via
//     ldmatrix.trans. O is 16 x head_dim FP32 per warp, in registers.
// Key tiles are visited from the last (the diagonal) down to the first one in the window.
// At the end out = O / l, rounded once to BF16, for the tile's n_rows rows only.
//
// Invariants: for each row, O = sum_j p_j V_j and l = sum_j p_j over the keys seen so far,
// with p_j relative to the current max m. A row whose keys are all masked so far keeps
// m = -inf, l = 0, O = 0 (2^(s - m) is taken against 0 then, and s = -inf gives 0, never
// NaN); its own position is always visible, so l > 0 at the end. Rows past n_rows have zero
// Q and position -1 (fully masked on masked tiles, finite elsewhere) and are never written.
// The rows of a tile have increasing positions (a chunk is consecutive positions), so its
// first and last rows bound the key range and the fully visible tiles; scale > 0.
#include "backend/cuda/attention.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma.cuh"

#include <type_traits>

namespace tf::cuda {
namespace {

constexpr int kWarps = 4, kThreads = 32 * kWarps, kRows = 16 * kWarps, kKeys = 64;

// Element offset of (row r, 16-byte chunk c) in a swizzled [64][kD] BF16 tile.
template <int kD>
__device__ __forceinline__ int swz(int r, int c) {
  return r * kD + ((c ^ (r & 7)) << 3);
}

// Blocks per SM the register allocation is held to: at head_dim 128 the O (64), Q (32) and
// S (32) fragments plus ptxas's ldmatrix prefetching need ~210 registers, and a cap of 168
// (3 blocks) spills; head_dim 64 fits 3 blocks (~152 registers) without spilling.
template <int kD>
constexpr int kMinBlocks = kD == 128 ? 2 : 3;

template <int kD>
constexpr int kTileBytes = kKeys * kD * 2;  // one BF16 K, V or Q tile (kRows == kKeys)
// Shared memory: the K and V tiles (BF16 pools: buffers 0 and 1 of each; scaled pools: one
// BF16 buffer each, then the 8-bit codes of K and V in buffers 0 and 1), then the pool rows of
// the keys of two tiles (rows[buf][j]: K/V row of key j of the tile in buffer buf, -1 =
// zero-fill), then a scaled pool's row scales of both buffers.
template <typename KvT, int kD>
constexpr int kSmemBytes = 128 + 4 * kTileBytes<kD> + 2 * kKeys * int(sizeof(int32_t)) +
                           (std::is_same_v<KvT, bf16> ? 0 : 4 * kKeys * int(sizeof(float)));

// 16 codes with their row scale as 16 BF16 values (code * scale rounded once).
template <typename KvT>
__device__ __forceinline__ void dequant16(uint4 in, float scale, uint4& lo, uint4& hi) {
  const KvT* c = reinterpret_cast<const KvT*>(&in);
  uint32_t r[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) r[i] = pack_bf16(to_float(c[2 * i]) * scale, to_float(c[2 * i + 1]) * scale);
  lo = uint4{r[0], r[1], r[2], r[3]};
  hi = uint4{r[4], r[5], r[6], r[7]};
}

template <typename KvT, int kD>
__global__ void __launch_bounds__(kThreads, kMinBlocks<kD>) flash_bf16_kernel(PagedAttentionArgs a) {
  constexpr bool kQuant = !std::is_same_v<KvT, bf16>;
  constexpr int kTileBytes = tf::cuda::kTileBytes<kD>;
  constexpr int kChunks = kD / 8;                     // 16-byte chunks per BF16 row
  constexpr int kRowsPerPass = kThreads / kChunks;    // rows one copy instruction covers
  constexpr int kPasses = kKeys / kRowsPerPass;
  static_assert(kRows == kKeys && kRowsPerPass % 8 == 0 && kThreads == 2 * kKeys, "tile shapes");
  // Q is staged in the second K tile (BF16 pools: K buffer 1, which the first prefetch
  // overwrites only after every warp holds its Q fragments; scaled pools: the BF16 V tile,
  // first written by the conversion of tile 0 after the loop's first barrier).
  // The tiles start 128-byte aligned (the swizzle arithmetic below relies on it).
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t pad = (128 - smem_addr(smem_raw) % 128) % 128;
  unsigned char* smem = smem_raw + pad;
  const uint32_t sK = smem_addr(smem), sV = sK + (kQuant ? 1 : 2) * kTileBytes, sQ = sK + kTileBytes;
  // scaled pools: the codes of K and V of buffer b at raw + b * kTileBytes (K) and + kTileBytes / 2 (V)
  unsigned char* raw = smem + 2 * kTileBytes;
  int32_t* rows = reinterpret_cast<int32_t*>(smem + 4 * kTileBytes);
  float* scales = reinterpret_cast<float*>(rows + 2 * kKeys);  // [buf][K 0..63, V 64..127]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t lin = blockIdx.x + int64_t(blockIdx.y) * gridDim.x;
  const int32_t h = int32_t(lin % a.n_heads), kvh = h / int32_t(a.n_heads / a.n_kv_heads);
  const int32_t* tile = a.batch.flash_tiles + 3 * (a.batch.n_flash - 1 - lin / a.n_heads);
  const int32_t s = tile[0], row0 = tile[1], n_rows = tile[2];
  const int32_t* table = a.batch.block_tables + int64_t(s) * a.batch.max_blocks;
  const int32_t* pos = a.batch.positions + row0;
  const int32_t first_pos = pos[0], last_pos = pos[n_rows - 1], window = int32_t(a.sliding_window);
  // Key tiles tile_hi, tile_hi - 1, ..., tile_lo (index it = 0, 1, ...: key kt(it) + j).
  const int32_t first_key = window > 0 ? max(0, first_pos - window + 1) : 0;
  const int32_t tile_lo = first_key / kKeys, tile_hi = last_pos / kKeys, n_tiles = tile_hi - tile_lo + 1;
  auto kt = [&](int it) { return (tile_hi - it) * kKeys; };

  // Pool row of key kp: block * (n_kv_heads * bs) + kvh * bs + kp % bs (int32: a pool has
  // fewer than 2^31 rows), -1 past the last position or in a missing block. kp / bs through
  // the float reciprocal, corrected by one step (exact for kp < 2^24). Split in two so that
  // the table load can be issued early and its latency hidden behind a tile's compute.
  const int32_t bs = int32_t(a.block_size);
  const float bs_rcp = 1.0f / float(bs);
  auto block_index = [&](int32_t kp) {
    const int32_t idx = __float2int_rz(float(kp) * bs_rcp), off = kp - idx * bs;
    return idx + (off >= bs ? 1 : off < 0 ? -1 : 0);
  };
  auto lookup = [&](int32_t kp) { return kp <= last_pos ? table[block_index(kp)] : -1; };
  auto pool_row = [&](int32_t kp, int32_t block) {
    return block < 0 ? -1 : (block * int32_t(a.n_kv_heads) + kvh) * bs + (kp - block_index(kp) * bs);
  };

  // This thread's copy slots: chunk c of rows lr + p * kRowsPerPass (same swizzle for all p).
  const int c = tid % kChunks, lr = tid / kChunks;
  const uint32_t dst0 = uint32_t(swz<kD>(lr, c)) * 2;
  auto load_kv = [&](int buf) {
    if constexpr (kQuant) {
      // 16-byte piece rc of key rr + p * kRawRows (unswizzled [key][kD] codes), and the row
      // scales of the tile's keys (threads 0..63: K, 64..127: V).
      constexpr int kRawChunks = kD / 16, kRawRows = kThreads / kRawChunks;
      const int rc = tid % kRawChunks, rr = tid / kRawChunks;
      const uint8_t* k_pool = static_cast<const uint8_t*>(a.k_pool) + rc * 16;
      const uint8_t* v_pool = static_cast<const uint8_t*>(a.v_pool) + rc * 16;
      unsigned char* kb = raw + buf * kTileBytes;
#pragma unroll
      for (int p = 0; p < kKeys / kRawRows; ++p) {
        const int j = rr + p * kRawRows;
        const int32_t row = rows[buf * kKeys + j];
        const int64_t off = row >= 0 ? int64_t(row) * kD : 0;
        cp_async_16(smem_addr(kb + j * kD + rc * 16), k_pool + off, row >= 0);
        cp_async_16(smem_addr(kb + kTileBytes / 2 + j * kD + rc * 16), v_pool + off, row >= 0);
      }
      const int32_t row = rows[buf * kKeys + tid % kKeys];
      const float* sc = tid < kKeys ? a.k_scale : a.v_scale;
      cp_async_4(smem_addr(scales + buf * 2 * kKeys + tid), sc + (row >= 0 ? row : 0), row >= 0);
    } else {
      const bf16* k_pool = static_cast<const bf16*>(a.k_pool) + c * 8;
      const bf16* v_pool = static_cast<const bf16*>(a.v_pool) + c * 8;
#pragma unroll
      for (int p = 0; p < kPasses; ++p) {
        const int32_t row = rows[buf * kKeys + lr + p * kRowsPerPass];
        const int64_t elem = row >= 0 ? int64_t(row) * kD : 0;
        const uint32_t dst = dst0 + buf * kTileBytes + p * kRowsPerPass * kD * 2;
        cp_async_16(sK + dst, k_pool + elem, row >= 0);
        cp_async_16(sV + dst, v_pool + elem, row >= 0);
      }
    }
  };
  // Scaled pools: the codes of buffer buf as the BF16 K and V tiles (swizzled as the BF16
  // pools' tiles), each 16 codes times their row scale.
  auto convert = [&](int buf) {
    if constexpr (kQuant) {
      constexpr int kRawChunks = kD / 16;
      const unsigned char* kb = raw + buf * kTileBytes;
      const float* sc = scales + buf * 2 * kKeys;
#pragma unroll
      for (int p = 0; p < 2 * kKeys * kRawChunks / kThreads; ++p) {
        const int i = tid + p * kThreads, v = i / (kKeys * kRawChunks);  // v: 0 = K, 1 = V
        const int j = (i / kRawChunks) % kKeys, rc = i % kRawChunks;
        const uint4 codes = *reinterpret_cast<const uint4*>(kb + v * (kTileBytes / 2) + j * kD + rc * 16);
        uint4 lo, hi;
        dequant16<KvT>(codes, sc[v * kKeys + j], lo, hi);
        unsigned char* dst = smem + v * kTileBytes;
        *reinterpret_cast<uint4*>(dst + swz<kD>(j, 2 * rc) * 2) = lo;
        *reinterpret_cast<uint4*>(dst + swz<kD>(j, 2 * rc + 1) * 2) = hi;
      }
    }
  };

  // ---- prologue: pool rows of tiles 0 and 1, Q (group 0), tile 0 (group 1), Q fragments
  if (tid / kKeys < n_tiles) {
    const int32_t kp = kt(tid / kKeys) + tid % kKeys;
    rows[tid] = pool_row(kp, lookup(kp));
  }
  {
    const int64_t qkv_row = (a.n_heads + 2 * a.n_kv_heads) * kD;
    const bf16* q = a.qkv + int64_t(row0) * qkv_row + h * kD + c * 8;
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
      const int r = lr + p * kRowsPerPass;
      cp_async_16(sQ + dst0 + p * kRowsPerPass * kD * 2, r < n_rows ? q + r * qkv_row : a.qkv, r < n_rows);
    }
    cp_async_commit();
  }
  __syncthreads();
  load_kv(0);
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();
  uint32_t qf[kD / 16][4];
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) ldsm_x4(qf[kk], sQ + swz<kD>(warp * 16 + (lane & 15), 2 * kk + (lane >> 4)) * 2);

  // Per-lane ldmatrix byte offsets within a K / V tile of the matrices for 16-byte chunks 0
  // and 1. Chunk 2b + {0, 1} is at offset ^ (b << 5): the swizzle flips only bits 4-6 of a
  // byte offset whose row part is a multiple of 128, and the tiles are 128-byte aligned.
  // K (B of S = Q K^T): matrices (keys 0-7, chunk 0), (keys 0-7, 1), (keys 8-15, 0), (8-15, 1);
  // V (B of O = P V, transposed): (keys 0-7, chunk 0), (keys 8-15, 0), (0-7, 1), (8-15, 1).
  const uint32_t k_off = uint32_t(swz<kD>((lane & 7) + (lane >> 4) * 8, (lane >> 3) & 1)) * 2;
  const uint32_t v_off = uint32_t(swz<kD>(lane & 15, lane >> 4)) * 2;

  // This lane's two rows (g and g + 8 of the warp); rows past n_rows see no key.
  int32_t qpos[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = warp * 16 + lane / 4 + 8 * i;
    qpos[i] = r < n_rows ? pos[r] : -1;
  }
  const float scale_log2 = a.scale * 1.4426950408889634f;
  float o[kD / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int it = 0; it < n_tiles; ++it) {
    const int buf = it & 1, tb = kQuant ? 0 : buf;  // tb: the BF16 tiles read below
    __syncthreads();  // every warp is done with buffer buf ^ 1 (tile it - 1, or Q) and rows[buf]
    if (it + 1 < n_tiles) load_kv(buf ^ 1);
    cp_async_commit();  // possibly empty: the wait below always leaves just the newest group
    // Table entry for tile it + 2 (into rows[buf] at the end of this iteration).
    const bool look = tid < kKeys && it + 2 < n_tiles;
    const int32_t next_kp = kt(it + 2) + tid, next_block = look ? lookup(next_kp) : -1;
    cp_async_wait<1>();
    __syncthreads();  // tile it is in shared memory for every thread
    if constexpr (kQuant) {
      convert(buf);
      __syncthreads();
    }

    // ---- S = Q K^T (16 x 64 per warp)
    float sc[kKeys / 8][4] = {};
    const uint32_t kb = sK + tb * kTileBytes + k_off;
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < kKeys / 16; ++np) {
        uint32_t b[4];
        ldsm_x4(b, (kb ^ (kk % 4) << 5) + (np * 16 * kD + kk / 4 * 64) * 2);
        mma_bf16(sc[2 * np], qf[kk], b[0], b[1]);
        mma_bf16(sc[2 * np + 1], qf[kk], b[2], b[3]);
      }
    }

    // ---- mask (tiles not fully visible to every row: visible keys are lo < kp <= qpos)
    const int32_t k0 = kt(it);
    if (!(k0 + kKeys - 1 <= first_pos && (window == 0 || k0 > last_pos - window))) {
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int32_t kp = k0 + 8 * j + 2 * (lane % 4) + (e & 1), qp = qpos[e / 2];
          if (kp > qp || (window > 0 && kp <= qp - window)) sc[j][e] = -INFINITY;
        }
      }
    }
    float mb[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j) mx = fmaxf(mx, fmaxf(sc[j][2 * i], sc[j][2 * i + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[i], mx * scale_log2);
      mb[i] = m_new == -INFINITY ? 0.0f : m_new;  // all masked so far: p = 2^-inf = 0
      const float corr = exp2_approx(m[i] - mb[i]);  // 0 while m was -inf (l, O are 0)
      m[i] = m_new;
      l[i] *= corr;
#pragma unroll
      for (int n = 0; n < kD / 8; ++n) {
        o[n][2 * i] *= corr;
        o[n][2 * i + 1] *= corr;
      }
    }
    uint32_t pa[kKeys / 16][4];  // P as A fragments, one per 16-key step
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j) {
      float p[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) p[e] = exp2_approx(fmaf(sc[j][e], scale_log2, -mb[e / 2]));
      l[0] += p[0] + p[1];
      l[1] += p[2] + p[3];
      pa[j / 2][(j % 2) * 2] = pack_bf16(p[0], p[1]);
      pa[j / 2][(j % 2) * 2 + 1] = pack_bf16(p[2], p[3]);
    }

    // ---- O += P V
    const uint32_t vb = sV + tb * kTileBytes + v_off;
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < kD / 16; ++np) {
        uint32_t b[4];
        ldsm_x4_trans(b, (vb ^ (np % 4) << 5) + (kk * 16 * kD + np / 4 * 64) * 2);
        mma_bf16(o[2 * np], pa[kk], b[0], b[1]);
        mma_bf16(o[2 * np + 1], pa[kk], b[2], b[3]);
      }
    }
    if (look) rows[buf * kKeys + tid] = pool_row(next_kp, next_block);
  }

  // ---- out = O / l for rows < n_rows
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    const int r = warp * 16 + lane / 4 + 8 * i;
    if (r >= n_rows) continue;
    const float inv = 1.0f / l[i];
    bf16* out = a.out + (int64_t(row0) + r) * a.n_heads * kD + h * kD + 2 * (lane % 4);
#pragma unroll
    for (int n = 0; n < kD / 8; ++n)
      *reinterpret_cast<uint32_t*>(out + 8 * n) = pack_bf16(o[n][2 * i] * inv, o[n][2 * i + 1] * inv);
  }
}

template <typename KvT, int kD>
void launch_d(const PagedAttentionArgs& a, cudaStream_t stream) {
  constexpr int smem = kSmemBytes<KvT, kD>;
  static std::atomic<uint64_t> configured{0};
  once_per_device(configured, [] {
    TF_CUDA_CHECK(
        cudaFuncSetAttribute(flash_bf16_kernel<KvT, kD>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    TF_CUDA_CHECK(cudaFuncSetAttribute(flash_bf16_kernel<KvT, kD>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       int(cudaSharedmemCarveoutMaxShared)));
  });
  const dim3 grid(unsigned(a.batch.n_flash), unsigned(a.n_heads));
  flash_bf16_kernel<KvT, kD><<<grid, kThreads, smem, stream>>>(a);
}

template <typename KvT>
void launch_kv(const PagedAttentionArgs& a, cudaStream_t stream) {
  if (a.head_dim == 64)
    launch_d<KvT, 64>(a, stream);
  else
    launch_d<KvT, 128>(a, stream);
}

}  // namespace

void launch_flash_attention_bf16(const PagedAttentionArgs& a, cudaStream_t stream) {
  switch (a.kv_dtype) {
    case DType::I8: launch_kv<int8_t>(a, stream); break;
    case DType::FP8: launch_kv<fp8_e4m3>(a, stream); break;
    default: launch_kv<bf16>(a, stream); break;
  }
}

}  // namespace tf::cuda

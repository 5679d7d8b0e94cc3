// The W4 and W8 decode GEMV at one input row with its input in registers: the k-split launch
// variants of gemv_half2.cuh (Half2Options::split, ::stages). The warp-per-feature kernels of
// gemv_half2.cu read a whole weight row per warp, at most four 16-byte chunks a lane in
// flight, then reduce across the warp, and re-read the staged input from shared memory for
// every weight row. Here:
//   - a block of W warps owns a contiguous range of output rows (as many blocks as fit on the
//     device, or for the shared-memory ring at most Half2Options::blocks_per_sm an SM, so each
//     warp streams more rows per prologue; the rows split evenly); warp w's lanes own chunks
//     (w C + c) 32 + lane (c < C) of every weight row, so the block's warps together cover k, and each lane keeps its
//     chunks' inputs in registers, staged once (16 C registers for W4, 8 C for W8);
//   - each warp walks all of the block's rows, either through a ring of 8 / C rows of chunks
//     in registers (gemv_split_kernel: after multiplying row t it issues the loads of row
//     t + 8 / C into the same slot) or through a ring of S rows in shared memory filled with
//     cp.async (gemv_stream_kernel: S - 1 rows in flight without holding registers); the
//     first rows are issued before pdl_begin() (weights are never written);
//   - the lane sums of 8 rows (8 / C in registers) reduce across the warp in one transposed
//     butterfly (a value per row halves at each step: 2 (U - 1) + log2(32 / U) shuffles for U
//     rows, not 5 U), and the warps' sums meet in shared memory: one barrier per block, at the
//     end, then the block's threads apply the row scale, bias and epilogue, two rows a thread;
//   - SwiGLU and RoPE/KV need two weight rows per output: the block's rows are "virtual" rows
//     whose even/odd pairs are (gate j, up j) or (rotation pair i, i + head_dim / 2) of a head,
//     and every block's range is even, so a pair never straddles two blocks.
// The arithmetic and roundings are gemv_half2.cu's (the formats of gemv_half2_formats.cuh):
// the input row scaled by a power of two and staged as F16 in the order the codes unpack,
// half2 sums per chunk, FP32 across chunks and warps, the epilogues of gemv_kernel.cuh.
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fold_rows.cuh"
#include "backend/cuda/gemv_half2.cuh"
#include "backend/cuda/gemv_half2_formats.cuh"
#include "backend/cuda/gemv_kernel.cuh"
#include "backend/cuda/mma.cuh"

namespace tf::cuda {

namespace {

using half2_detail::FormatW4;
using half2_detail::FormatW8;

constexpr int kSlotChunks = 8;  // 16-byte weight chunks a lane keeps in flight
constexpr int kMaxWarps = 16;
constexpr size_t kMaxSmem = 48 * 1024;  // the warps' row sums, floats

// Warps of a block for k inputs at C chunks a lane.
template <typename F>
int64_t split_warps(int64_t k, int c) {
  const int64_t n_chunks = k / F::kElems;
  return (n_chunks + 32 * c - 1) / (32 * c);
}

// This lane's inputs (its C chunks of the row; zeros where `valid` is false): BF16
// (normalized and rounded to BF16 with a norm, as normalize_rows), scaled by the block-wide
// power of two, staged as F16 into xs. Returns the power of two that undoes the scaling. The
// whole block, after pdl_begin().
template <typename F, int C, bool kNorm>
__device__ float stage_inputs(const GemmArgs& g, const GemvFusion& f, const int64_t (&ci)[C], const bool (&valid)[C],
                              uint4 (&xs)[C][F::kElems / 8]) {
  constexpr int kWords = F::kElems / 8;
  __shared__ float scratch[32];
  const uint4* xg = reinterpret_cast<const uint4*>(g.x);
  const uint4* nw = reinterpret_cast<const uint4*>(f.norm_w);
  float ss = 0.0f, amax = 0.0f;
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int e = 0; e < kWords; ++e) {
      xs[c][e] = valid[c] ? __ldg(xg + ci[c] * kWords + e) : make_uint4(0, 0, 0, 0);
      float v[8], w[8];
      unpack8(xs[c][e], v);
      if constexpr (kNorm) unpack8(valid[c] ? __ldg(nw + ci[c] * kWords + e) : make_uint4(0, 0, 0, 0), w);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if constexpr (kNorm) ss += v[i] * v[i];
        amax = fmaxf(amax, fabsf(kNorm ? v[i] * w[i] : v[i]));
      }
    }
  float inv = 1.0f;
  if constexpr (kNorm) inv = 1.0f / sqrtf(block_sum(ss, scratch) / float(g.k) + f.eps);
  amax = block_max(amax, scratch) * inv;
  int ex = 0;
  if (amax > 0.0f && isfinite(amax)) frexpf(amax, &ex);  // amax = m 2^ex, 0.5 <= m < 1
  const float pow2 = ldexpf(1.0f, -ex);
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int e = 0; e < kWords; ++e) {
      float v[8];
      unpack8(xs[c][e], v);
      if constexpr (kNorm) {
        float w[8];
        unpack8(valid[c] ? __ldg(nw + ci[c] * kWords + e) : make_uint4(0, 0, 0, 0), w);
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = to_float(from_float<bf16>(v[i] * inv * w[i]));
      }
      xs[c][e] = F::stage(v, pow2);
    }
  return ldexpf(1.0f, ex);
}

// After the block's barrier: the warps' sums of virtual rows [v0, v0 + n) meet, two rows a
// thread, with the row scale (W8), the input's power of two, bias and the epilogue.
template <typename F, GemvEpilogue kEpi>
__device__ void finish_rows(const GemmArgs& g, const GemvFusion& f, const float* sums, int64_t v0, int64_t n,
                            int64_t per_block, float unscale) {
  const int n_warps = int(blockDim.x / 32);
  auto total = [&](int64_t t) {
    float y = 0.0f;
    for (int w = 0; w < n_warps; ++w) y += sums[int64_t(w) * per_block + t];
    const int64_t row = gemv_detail::virtual_weight_row<kEpi>(g, f, int32_t(v0 + t));
    const float s = F::kRowScale ? static_cast<const float*>(g.wq.scales)[row] : 1.0f;
    return y * unscale * s + (g.bias ? to_float(g.bias[row]) : 0.0f);
  };
  for (int64_t t = 2 * int64_t(threadIdx.x); t < n; t += 2 * int64_t(blockDim.x)) {
    const int64_t v = v0 + t;
    if constexpr (kEpi == GemvEpilogue::Swiglu) {
      gemv_detail::store_output<kEpi>(g, g.m / 2, v / 2, 0, total(t), total(t + 1));
    } else if constexpr (kEpi == GemvEpilogue::RopeKv) {
      const int64_t hd = f.rope.head_dim;
      const float y0 = to_float(from_float<bf16>(total(t))), y1 = to_float(from_float<bf16>(total(t + 1)));
      gemv_detail::rope_kv_pair_any(f.rope, static_cast<bf16*>(g.out), v / hd, v % hd / 2, 0, y0, y1);
    } else {
      gemv_detail::store_output<kEpi>(g, g.m, v, 0, total(t), 0.0f);
      if (t + 1 < n) gemv_detail::store_output<kEpi>(g, g.m, v + 1, 0, total(t + 1), 0.0f);
    }
  }
}

template <typename F, int C, bool kNorm, GemvEpilogue kEpi>
__global__ void __launch_bounds__(kMaxWarps * 32, 1) gemv_split_kernel(GemmArgs g, GemvFusion f, int64_t per_block) {
  using Chunk = typename F::Chunk;
  constexpr int U = kSlotChunks / C;     // rows in the ring
  constexpr int kWords = F::kElems / 8;  // staged uint4 words of x per chunk
  extern __shared__ float sums[];        // [warps][per_block]
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
  const int64_t n_chunks = g.k / F::kElems;
  const int64_t v0 = int64_t(blockIdx.x) * per_block;
  const int n = int(std::min<int64_t>(per_block, g.m - v0));
  int64_t ci[C];
  bool valid[C];
#pragma unroll
  for (int c = 0; c < C; ++c) ci[c] = (int64_t(warp) * C + c) * 32 + lane, valid[c] = ci[c] < n_chunks;
  const typename F::Groups groups = F::groups(g);
  auto load_row = [&](int t, Chunk(&s)[C]) {
    const int64_t row = gemv_detail::virtual_weight_row<kEpi>(g, f, int32_t(v0 + t));
#pragma unroll
    for (int c = 0; c < C; ++c)
      if (valid[c]) F::load(g, groups, row, ci[c], s[c]);
  };
  Chunk ring[U][C] = {};
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (u < n) load_row(u, ring[u]);
  pdl_begin();

  uint4 xs[C][kWords];
  const float unscale = stage_inputs<F, C, kNorm>(g, f, ci, valid, xs);

  for (int t0 = 0; t0 < n; t0 += U) {
    float p[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float acc[1] = {0.0f};
      if (t0 + u < n) {
#pragma unroll
        for (int c = 0; c < C; ++c)
          if (valid[c]) F::template multiply<1, 1>(ring[u][c], xs[c], 0, acc);
        if (t0 + u + U < n) load_row(t0 + u + U, ring[u]);
      }
      p[u] = acc[0];
    }
    store_rows<U>(p, sums + int64_t(warp) * per_block, t0, n);
  }
  __syncthreads();

  finish_rows<F, kEpi>(g, f, sums, v0, n, per_block, unscale);
}

// Bytes of a stage of a warp's shared-memory ring (gemv_stream_kernel) at C chunks a lane:
// C x 32 lanes' chunks, then for W4 the warp's 8 C group scales (16 C bytes) and zero points
// (8 C bytes), padded to 16.
template <typename F, int C>
constexpr int kStageBytes = F::kElems == 32 ? (512 * C + 24 * C + 15) / 16 * 16 : 512 * C;

// The k-split GEMV with its weights streamed through a shared-memory ring per warp
// (Half2Options::stages): C chunks a lane per row (the warps cover k exactly: k a multiple
// of 32 C chunks), row t + S - 1 copied with cp.async while row t is multiplied. Lane l of
// warp w holds chunks (w C + c) 32 + l, so chunk c of the warp's lanes sits c x 512 bytes after
// chunk 0 in the row, and for W4 (groups of 128 only) the warp's 8 C groups are contiguous:
// lane 0 copies their scales, lane 1 their zero points, with the codes. Each lane reads back
// its own chunks; the scales cross lanes, hence __syncwarp() after the wait and before a stage
// is refilled. Two chunks a lane halve the per-row work of the ring (addresses, the copy's
// commit and wait, the warp barriers) against the same bytes.
template <typename F, int S, int C, bool kNorm, GemvEpilogue kEpi>
__global__ void __launch_bounds__(kMaxWarps * 32, 1) gemv_stream_kernel(GemmArgs g, GemvFusion f, int64_t per_block) {
  constexpr int U = 8;  // rows a transposed reduction takes
  constexpr bool kW4 = F::kElems == 32;
  constexpr int kStage = kStageBytes<F, C>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32), n_warps = int(blockDim.x / 32);
  const int64_t v0 = int64_t(blockIdx.x) * per_block;
  const int n = int(std::min<int64_t>(per_block, g.m - v0));
  float* sums = reinterpret_cast<float*>(smem);  // [warps][per_block]
  const unsigned char* ring =
      smem + (size_t(n_warps * per_block) * sizeof(float) + 15) / 16 * 16 + size_t(warp) * S * kStage;
  const uint32_t ring_addr = smem_addr(ring);
  int64_t ci[C];
  bool valid[C];
#pragma unroll
  for (int c = 0; c < C; ++c) ci[c] = (int64_t(warp) * C + c) * 32 + lane, valid[c] = true;
  // Per row, the lane's first chunk and (W4) the warp's 8 C groups sit at these bases plus the
  // row times the row's bytes (groups): 32-bit row arithmetic, one wide multiply-add a pointer.
  const uint32_t row_bytes = uint32_t(kW4 ? g.k / 2 : g.k), n_groups = uint32_t(kW4 ? g.k / 128 : 0);
  const unsigned char* q_lane = g.wq.q + ci[0] * 16;
  const __half* s_warp = static_cast<const __half*>(g.wq.scales) + warp * 8 * C;
  const uint8_t* z_warp = g.wq.zeros + warp * 8 * C;
  auto issue = [&](int t) {
    if (t < n) {
      const uint32_t row = uint32_t(gemv_detail::virtual_weight_row<kEpi>(g, f, int32_t(v0 + t)));
      const uint32_t stage = ring_addr + uint32_t(t % S) * kStage;
      const unsigned char* q = q_lane + uint64_t(row) * row_bytes;
#pragma unroll
      for (int c = 0; c < C; ++c) cp_async_16(stage + c * 512 + lane * 16, q + c * 512, true);
      if constexpr (kW4) {
        if (lane == 0) {
          const __half* sc = s_warp + uint64_t(row) * n_groups;
#pragma unroll
          for (int c = 0; c < C; ++c) cp_async_16(stage + 512 * C + 16 * c, sc + 8 * c, true);
        }
        if (lane == 1) {
          if constexpr (C == 1)
            cp_async_8(stage + 528, z_warp + uint64_t(row) * n_groups);
          else
            cp_async_16(stage + 528 * C, z_warp + uint64_t(row) * n_groups, true);
        }
      }
    }
    cp_async_commit();  // also past the end, so the count of groups stays uniform
  };
#pragma unroll
  for (int t = 0; t < S - 1; ++t) issue(t);
  pdl_begin();

  uint4 xs[C][F::kElems / 8];
  const float unscale = stage_inputs<F, C, kNorm>(g, f, ci, valid, xs);

  for (int t0 = 0; t0 < n; t0 += U) {
    float p[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int t = t0 + u;
      __syncwarp();  // every lane is done with the stage row t + S - 1 refills (row t - 1's)
      issue(t + S - 1);
      cp_async_wait<S - 1>();
      __syncwarp();  // lanes 0 and 1's copies of the scales are visible to the warp
      float acc[1] = {0.0f};
      if (t < n) {
        const unsigned char* stage = ring + (t % S) * kStage;
#pragma unroll
        for (int c = 0; c < C; ++c) {
          typename F::Chunk ch;
          ch.q = *reinterpret_cast<const uint4*>(stage + c * 512 + lane * 16);
          if constexpr (kW4) {
            ch.s = reinterpret_cast<const __half*>(stage + 512 * C + 16 * c)[lane / 4];
            ch.z = stage[528 * C + 8 * c + lane / 4];
          }
          F::template multiply<1, 1>(ch, xs[c], 0, acc);
        }
      }
      p[u] = acc[0];
    }
    store_rows<U>(p, sums + int64_t(warp) * per_block, t0, n);
  }
  __syncthreads();

  finish_rows<F, kEpi>(g, f, sums, v0, n, per_block, unscale);
}

// Launch geometry: blocks (as many as fit on the device, at most `max_per_sm` an SM when > 0,
// fewer for small m) and the even number of virtual rows each owns; shared memory: the warps'
// sums, then `ring_bytes`.
struct Geometry {
  int64_t warps = 0, blocks = 0, per_block = 0;
  size_t smem = 0;
};

constexpr size_t kMaxDynSmem = 200 * 1024;

template <typename Kernel>
Geometry geometry(const GemmArgs& g, Kernel kernel, int64_t warps, size_t ring_bytes, int max_per_sm = 0) {
  Geometry geo;
  geo.warps = warps;
  const int64_t pairs = (g.m + 1) / 2;
  const int64_t blocks =
      std::clamp<int64_t>(resident_blocks(kernel, int(warps * 32), ring_bytes + 4096, max_per_sm), 1, pairs);
  int64_t per_block = 2 * ((pairs + blocks - 1) / blocks);
  const int64_t cap = int64_t(kMaxSmem / (size_t(warps) * sizeof(float))) / 2 * 2;
  per_block = std::min(per_block, cap);
  geo.per_block = per_block;
  geo.blocks = (g.m + per_block - 1) / per_block;
  geo.smem = (size_t(warps * per_block) * sizeof(float) + 15) / 16 * 16 + ring_bytes;
  return geo;
}

// The register-ring kernel at C chunks a lane.
template <typename F, int C>
struct SplitLaunch {
  const GemmArgs& g;
  const GemvFusion& f;
  cudaStream_t stream;
  template <bool kNorm, GemvEpilogue kEpi>
  void run() const {
    auto* kernel = gemv_split_kernel<F, C, kNorm, kEpi>;
    const Geometry geo = geometry(g, kernel, split_warps<F>(g.k, C), 0);
    launch_resident(kernel, dim3(unsigned(geo.blocks)), dim3(unsigned(geo.warps * 32)), geo.smem, stream, g, f,
               geo.per_block);
  }
};

// The shared-memory ring kernel of S rows at C chunks a lane, at most blocks_per_sm blocks an
// SM (0: no cap).
template <typename F, int S, int C>
struct StreamLaunch {
  const GemmArgs& g;
  const GemvFusion& f;
  cudaStream_t stream;
  int blocks_per_sm;
  template <bool kNorm, GemvEpilogue kEpi>
  void run() const {
    static std::atomic<uint64_t> attr_done{0};
    auto* kernel = gemv_stream_kernel<F, S, C, kNorm, kEpi>;
    once_per_device(attr_done, [&] {
      TF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxDynSmem)));
    });
    const int64_t warps = split_warps<F>(g.k, C);
    const Geometry geo = geometry(g, kernel, warps, size_t(warps) * S * kStageBytes<F, C>, blocks_per_sm);
    launch_resident(kernel, dim3(unsigned(geo.blocks)), dim3(unsigned(geo.warps * 32)), geo.smem, stream, g, f,
               geo.per_block);
  }
};

// The variants the backend times (others measured slower everywhere, docs/PERF.md): the
// register ring at 2 chunks a lane, the shared-memory ring of 8 rows at 1 or 2 chunks a lane.
constexpr int kSplitChunks = 2;
constexpr int kRingRows = 8;

}  // namespace

bool gemv_split_supported(const GemmArgs& g, const GemvFusion& f, int split, int stages) {
  if (g.rows != 1 || !gemv_supported(g, f)) return false;
  if (stages != 0) {  // the ring: 1 or 2 chunks a lane, every warp full; W4 in groups of 128
    const auto aligned = [](const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; };
    if (stages != kRingRows || (split != 1 && split != 2)) return false;
    const int64_t per_warp = (g.wq.dtype == DType::W4 ? 1024 : 512) * split;  // inputs a warp covers
    if (g.k % per_warp != 0 || g.k / per_warp > kMaxWarps) return false;
    if (g.wq.dtype == DType::W4)
      return g.wq.group_size == 128 && aligned(g.wq.scales, 16) && aligned(g.wq.zeros, 8 * split);
    return g.wq.dtype == DType::W8;
  }
  if (split != kSplitChunks) return false;
  switch (g.wq.dtype) {
    case DType::W4: return g.k % FormatW4::kElems == 0 && split_warps<FormatW4>(g.k, split) <= kMaxWarps;
    case DType::W8: return g.k % FormatW8::kElems == 0 && split_warps<FormatW8>(g.k, split) <= kMaxWarps;
    default: return false;
  }
}

void launch_gemv_split(const GemmArgs& g, cudaStream_t stream, const GemvFusion& f, int split, int stages,
                       int blocks_per_sm) {
  if (g.m == 0) return;
  if (!gemv_split_supported(g, f, split, stages))  // nvcc cannot compile fmt: no TF_ASSERT here
    throw_cuda_error(cudaErrorInvalidValue, "launch_gemv_split: shape or options not supported", __FILE__, __LINE__);
  const bool w8 = g.wq.dtype == DType::W8;
  if (stages != 0) {
    if (split == 2) {
      if (w8)
        gemv_detail::with_fusion(f, StreamLaunch<FormatW8, kRingRows, 2>{g, f, stream, blocks_per_sm});
      else
        gemv_detail::with_fusion(f, StreamLaunch<FormatW4, kRingRows, 2>{g, f, stream, blocks_per_sm});
    } else if (w8) {
      gemv_detail::with_fusion(f, StreamLaunch<FormatW8, kRingRows, 1>{g, f, stream, blocks_per_sm});
    } else {
      gemv_detail::with_fusion(f, StreamLaunch<FormatW4, kRingRows, 1>{g, f, stream, blocks_per_sm});
    }
  } else if (w8) {
    gemv_detail::with_fusion(f, SplitLaunch<FormatW8, kSplitChunks>{g, f, stream});
  } else {
    gemv_detail::with_fusion(f, SplitLaunch<FormatW4, kSplitChunks>{g, f, stream});
  }
}

}  // namespace tf::cuda

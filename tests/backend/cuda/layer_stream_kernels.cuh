// The kernels of bench_layer_stream.cu (included there only): a chain of W4 g128 decode
// projections in one kernel shape, launched one projection at a time or as one persistent
// kernel, with the rows fixed per block or handed out at run time. The inner loop is
// gemv_split.cu's shared-memory ring GEMV (the warps of a group cover k with C chunks a lane,
// inputs in registers, S rows of weights a warp in flight through cp.async, rows reduced 8 at
// a time), written again here so that its row order and its ring can change.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/fold_rows.cuh"
#include "backend/cuda/gemv_half2_formats.cuh"
#include "backend/cuda/mma.cuh"

namespace tf::layer_stream {

using cuda::bf16;
using cuda::half2_detail::FormatW4;

// Warps a block: 16 (one block an SM), or 8 in bench_layer_stream_w8 (two blocks fit an SM, so
// under PDL a block of the next launch starts its rows beside one of this launch).
#ifndef TF_LS_WARPS
#define TF_LS_WARPS 16
#endif
constexpr int kWarps = TF_LS_WARPS;
constexpr int kSumRows = 1024 / kWarps;          // rows a group may own in one projection
constexpr int kSumFloats = kWarps * kSumRows + 2 * kWarps * 16;  // + kDynamic's unit sums
// Bytes of a ring stage at C chunks a lane: 512 C of codes, 16 C of scales, 8 C of zeros.
template <int C>
constexpr int kStageBytes = (536 * C + 15) / 16 * 16;
constexpr unsigned kBarrier = 1, kPrefetch = 2, kDynamic = 4;  // flags

struct Proj {
  const unsigned char* q;  // [m][k / 2]
  const __half* s;         // [m][k / 128]
  const uint8_t* z;        // [m][k / 128]
  const bf16* x;           // [k]
  bf16* y;                 // [m]
  int m, k, c;             // c: 16-byte chunks a lane of each row (a group: k / (1024 c) warps)
};

// Where this block's and this warp's rows of a projection are: the block owns a contiguous
// range, its warps form `groups` groups of k / (1024 C) warps that split the range again.
struct Rows {
  int per_group = 0, block_rows = 0, group_warps = 0;
  int wg = -1, n = 0;  // this warp's place in its group (-1: idle) and its group's rows
  uint32_t block0 = 0, row0 = 0;
  Rows() = default;
  __device__ Rows(const Proj& p, int warp) {
    group_warps = p.k / (1024 * p.c);
    const int groups = kWarps / group_warps;
    const int per_block = (p.m + int(gridDim.x) - 1) / int(gridDim.x);
    block0 = uint32_t(blockIdx.x) * per_block;
    block_rows = max(0, min(p.m - int(block0), per_block));
    per_group = (block_rows + groups - 1) / groups;
    const int group = warp / group_warps;
    if (group < groups) {
      wg = warp % group_warps;
      n = max(0, min(block_rows - group * per_group, per_group));
      row0 = block0 + uint32_t(group * per_group);
    }
  }
};

// Copies the warp's share (place wg in its group) of weight row `row` into the ring stage at
// `stage` (a shared address).
template <int C>
__device__ void copy_row(const Proj& p, int wg, uint32_t row, uint32_t stage, int lane) {
  const uint32_t n_groups = uint32_t(p.k / 128);
  const unsigned char* q = p.q + uint64_t(row) * uint32_t(p.k / 2) + (wg * C * 32 + lane) * 16;
#pragma unroll
  for (int c = 0; c < C; ++c) cuda::cp_async_16(stage + c * 512 + lane * 16, q + c * 512, true);
  const uint64_t g0 = uint64_t(row) * n_groups + uint32_t(wg * 8 * C);
  if (lane == 0)
#pragma unroll
    for (int c = 0; c < C; ++c) cuda::cp_async_16(stage + 512 * C + 16 * c, p.s + g0 + 8 * c, true);
  if (lane == 1) {
    if constexpr (C == 1)
      cuda::cp_async_8(stage + 528, p.z + g0);
    else
      cuda::cp_async_16(stage + 528 * C, p.z + g0, true);
  }
}

// chain_kernel's ring: row t of one projection in stage t % S (nothing past the end). Always
// commits, so that S - 1 groups follow any row's when it is waited for.
template <int S, int MC, int C>
__device__ void issue(const Proj& p, const Rows& r, uint32_t ring, int lane, int t) {
  if (r.wg >= 0 && t < r.n) copy_row<C>(p, r.wg, r.row0 + uint32_t(t), ring + uint32_t(t % S) * kStageBytes<MC>, lane);
  cuda::cp_async_commit();
}

template <int S, int MC, int C>
__device__ void prologue(const Proj& p, uint32_t ring, int lane, int warp) {
  const Rows r(p, warp);
#pragma unroll
  for (int t = 0; t < S - 1; ++t) issue<S, MC, C>(p, r, ring, lane, t);
}

// ring_kernel's ring: the warp's rows of every projection as one sequence, item i in stage
// i % B, so the rows of the next projections are copied while this one's are multiplied.
// `at` walks forward only: items are issued in order.
struct Cursor {
  int proj = 0, base = 0;  // the projection item `base` starts
  Rows r;
};

template <int B, int MC>
__device__ void issue_item(const Proj* projs, int end, Cursor& at, int item, uint32_t ring, int lane, int warp) {
  while (at.proj < end && item >= at.base + at.r.n) {
    at.base += at.r.n;
    if (++at.proj < end) at.r = Rows(projs[at.proj], warp);
  }
  if (at.proj < end) {
    const Proj& p = projs[at.proj];
    const uint32_t stage = ring + uint32_t(item % B) * kStageBytes<MC>;
    if (MC == 1 || p.c == 1)
      copy_row<1>(p, at.r.wg, at.r.row0 + uint32_t(item - at.base), stage, lane);
    else
      copy_row<MC>(p, at.r.wg, at.r.row0 + uint32_t(item - at.base), stage, lane);
  }
  cuda::cp_async_commit();
}

// This lane's inputs of p (its C chunks; zeros for a warp with no place in a group),
// RMS-normalized over k and staged as F16 for FormatW4::multiply. The whole block calls it.
template <int C>
__device__ void stage_x(const Proj& p, const Rows& r, int lane, uint4 (&xs)[C][4]) {
  __shared__ float scratch[32];
  float ss = 0.0f;
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      // __ldcg: the input was written by other blocks of this kernel; L1 may hold stale lines
      xs[c][e] = r.wg >= 0 ? __ldcg(reinterpret_cast<const uint4*>(p.x) + ((r.wg * C + c) * 32 + lane) * 4 + e)
                           : make_uint4(0, 0, 0, 0);
      float v[8];
      cuda::unpack8(xs[c][e], v);
#pragma unroll
      for (int i = 0; i < 8; ++i) ss += v[i] * v[i];
    }
  const int groups = kWarps / r.group_warps;
  const float inv = rsqrtf(cuda::block_sum(ss, scratch) / float(groups * p.k) + 1e-6f);
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float v[8];
      cuda::unpack8(xs[c][e], v);
      xs[c][e] = FormatW4::stage(v, inv);
    }
}

// Multiplies ring stage t % B into acc (a lane's share of one row).
template <int B, int MC, int C>
__device__ __forceinline__ void consume(const unsigned char* ring_ptr, int t, int lane, const uint4 (&xs)[C][4],
                                       float (&acc)[1]) {
  const unsigned char* stage = ring_ptr + (t % B) * kStageBytes<MC>;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    FormatW4::Chunk ch;
    ch.q = *reinterpret_cast<const uint4*>(stage + c * 512 + lane * 16);
    ch.s = reinterpret_cast<const __half*>(stage + 512 * C + 16 * c)[lane / 4];
    ch.z = stage[528 * C + 8 * c + lane / 4];
    FormatW4::multiply<1, 1>(ch, xs[c], 0, acc);
  }
}

// The warp's rows t = 0 .. n - 1 through the ring (row t in stage (base + t) % B of B, the
// first S - 1 already issued; next(t) makes sure row t + S - 1 is, committing at least one
// group), their lane sums reduced 8 at a time into my_sums[t].
template <int S, int MC, int C, int B, typename Next>
__device__ void stream_rows(const unsigned char* ring_ptr, const uint4 (&xs)[C][4], int n, int base, float* my_sums,
                            int lane, Next&& next) {
  for (int t0 = 0; t0 < n; t0 += 8) {
    float acc8[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int t = t0 + u;
      float acc[1] = {0.0f};
      if (t < n) {  // warp-uniform
        __syncwarp();  // every lane is done with the stage next() refills (row t - 1's)
        next(t);
        cuda::cp_async_wait<S - 1>();
        __syncwarp();  // lanes 0 and 1's copies of the scales are visible to the warp
        consume<B, MC, C>(ring_ptr, base + t, lane, xs, acc);
      }
      acc8[u] = acc[0];
    }
    cuda::store_rows<8>(acc8, my_sums, t0, n);
  }
}

// One projection: this lane's inputs (RMS-normalized, staged as F16), the warp's rows through
// the ring (stream_rows), the warps' sums. Ends with the ring's stages read.
template <int S, int MC, int C, typename Next, int B = S>
__device__ void project(const Proj& p, const unsigned char* ring_ptr, float* sums, int lane, int warp, int base,
                        Next&& next) {
  const Rows r(p, warp);
  uint4 xs[C][4];
  stage_x<C>(p, r, lane, xs);
  stream_rows<S, MC, C, B>(ring_ptr, xs, r.n, base, sums + warp * kSumRows, lane, next);
  __syncwarp();
}

// ---- Rows handed out at run time (kDynamic) -------------------------------------------------
// Each group first takes a fixed share of a projection's rows (g_share of them, split evenly:
// rows [G n_s, (G + 1) n_s) for group G of the grid's), then the rest in units of 8 from a
// counter per projection (ctr): the group's first warp takes units with atomicAdd one unit
// ahead of use, and the group's warps agree on them through shared memory at a named barrier
// per unit. So rows go to whichever group asks first, instead of every projection waiting for
// the slowest block's fixed share (measured slower: the SMs stream at one rate, docs/PERF.md
// 2026-12-06). Item t of the group's sequence is its fixed row t (t < n_s),
// then row (t - n_s) % 8 of unit (t - n_s) / 8. Shared state alternates with the projection's
// parity, so a warp that starts the next projection's rows (kPrefetch) does not disturb a group
// still finishing this one.
__device__ float g_share = 0.0f;

struct Dyn {
  int (*slots)[kWarps][4];  // [parity][group][unit % 4]: the units a group was given
  unsigned pending = 0;     // the group leader's unit taken ahead
};

// Where a group's rows of a projection are under kDynamic.
struct DynRows {
  int group = 0, n_s = 0, n_units = 0;
  uint32_t s0 = 0, d0 = 0;  // the group's first fixed row; the first row handed out
  __device__ DynRows(const Proj& p, const Rows& r, int warp) {
    const int groups = kWarps / r.group_warps, all = int(gridDim.x) * groups;
    group = warp / r.group_warps;
    n_s = int(g_share * float(p.m) / float(all));
    s0 = uint32_t((int(blockIdx.x) * groups + group) * n_s);
    d0 = uint32_t(all * n_s);
    n_units = (p.m - int(d0) + 7) / 8;
  }
};

__device__ __forceinline__ void group_sync(int par, int group, int group_warps) {
  asm volatile("bar.sync %0, %1;" ::"r"(1 + par * 7 + group), "r"(group_warps * 32) : "memory");
}

template <int S, int MC, int C>
__device__ void issue_dyn(const Proj& p, const Rows& r, const DynRows& dr, const int* slots, uint32_t ring, int lane,
                          int item) {
  uint32_t row;
  bool valid;
  if (item < dr.n_s) {
    row = dr.s0 + uint32_t(item);
    valid = true;
  } else {
    const int unit = slots[((item - dr.n_s) / 8) % 4];
    row = dr.d0 + uint32_t(unit) * 8 + uint32_t((item - dr.n_s) % 8);
    valid = unit < dr.n_units && row < uint32_t(p.m);
  }
  if (valid) copy_row<C>(p, r.wg, row, ring + uint32_t(item % S) * kStageBytes<MC>, lane);
  cuda::cp_async_commit();
}

template <int S, int MC, int C>
__device__ void prologue_dyn(const Proj& p, unsigned* ctr, int par, Dyn& d, uint32_t ring, int lane, int warp) {
  const Rows r(p, warp);
  if (r.wg < 0) return;
  const DynRows dr(p, r, warp);
  int* slots = d.slots[par][dr.group];
  if (r.wg == 0 && lane == 0) {
    slots[0] = int(atomicAdd(ctr, 1u));
    d.pending = atomicAdd(ctr, 1u);
  }
  group_sync(par, dr.group, r.group_warps);
#pragma unroll
  for (int t = 0; t < S - 1; ++t) issue_dyn<S, MC, C>(p, r, dr, slots, ring, lane, t);
}

// project() over prologue_dyn's sequence: the fixed rows' sums stay in `sums` for
// finish_dyn(); each unit's outputs are summed over the group's warps (by its last warp) after
// the next unit's barrier, from `unit_sums` ([parity][warp][2 x 8]).
template <int S, int MC, int C>
__device__ void project_dyn(const Proj& p, unsigned* ctr, int par, Dyn& d, const unsigned char* ring_ptr,
                            uint32_t ring, float* sums, float* unit_sums, int lane, int warp) {
  const Rows r(p, warp);
  uint4 xs[C][4];
  stage_x<C>(p, r, lane, xs);
  if (r.wg < 0) return;
  const DynRows dr(p, r, warp);
  int* slots = d.slots[par][dr.group];
  stream_rows<S, MC, C, S>(ring_ptr, xs, dr.n_s, 0, sums + warp * kSumRows, lane,  // the fixed rows
                           [&](int t) { issue_dyn<S, MC, C>(p, r, dr, slots, ring, lane, t + S - 1); });
  const bool leader = r.wg == 0 && lane == 0;
  float* my_sums = unit_sums + (par * kWarps + warp) * 16;
  for (int k = 0;; ++k) {  // the units
    if (leader) slots[(k + 1) % 4] = int(d.pending);
    group_sync(par, dr.group, r.group_warps);
    if (k > 0 && r.wg == r.group_warps - 1 && lane < 8) {  // unit k - 1's outputs
      const uint32_t row = dr.d0 + uint32_t(slots[(k - 1) % 4]) * 8 + uint32_t(lane);
      if (row < uint32_t(p.m)) {
        float y = 0.0f;
        for (int w = 0; w < r.group_warps; ++w)
          y += unit_sums[(par * kWarps + dr.group * r.group_warps + w) * 16 + ((k - 1) % 2) * 8 + lane];
        p.y[row] = __float2bfloat16(y);
      }
    }
    const int unit = slots[k % 4];
    if (unit >= dr.n_units) break;
    if (leader) d.pending = atomicAdd(ctr, 1u);
    float acc8[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int t = dr.n_s + 8 * k + u;
      __syncwarp();
      issue_dyn<S, MC, C>(p, r, dr, slots, ring, lane, t + S - 1);
      cuda::cp_async_wait<S - 1>();
      __syncwarp();
      float acc[1] = {0.0f};
      if (dr.d0 + uint32_t(unit) * 8 + uint32_t(u) < uint32_t(p.m)) consume<S, MC, C>(ring_ptr, t, lane, xs, acc);
      acc8[u] = acc[0];
    }
    cuda::store_rows<8>(acc8, my_sums + (k % 2) * 8, 0, 8);
  }
  __syncwarp();
}

// After the block's barrier: the outputs of the groups' fixed rows.
__device__ void finish_dyn(const Proj& p, const float* sums) {
  const Rows r(p, 0);
  const int groups = kWarps / r.group_warps;
  const DynRows dr(p, r, 0);
  for (int i = int(threadIdx.x); i < groups * dr.n_s; i += int(blockDim.x)) {
    const int group = i / dr.n_s, t = i % dr.n_s;
    float y = 0.0f;
    for (int w = 0; w < r.group_warps; ++w) y += sums[(group * r.group_warps + w) * kSumRows + t];
    p.y[uint32_t((int(blockIdx.x) * groups + group) * dr.n_s + t)] = __float2bfloat16(y);
  }
}

// The block's outputs: each row's sum over its group's warps.
__device__ void finish(const Proj& p, const float* sums) {
  const Rows r(p, 0);
  for (int i = int(threadIdx.x); i < r.block_rows; i += int(blockDim.x)) {
    const int group = i / r.per_group, t = i % r.per_group;
    float y = 0.0f;
    for (int w = 0; w < r.group_warps; ++w) y += sums[(group * r.group_warps + w) * kSumRows + t];
    p.y[r.block0 + uint32_t(i)] = __float2bfloat16(y);
  }
}

// --trace: thread 0 of each block writes %globaltimer at three points of every projection and
// its SM ([projection][block][4]: its rows start, its rows done, its outputs written, %smid).
__device__ unsigned long long* g_trace = nullptr;
__device__ __forceinline__ void stamp(int i, int point) {
  if (g_trace != nullptr && threadIdx.x == 0) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    g_trace[(size_t(i) * gridDim.x + blockIdx.x) * 4 + point] = t;
    if (point == 0) {
      unsigned sm;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      g_trace[(size_t(i) * gridDim.x + blockIdx.x) * 4 + 3] = sm;
    }
  }
}

__device__ void grid_barrier(unsigned* count, unsigned target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(count, 1u);
    unsigned v = 0;
    do asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(count) : "memory");
    while (v < target);
  }
  __syncthreads();
}

// S: rows in a warp's ring; MC: the most chunks a lane any projection takes (1 or 2).
// kBlocksPerSm: 2 caps the registers so that a block of the next launch fits beside one of
// this (with PDL it may then start copying its first rows while this one finishes).
template <int S, int MC, int kBlocksPerSm = 1>
__global__ void __launch_bounds__(kWarps * 32, kBlocksPerSm)
    chain_kernel(const Proj* __restrict__ projs, int first, int count, unsigned* bar, unsigned flags) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
  float* sums = reinterpret_cast<float*>(smem);
  const unsigned char* ring_ptr = smem + kSumFloats * sizeof(float) + warp * S * kStageBytes<MC>;
  const uint32_t ring = cuda::smem_addr(ring_ptr);
  float* unit_sums = sums + kWarps * kSumRows;
  __shared__ int slots[2][kWarps][4];
  Dyn d;
  d.slots = slots;
  const bool dyn = flags & kDynamic;
  unsigned* ctrs = bar + 2;  // a counter per projection
  auto start = [&](int i) {
    const Proj& p = projs[i];
    if (dyn) {
      if (MC == 1 || p.c == 1)
        prologue_dyn<S, MC, 1>(p, ctrs + i, i % 2, d, ring, lane, warp);
      else
        prologue_dyn<S, MC, MC>(p, ctrs + i, i % 2, d, ring, lane, warp);
    } else if (MC == 1 || p.c == 1) {
      prologue<S, MC, 1>(p, ring, lane, warp);
    } else {
      prologue<S, MC, MC>(p, ring, lane, warp);
    }
  };
  start(first);
  cuda::pdl_begin();
  for (int i = first; i < first + count; ++i) {
    const Proj p = projs[i];
    stamp(i, 0);
    if (i > first && !(flags & kPrefetch)) start(i);
    const Rows r(p, warp);
    if (dyn) {
      if (MC == 1 || p.c == 1)
        project_dyn<S, MC, 1>(p, ctrs + i, i % 2, d, ring_ptr, ring, sums, unit_sums, lane, warp);
      else
        project_dyn<S, MC, MC>(p, ctrs + i, i % 2, d, ring_ptr, ring, sums, unit_sums, lane, warp);
    } else if (MC == 1 || p.c == 1)
      project<S, MC, 1>(p, ring_ptr, sums, lane, warp, 0, [&](int t) { issue<S, MC, 1>(p, r, ring, lane, t + S - 1); });
    else
      project<S, MC, MC>(p, ring_ptr, sums, lane, warp, 0,
                         [&](int t) { issue<S, MC, MC>(p, r, ring, lane, t + S - 1); });
    const bool last = i + 1 == first + count;
    if (!last && (flags & kPrefetch)) start(i + 1);
    __syncthreads();
    stamp(i, 1);
    if (dyn)
      finish_dyn(p, sums);
    else
      finish(p, sums);
    stamp(i, 2);
    if (!last && (flags & kBarrier)) grid_barrier(bar, unsigned(i - first + 1) * gridDim.x);
  }
  if ((flags & (kBarrier | kDynamic)) && threadIdx.x == 0) {  // the last block out resets the counters
    if (atomicAdd(bar + 1, 1u) == gridDim.x - 1) {
      bar[0] = 0;
      bar[1] = 0;
      for (int i = first; i < first + count; ++i) ctrs[i] = 0;
      __threadfence();
    }
  }
}

// The chain with the continuous ring: every warp's ring of B rows stays full across projections
// and barriers. While it multiplies, S - 1 rows are in flight (its next rows are issued as it
// multiplies, whichever projection they belong to); when it has multiplied all of a
// projection's rows, it fills the whole ring (B - 1 rows ahead) before the barrier, so with B > S
// the next projection's first rows stream in while the grid waits.
template <int S, int MC, int B>
__global__ void __launch_bounds__(kWarps * 32, 1)
    ring_kernel(const Proj* __restrict__ projs, int first, int count, unsigned* bar, unsigned) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32), end = first + count;
  float* sums = reinterpret_cast<float*>(smem);
  const unsigned char* ring_ptr = smem + kSumFloats * sizeof(float) + warp * B * kStageBytes<MC>;
  const uint32_t ring = cuda::smem_addr(ring_ptr);
  Cursor at;
  at.proj = first;
  at.r = Rows(projs[first], warp);
  int issued = 0;  // items issued (one commit group each)
  auto fill = [&](int upto) {
    while (issued < upto) issue_item<B, MC>(projs, end, at, issued++, ring, lane, warp);
  };
  fill(B - 1);
  cuda::pdl_begin();
  int base = 0;
  for (int i = first; i < end; ++i) {
    const Proj p = projs[i];
    stamp(i, 0);
    // At least S - 1 groups follow row t's, so project()'s wait<S - 1> finds it copied (with
    // more in flight after a fill, it waits for some rows earlier than it needs them).
    auto next = [&](int t) { fill(base + t + S); };
    if (MC == 1 || p.c == 1)
      project<S, MC, 1, decltype(next)&, B>(p, ring_ptr, sums, lane, warp, base, next);
    else
      project<S, MC, MC, decltype(next)&, B>(p, ring_ptr, sums, lane, warp, base, next);
    base += Rows(p, warp).n;
    fill(base + B - 1);  // every stage is free: this warp has multiplied all its rows so far
    __syncthreads();
    stamp(i, 1);
    finish(p, sums);
    stamp(i, 2);
    if (i + 1 < end) grid_barrier(bar, unsigned(i - first + 1) * gridDim.x);
  }
  if (threadIdx.x == 0 && atomicAdd(bar + 1, 1u) == gridDim.x - 1) {  // the last block out resets the counters
    bar[0] = 0;
    bar[1] = 0;
    __threadfence();
  }
}

__global__ void fill_kernel(unsigned char* q, size_t nq, __half* s, uint8_t* z, size_t ng, unsigned seed) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < nq; i += stride) {
    unsigned h = unsigned(i) * 2654435761u ^ unsigned(i >> 32) * 40503u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    q[i] = uint8_t(h >> 8);
    if (i < ng) {
      s[i] = __float2half(0.002f + 0.001f * float(h % 8));
      z[i] = uint8_t((h >> 20) % 16);
    }
  }
}

}  // namespace tf::layer_stream

// The W4 decode GEMV on integer tensor cores (Half2Options::imma): 1..4 input rows, W4 in
// groups of 128, the fusions of gemv.cuh. The half2 kernels spend most of their instructions
// turning codes into F16 and multiplying them (about 57 of 85 a lane per 32 codes); here a
// lane turns 8 codes into two words of bytes with three integer instructions and one
// mma.sync m16n8k32 (s8 x s8 -> s32) multiplies 16 rows by 32 inputs for the whole warp.
//
// Arithmetic. Each input row is split into groups of 128 (the weight groups); a group is
// scaled by its own power of two so that its largest magnitude lies in [2^13, 2^14) and
// rounded to integers x (|x| <= 2^14: 15 bits against BF16's 8, exact for every value within
// 2^6 of the group's largest), then split into two signed bytes x = 256 h + l (h in [-64, 64],
// l in [-128, 127]). Column 2r of the mma's B operand holds token r's h, column 2r + 1 its l,
// so one mma gives both partial sums of 16 weight rows for up to 4 tokens. The codes q
// (0..15) enter as unsigned bytes, unshifted: per group and row the exact integer
// sum(q x) - z sum(x) (z the zero point, sum(x) computed once when staging) becomes float
// once, times the group's weight scale and the input group's power of two, and the groups
// sum in FP32. The only roundings are the inputs' to 15 bits a group and FP32 across groups.
//
// Work. A block owns a range of virtual rows (a multiple of 16, see gemv_split.cu for
// SwiGLU's and RoPE/KV's pairs) and its W warps split the k / 128 groups (warp w: groups w,
// w + W, ...). A warp walks tiles of 16 rows; per (tile, group) each lane loads 16 bytes (32
// codes) of two rows: lane 4 g + t reads bytes 16 t .. 16 t + 15 of the group in rows g and
// g + 8, the A fragment rows of its mma. The mma's k index t 4 + i (i < 4) of mma j is code
// 8 j + 2 i of the lane's 32 and k index 16 + t 4 + i is code 8 j + 2 i + 1: the low and high
// nibbles of word j, each masked into bytes. The staged inputs follow the same order, so
// lane 4 n + t of any warp reads its B fragment (column n, 32 bytes a group) from shared
// memory as two 16-byte words. The next kDepth items' weights are in flight in registers
// (issued before pdl_begin(): weights are never written). The warps' FP32 sums of each row
// meet in shared memory after one barrier, then the block applies bias and the epilogue.
//
// Measured on the H200 (docs/PERF.md): at 2 to 4 rows it is the fastest of the timed kernels
// on the large shapes (4 rows, gate+up 28672 x 4096: 31.9 us against 46.5 for the best half2
// kernel); at one row the shared-memory rings of gemv_split.cu stay ahead (22.9 against 29.8
// us): its warps wait on their loads (ncu: 45% of stalls on L1TEX), each load instruction
// spanning 16 rows of 64 bytes. Neither a shared-memory ring, contiguous group ranges, 8 warps
// a block nor an L2 prefetch ahead of the loads closed that gap.
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv_half2.cuh"
#include "backend/cuda/gemv_kernel.cuh"
#include "backend/cuda/mma.cuh"

namespace tf::cuda {

namespace {

constexpr int kGroup = 128;      // inputs a group (the weight groups this kernel takes)
constexpr int kMaxWarps = 16;
constexpr int kDepth = 4;        // (tile, group) items a lane keeps in flight
constexpr int kInputBits = 14;   // a group's largest |x| scales into [2^13, 2^14)
constexpr size_t kMaxDynSmem = 200 * 1024;

__device__ __forceinline__ void mma_s8(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Shared memory: the staged inputs [groups][8 R lanes][8 words], each group's integer sum and
// power of two [groups][R], then the warps' row sums [warps][per_block][R].
struct Layout {
  size_t b_bytes, xe_bytes, sums_offset, total;
  __host__ __device__ Layout(int64_t groups, int rows, int64_t warps, int64_t per_block) {
    b_bytes = size_t(groups) * rows * 8 * 32;
    xe_bytes = size_t(groups) * rows * 8;
    sums_offset = b_bytes + xe_bytes;
    total = sums_offset + size_t(warps * per_block) * rows * sizeof(float);
  }
};

// Stages group `grp` of token r (by one warp): the normalized (kNorm) BF16 values as 15-bit
// integers split into bytes in the B fragments' order, and the group's integer sum and power
// of two. Lane l holds inputs 4 l .. 4 l + 3 of the group: word j = (l % 8) / 2 of chunk
// t = l / 8, codes 4 (l % 2) + i (i < 4): the even ones are bytes 2 (l % 2), + 1 of the
// fragment's low word b0, the odd ones the same bytes of b1.
template <bool kNorm>
__device__ void stage_group(const GemmArgs& g, const GemvFusion& f, int r, int64_t grp, float inv, int rows,
                            unsigned char* b_smem, int2* xe) {
  const int lane = int(threadIdx.x % 32);
  const int64_t base = r * g.k + grp * kGroup + 4 * lane;
  const uint2 raw = __ldg(reinterpret_cast<const uint2*>(g.x + base));
  float v[4] = {bf16_lo(raw.x), bf16_hi(raw.x), bf16_lo(raw.y), bf16_hi(raw.y)};
  if constexpr (kNorm) {
    const uint2 nw = __ldg(reinterpret_cast<const uint2*>(f.norm_w + grp * kGroup + 4 * lane));
    const float w[4] = {bf16_lo(nw.x), bf16_hi(nw.x), bf16_lo(nw.y), bf16_hi(nw.y)};
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = to_float(from_float<bf16>(v[i] * inv * w[i]));
  }
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(v[i]));
  amax = warp_max(amax);
  int ex = 0;
  if (amax > 0.0f && isfinite(amax)) frexpf(amax, &ex);  // amax = m 2^ex, 0.5 <= m < 1
  const float scale = ldexpf(1.0f, kInputBits - ex);
  int x[4], sum = 0;
  uint32_t h[4], l[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[i] = __float2int_rn(v[i] * scale);
    sum += x[i];
    const int hi = (x[i] + 128) >> 8;
    h[i] = uint32_t(hi) & 0xffu;
    l[i] = uint32_t(x[i] - 256 * hi) & 0xffu;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  // Fragment lane 4 n + t: n = 2 r (h) or 2 r + 1 (l); words 2 j (even codes), 2 j + 1 (odd).
  const int t = lane / 8, j = (lane % 8) / 2, half = lane % 2;
  auto word = [&](int n, int b) {
    return reinterpret_cast<uint16_t*>(b_smem + ((grp * rows * 8 + n * 4 + t) * 8 + 2 * j + b) * 4) + half;
  };
  *word(2 * r, 0) = uint16_t(h[0] | h[2] << 8);
  *word(2 * r, 1) = uint16_t(h[1] | h[3] << 8);
  *word(2 * r + 1, 0) = uint16_t(l[0] | l[2] << 8);
  *word(2 * r + 1, 1) = uint16_t(l[1] | l[3] << 8);
  if (lane == 0) xe[grp * rows + r] = make_int2(sum, __float_as_int(ldexpf(1.0f, ex - kInputBits)));
}

// One (tile, group) item in flight: the codes of the lane's two rows (g, g + 8), their group
// scales and zero points.
struct Slot {
  uint4 q[2];
  __half s[2];
  uint8_t z[2];
};

template <int R, bool kNorm, GemvEpilogue kEpi>
__global__ void __launch_bounds__(kMaxWarps * 32, 1) gemv_imma_kernel(GemmArgs g, GemvFusion f, int64_t per_block) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32), n_warps = int(blockDim.x / 32);
  const int gq = lane / 4, tq = lane % 4;  // fragment row group and thread in group
  const int64_t groups = g.k / kGroup;
  const Layout lay(groups, R, n_warps, per_block);
  unsigned char* b_smem = smem;
  int2* xe = reinterpret_cast<int2*>(smem + lay.b_bytes);
  float* sums = reinterpret_cast<float*>(smem + lay.sums_offset);
  const int32_t v0 = int32_t(int64_t(blockIdx.x) * per_block);
  const int n = int(std::min<int64_t>(per_block, g.m - v0));
  const int tiles = (n + 15) / 16;
  // This warp's groups: w, w + W, ... (a contiguous range per warp measured no faster).
  const int my_groups = int((groups - warp + n_warps - 1) / n_warps);
  const int items = tiles * my_groups;
  const uint32_t row_bytes = uint32_t(g.k / 2);
  const unsigned char* q_lane = g.wq.q + tq * 16 + int64_t(warp) * 64;  // plus the row, plus 64 a group

  // The load stream (the rows of its tile, its group index): per item the two rows' 16 bytes
  // of codes and, for the lanes that finish a token's sums (t < R), their scales and zeros.
  // Rows past the block's end read the block's first row instead (no branch per load; their
  // sums are never stored).
  const __half* scales = static_cast<const __half*>(g.wq.scales);
  int ld_tile = 0, ld_gi = 0;
  const unsigned char* ld_ptr[2];
  int32_t ld_sz[2];  // the rows' next group index among the scales and zeros
  auto ld_rows = [&] {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int vr = ld_tile * 16 + gq + 8 * h;
      const int32_t row = gemv_detail::virtual_weight_row<kEpi>(g, f, v0 + (vr < n ? vr : 0));
      ld_ptr[h] = q_lane + uint64_t(uint32_t(row)) * row_bytes;
      ld_sz[h] = row * int32_t(groups) + warp;
    }
  };
  const int64_t ld_step = int64_t(n_warps) * 64;
  auto load_next = [&](Slot& slot) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      slot.q[h] = load_stream(reinterpret_cast<const uint4*>(ld_ptr[h]));
      if (tq < R) {
        slot.s[h] = scales[ld_sz[h]];
        slot.z[h] = g.wq.zeros[ld_sz[h]];
      }
      ld_ptr[h] += ld_step;
      ld_sz[h] += n_warps;
    }
    if (++ld_gi == my_groups) {
      ld_gi = 0;
      ++ld_tile;
      if (ld_tile < tiles) ld_rows();
    }
  };
  Slot ring[kDepth] = {};
  if (items > 0) ld_rows();
#pragma unroll
  for (int d = 0; d < kDepth; ++d)
    if (d < items) load_next(ring[d]);
  pdl_begin();

  // Stage the inputs: the tokens' inverse RMS (kNorm), then each warp its groups.
  __shared__ float scratch[32];
  float inv[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    inv[r] = 1.0f;
    if constexpr (kNorm) {
      float ss = 0.0f;
      const uint4* xr = reinterpret_cast<const uint4*>(g.x + r * g.k);
      for (int64_t i = threadIdx.x; i < g.k / 8; i += blockDim.x) {
        float v[8];
        unpack8(__ldg(xr + i), v);
#pragma unroll
        for (int e = 0; e < 8; ++e) ss += v[e] * v[e];
      }
      inv[r] = 1.0f / sqrtf(block_sum(ss, scratch) / float(g.k) + f.eps);
    }
  }
  for (int64_t grp = warp; grp < groups; grp += n_warps)
#pragma unroll
    for (int r = 0; r < R; ++r) stage_group<kNorm>(g, f, r, grp, inv[r], R, b_smem, xe);
  __syncthreads();

  // The compute stream, in the load stream's order.
  int tile = 0, gi = 0;
  float acc[2] = {0.0f, 0.0f};
  auto compute = [&](const Slot& slot) {
    const int32_t grp = warp + gi * n_warps;
    uint4 b[2] = {};
    if (lane < 8 * R) {
      const uint4* bp = reinterpret_cast<const uint4*>(b_smem + (int64_t(grp) * R * 8 + lane) * 32);
      b[0] = bp[0];
      b[1] = bp[1];
    }
    const uint32_t bw[8] = {b[0].x, b[0].y, b[0].z, b[0].w, b[1].x, b[1].y, b[1].z, b[1].w};
    const uint32_t w0[4] = {slot.q[0].x, slot.q[0].y, slot.q[0].z, slot.q[0].w};
    const uint32_t w1[4] = {slot.q[1].x, slot.q[1].y, slot.q[1].z, slot.q[1].w};
    int c[4] = {0, 0, 0, 0};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t a[4] = {w0[j] & 0x0f0f0f0fu, w1[j] & 0x0f0f0f0fu, (w0[j] >> 4) & 0x0f0f0f0fu,
                             (w1[j] >> 4) & 0x0f0f0f0fu};
      mma_s8(c, a, bw[2 * j], bw[2 * j + 1]);
    }
    if (tq < R) {
      const int2 e = xe[grp * R + tq];
      const float unscale = __int_as_float(e.y);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int dot = c[2 * h] * 256 + c[2 * h + 1] - int(slot.z[h]) * e.x;
        acc[h] += float(dot) * (__half2float(slot.s[h]) * unscale);
      }
    }
    if (++gi == my_groups) {  // the tile's rows are done: this warp's sums
      if (tq < R) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int vr = tile * 16 + gq + 8 * h;
          if (vr < n) sums[(int64_t(warp) * per_block + vr) * R + tq] = acc[h];
        }
      }
      acc[0] = acc[1] = 0.0f;
      gi = 0;
      ++tile;
    }
  };
  for (int i0 = 0; i0 < items; i0 += kDepth) {
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      if (i0 + d < items) {
        compute(ring[d]);
        if (i0 + d + kDepth < items) load_next(ring[d]);
      }
    }
  }
  __syncthreads();  // every warp has groups (warps <= groups), so every row's sums are written

  // The warps' sums of each row and token, bias, epilogue: a pair of rows and a token a thread.
  auto total = [&](int t, int r) {
    float y = 0.0f;
    for (int w = 0; w < n_warps; ++w) y += sums[(int64_t(w) * per_block + t) * R + r];
    const int32_t row = gemv_detail::virtual_weight_row<kEpi>(g, f, v0 + t);
    return y + (g.bias ? to_float(g.bias[row]) : 0.0f);
  };
  const int pairs = (n + 1) / 2;
  for (int p = int(threadIdx.x); p < pairs * R; p += int(blockDim.x)) {
    const int r = p % R, t = 2 * (p / R);
    const int64_t v = v0 + t;
    if constexpr (kEpi == GemvEpilogue::Swiglu) {
      gemv_detail::store_output<kEpi>(g, g.m / 2, v / 2, r, total(t, r), total(t + 1, r));
    } else if constexpr (kEpi == GemvEpilogue::RopeKv) {
      const int64_t hd = f.rope.head_dim;
      const float y0 = to_float(from_float<bf16>(total(t, r))), y1 = to_float(from_float<bf16>(total(t + 1, r)));
      gemv_detail::rope_kv_pair_any(f.rope, static_cast<bf16*>(g.out), v / hd, v % hd / 2, r, y0, y1);
    } else {
      gemv_detail::store_output<kEpi>(g, g.m, v, r, total(t, r), 0.0f);
      if (t + 1 < n) gemv_detail::store_output<kEpi>(g, g.m, v + 1, r, total(t + 1, r), 0.0f);
    }
  }
}

// Warps a block: 16 (8, two blocks an SM, measured slower), at most the groups.
int64_t imma_warps(int64_t k) { return std::min<int64_t>(kMaxWarps, k / kGroup); }

// Blocks as many as fit at once (one an SM at 16 warps), each owning a multiple of 16 rows,
// fewer rows a block where the row sums would not fit.
struct ImmaGeometry {
  int64_t warps = 0, blocks = 0, per_block = 0;
  size_t smem = 0;
};

template <int R, bool kNorm, GemvEpilogue kEpi>
ImmaGeometry imma_geometry(const GemmArgs& g) {
  ImmaGeometry geo;
  geo.warps = imma_warps(g.k);
  const int64_t groups = g.k / kGroup, tiles = (g.m + 15) / 16;
  const Layout base(groups, R, geo.warps, 0);
  const int64_t resident = std::max<int64_t>(
      1, resident_blocks(gemv_imma_kernel<R, kNorm, kEpi>, int(geo.warps * 32), base.total + 16 * 1024));
  int64_t per_block = 16 * ((tiles + resident - 1) / resident);
  const int64_t cap = int64_t((kMaxDynSmem - base.total) / (size_t(geo.warps) * R * sizeof(float))) / 16 * 16;
  geo.per_block = std::min(per_block, cap);
  geo.blocks = (g.m + geo.per_block - 1) / geo.per_block;
  geo.smem = Layout(groups, R, geo.warps, geo.per_block).total;
  return geo;
}

template <int R>
struct ImmaLaunch {
  const GemmArgs& g;
  const GemvFusion& f;
  cudaStream_t stream;
  template <bool kNorm, GemvEpilogue kEpi>
  void run() const {
    static std::atomic<uint64_t> attr_done{0};
    auto* kernel = gemv_imma_kernel<R, kNorm, kEpi>;
    once_per_device(attr_done, [&] {
      TF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxDynSmem)));
    });
    const ImmaGeometry geo = imma_geometry<R, kNorm, kEpi>(g);
    launch_resident(kernel, dim3(unsigned(geo.blocks)), dim3(unsigned(geo.warps * 32)), geo.smem, stream, g, f,
                    geo.per_block);
  }
};

}  // namespace

bool gemv_imma_supported(const GemmArgs& g, const GemvFusion& f) {
  if (g.rows < 1 || g.rows > kGemvHalf2MaxRows || !gemv_supported(g, f)) return false;
  if (g.wq.dtype != DType::W4 || g.wq.group_size != kGroup || g.k % kGroup != 0) return false;
  if (g.m >= (int64_t(1) << 31) / std::max<int64_t>(1, g.k / kGroup)) return false;  // 32-bit group indices
  // The staged inputs and at least one tile of row sums fit the shared memory.
  const Layout lay(g.k / kGroup, int(g.rows), imma_warps(g.k), 16);
  return lay.total <= kMaxDynSmem;
}

void launch_gemv_imma(const GemmArgs& g, cudaStream_t stream, const GemvFusion& f) {
  if (g.m == 0) return;
  if (!gemv_imma_supported(g, f))  // nvcc cannot compile fmt: no TF_ASSERT here
    throw_cuda_error(cudaErrorInvalidValue, "launch_gemv_imma: shape or options not supported", __FILE__, __LINE__);
  switch (g.rows) {
    case 1: gemv_detail::with_fusion(f, ImmaLaunch<1>{g, f, stream}); break;
    case 2: gemv_detail::with_fusion(f, ImmaLaunch<2>{g, f, stream}); break;
    case 3: gemv_detail::with_fusion(f, ImmaLaunch<3>{g, f, stream}); break;
    default: gemv_detail::with_fusion(f, ImmaLaunch<4>{g, f, stream}); break;
  }
}

}  // namespace tf::cuda

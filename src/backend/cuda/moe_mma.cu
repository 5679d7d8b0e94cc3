// The experts' grouped GEMMs on tensor cores (mma.sync m16n8k16 BF16, FP32 accumulation),
// launch_moe_experts' path when d_model and d_ff are multiples of 8 (moe.cuh).
//
// Work item: one tile of up to kMoeTileRows = 64 of one expert's assignments (the sort
// kernel's tile list, so no block is spent on an expert's empty tiles) x 64 output features.
// Four warps, each owning 16 assignment rows and all 64 features; gated, the block's B tile
// holds the 64 gate rows and the 64 up rows of the same features, so SwiGLU is applied to the
// accumulators in registers. k advances 64 at a time through two shared-memory stages filled
// with 16-byte cp.async: the A rows are gathered through the permutation (x's row a / top_k,
// or act's row a), rows past the tile's assignments, features past m and k past its end are
// zero-filled. A tile row is 64 BF16 = 8 chunks of 16 bytes, chunk c of row r stored at
// c ^ (r % 8), so the 8 rows an ldmatrix matrix reads hit 8 distinct bank groups.
// Roundings as the SIMT kernels and the dense path: gate and up rounded to BF16 before
// silu(gate) * up, act stored as BF16, the down projection's output kept in F32.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/moe.cuh"

namespace tf::cuda {
namespace {

constexpr int kM = int(kMoeTileRows), kN = 64, kK = 64, kWarps = kM / 16, kThreads = 32 * kWarps;

template <bool kGated>
struct Tile {
  static constexpr int kBRows = kGated ? 2 * kN : kN;
  static constexpr int kABytes = kM * kK * 2;
  static constexpr int kStageBytes = kABytes + kBRows * kK * 2;
  static constexpr int kSmem = 128 + 2 * kStageBytes;  // two stages, 128 for alignment
};

// Byte offset of (row r, 16-byte chunk c) in a swizzled [rows][kK] BF16 tile.
__device__ __forceinline__ uint32_t swz(int r, int c) { return uint32_t(r * kK + ((c ^ (r & 7)) << 3)) * 2u; }

template <bool kGated>
__global__ void __launch_bounds__(kThreads) moe_mma_kernel(MoeExpertsArgs a) {
  using T = Tile<kGated>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ int32_t rows_of[kM];
  pdl_begin();
  const int64_t n_assign = a.rows * a.top_k;
  const MoeTiles tl = moe_tiles(a.index, n_assign, a.n_experts);
  if (int32_t(blockIdx.y) >= *tl.count) return;  // uniform: past the tile list
  const int64_t e = tl.list[2 * blockIdx.y];
  const int32_t first = tl.list[2 * blockIdx.y + 1], end = a.index[e + 1];
  const int32_t* perm = a.index + a.n_experts + 1;
  const int64_t k = kGated ? a.d_model : a.d_ff;
  const int64_t m = kGated ? a.d_ff : a.d_model;
  const int64_t col0 = int64_t(blockIdx.x) * kN;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (tid < kM) rows_of[tid] = first + tid < end ? perm[first + tid] : -1;
  __syncthreads();
  const bf16* w_base = kGated ? a.w_gate_up + e * 2 * a.d_ff * a.d_model : a.w_down + e * a.d_model * a.d_ff;
  const uint32_t pad = (128 - smem_addr(smem_raw) % 128) % 128;
  const uint32_t s0 = smem_addr(smem_raw) + pad;

  auto load_stage = [&](int stage, int64_t k0) {
    const uint32_t sa = s0 + uint32_t(stage * T::kStageBytes), sb = sa + T::kABytes;
    for (int i = tid; i < kM * 8; i += kThreads) {
      const int r = i / 8, c = i % 8;
      const int32_t as = rows_of[r];
      const int64_t kk = k0 + c * 8;
      const bool valid = as >= 0 && kk < k;
      const bf16* src = kGated ? a.x + (valid ? int64_t(as / a.top_k) * a.d_model + kk : 0)
                               : a.act + (valid ? int64_t(as) * a.d_ff + kk : 0);
      cp_async_16(sa + swz(r, c), src, valid);
    }
    for (int i = tid; i < T::kBRows * 8; i += kThreads) {
      const int r = i / 8, c = i % 8;
      const int64_t f = col0 + (kGated ? r % kN : r);
      const int64_t wrow = kGated && r >= kN ? a.d_ff + f : f;
      const int64_t kk = k0 + c * 8;
      const bool valid = f < m && kk < k;
      cp_async_16(sb + swz(r, c), w_base + (valid ? wrow * k + kk : 0), valid);
    }
    cp_async_commit();
  };

  float acc[T::kBRows / 8][4] = {};
  const int64_t n_k = (k + kK - 1) / kK;
  load_stage(0, 0);
  for (int64_t kt = 0; kt < n_k; ++kt) {
    if (kt + 1 < n_k) {
      load_stage(int((kt + 1) & 1), (kt + 1) * kK);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint32_t sa = s0 + uint32_t((kt & 1) * T::kStageBytes), sb = sa + T::kABytes;
    const int mtx = lane / 8;
#pragma unroll
    for (int ks = 0; ks < kK / 16; ++ks) {
      uint32_t af[4];
      ldsm_x4(af, sa + swz(warp * 16 + lane % 8 + 8 * (mtx & 1), 2 * ks + (mtx >> 1)));
#pragma unroll
      for (int nt = 0; nt < T::kBRows / 16; ++nt) {  // two n8 tiles per ldmatrix.x4
        uint32_t bfr[4];
        ldsm_x4(bfr, sb + swz(nt * 16 + lane % 8 + 8 * (mtx >> 1), 2 * ks + (mtx & 1)));
        mma_bf16(acc[2 * nt], af, bfr[0], bfr[1]);
        mma_bf16(acc[2 * nt + 1], af, bfr[2], bfr[3]);
      }
    }
    __syncthreads();  // this stage is refilled by the next iteration's load
  }

  // C fragment: acc[t][2h], acc[t][2h + 1] = row g + 8h, features t * 8 + 2q, + 1 (m is a
  // multiple of 8, so a pair is in range or out together).
  const int g = lane / 4, q = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int32_t as = rows_of[warp * 16 + g + 8 * h];
    if (as < 0) continue;
#pragma unroll
    for (int t = 0; t < kN / 8; ++t) {
      const int64_t col = col0 + t * 8 + 2 * q;
      if (col >= m) continue;
      if constexpr (kGated) {
        float v[2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float gv = to_float(from_float<bf16>(acc[t][2 * h + j]));
          const float uv = to_float(from_float<bf16>(acc[t + kN / 8][2 * h + j]));
          v[j] = silu(gv) * uv;
        }
        *reinterpret_cast<uint32_t*>(a.act + int64_t(as) * a.d_ff + col) = pack_bf16(v[0], v[1]);
      } else {
        *reinterpret_cast<float2*>(a.y + int64_t(as) * a.d_model + col) = float2{acc[t][2 * h], acc[t][2 * h + 1]};
      }
    }
  }
}

template <bool kGated>
void launch_gemm(const MoeExpertsArgs& a, unsigned tiles, cudaStream_t stream) {
  static std::atomic<uint64_t> configured{0};
  once_per_device(configured, [] {
    TF_CUDA_CHECK(cudaFuncSetAttribute(moe_mma_kernel<kGated>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Tile<kGated>::kSmem));
  });
  const int64_t m = kGated ? a.d_ff : a.d_model;
  launch_pdl(moe_mma_kernel<kGated>, dim3(unsigned((m + kN - 1) / kN), tiles), dim3(kThreads),
             size_t(Tile<kGated>::kSmem), stream, a);
}

}  // namespace

bool moe_mma_supported(const MoeExpertsArgs& a) {
  return a.d_model % 8 == 0 && a.d_ff % 8 == 0 && moe_max_tiles(a.rows * a.top_k, a.n_experts) <= 65535;
}

void launch_moe_mma_gemms(const MoeExpertsArgs& a, cudaStream_t stream) {
  const unsigned tiles = unsigned(moe_max_tiles(a.rows * a.top_k, a.n_experts));
  launch_gemm<true>(a, tiles, stream);
  launch_gemm<false>(a, tiles, stream);
  TF_CUDA_CHECK_LAUNCH("moe_mma_kernel");
}

}  // namespace tf::cuda

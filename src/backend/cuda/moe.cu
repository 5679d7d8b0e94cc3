#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/moe.cuh"

namespace tf::cuda {
namespace {

// One thread per row: the top_k by repeated selection over the logits (exp is monotonic, so
// this is the order of the probabilities), then their probabilities.
__global__ void moe_route_kernel(const float* logits, int64_t rows, int64_t ne, int64_t k, bool renormalize,
                                 int32_t* ids, float* weights) {
  pdl_begin();
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x) {
    const float* l = logits + r * ne;
    float mx = -INFINITY;
    for (int64_t e = 0; e < ne; ++e) mx = fmaxf(mx, l[e]);
    double sum = 0;
    for (int64_t e = 0; e < ne; ++e) sum += exp(double(l[e]) - double(mx));
    int32_t chosen[kMoeMaxTopK];
    double p[kMoeMaxTopK], top = 0;
    for (int64_t j = 0; j < k; ++j) {
      int32_t best = -1;
      for (int64_t e = 0; e < ne; ++e) {
        bool taken = false;
        for (int64_t q = 0; q < j; ++q) taken |= chosen[q] == e;
        if (!taken && (best < 0 || l[e] > l[best])) best = int32_t(e);
      }
      chosen[j] = best;
      p[j] = exp(double(l[best]) - double(mx)) / sum;
      top += p[j];
    }
    for (int64_t j = 0; j < k; ++j) {
      ids[r * k + j] = chosen[j];
      weights[r * k + j] = float(renormalize ? p[j] / top : p[j]);
    }
  }
}

// One block: counts per expert, offsets (exclusive prefix sums), then each assignment's
// place in its expert's range. index = [offsets (n_experts + 1), perm (n_assign), the tile
// count and list (moe_tiles)].
__global__ void moe_sort_kernel(const int32_t* ids, int64_t n_assign, int64_t ne, int32_t* index) {
  extern __shared__ int32_t cursor[];  // [ne]
  pdl_begin();
  for (int64_t e = threadIdx.x; e < ne; e += blockDim.x) cursor[e] = 0;
  __syncthreads();
  for (int64_t a = threadIdx.x; a < n_assign; a += blockDim.x) atomicAdd(&cursor[ids[a]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t run = 0;
    for (int64_t e = 0; e < ne; ++e) {
      const int32_t c = cursor[e];
      index[e] = run;
      cursor[e] = run;
      run += c;
    }
    index[ne] = run;
    const MoeTiles tl = moe_tiles(index, n_assign, ne);
    int32_t n = 0;
    for (int64_t e = 0; e < ne; ++e) {
      for (int32_t t = index[e]; t < index[e + 1]; t += int32_t(kMoeTileRows)) {
        tl.list[2 * n] = int32_t(e);
        tl.list[2 * n + 1] = t;
        ++n;
      }
    }
    *tl.count = n;
  }
  __syncthreads();
  int32_t* perm = index + ne + 1;
  for (int64_t a = threadIdx.x; a < n_assign; a += blockDim.x) perm[atomicAdd(&cursor[ids[a]], 1)] = int32_t(a);
}

constexpr int kTileRows = 16, kTileCols = 64, kTileK = 32, kThreads = 256;
constexpr int kRowsPerThread = kTileRows / (kThreads / kTileCols);  // 4

// The grouped GEMM of one (expert, assignment tile, feature tile). kGated: X rows are the
// tokens' x (row a / top_k), weights the expert's gate and up rows, the output act (BF16
// SwiGLU); else X rows are act[a], the weights the expert's down rows, the output y (F32).
// Thread t computes feature t % 64 for the 4 assignments (t / 64) * 4 + [0, 4) of the tile.
template <bool kGated>
__global__ void __launch_bounds__(kThreads) moe_gemm_kernel(MoeExpertsArgs a) {
  __shared__ float xs[kTileRows][kTileK + 1];
  __shared__ float ws[kGated ? 2 : 1][kTileCols][kTileK + 1];
  __shared__ int32_t rows_of[kTileRows];
  pdl_begin();
  const int64_t e = blockIdx.z;
  const int32_t* perm = a.index + a.n_experts + 1;
  const int64_t first = a.index[e] + int64_t(blockIdx.y) * kTileRows, end = a.index[e + 1];
  if (first >= end) return;  // uniform: this expert has no assignments in this tile
  const int64_t n_rows = end - first < kTileRows ? end - first : kTileRows;
  const int64_t k = kGated ? a.d_model : a.d_ff;
  const int64_t m = kGated ? a.d_ff : a.d_model;
  const int64_t col0 = int64_t(blockIdx.x) * kTileCols;
  const int tid = threadIdx.x, tc = tid % kTileCols, tr = tid / kTileCols * kRowsPerThread;
  if (tid < kTileRows) rows_of[tid] = tid < n_rows ? perm[first + tid] : -1;
  __syncthreads();
  const __nv_bfloat16* w_base = kGated ? a.w_gate_up + e * 2 * a.d_ff * a.d_model : a.w_down + e * a.d_model * a.d_ff;

  float acc[2][kRowsPerThread] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
    for (int i = tid; i < kTileRows * kTileK; i += kThreads) {
      const int r = i / kTileK, c = i % kTileK;
      const int32_t as = rows_of[r];
      float v = 0.0f;
      if (as >= 0 && k0 + c < k)
        v = kGated ? to_float(a.x[as / a.top_k * a.d_model + k0 + c]) : to_float(a.act[int64_t(as) * a.d_ff + k0 + c]);
      xs[r][c] = v;
    }
    for (int i = tid; i < kTileCols * kTileK; i += kThreads) {
      const int r = i / kTileK, c = i % kTileK;
      const bool in = col0 + r < m && k0 + c < k;
#pragma unroll
      for (int q = 0; q < (kGated ? 2 : 1); ++q)
        ws[q][r][c] = in ? to_float(w_base[(col0 + r + q * a.d_ff) * k + k0 + c]) : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int c = 0; c < kTileK; ++c) {
#pragma unroll
      for (int q = 0; q < (kGated ? 2 : 1); ++q) {
        const float w = ws[q][tc][c];
#pragma unroll
        for (int rr = 0; rr < kRowsPerThread; ++rr) acc[q][rr] += xs[tr + rr][c] * w;
      }
    }
    __syncthreads();
  }
  const int64_t col = col0 + tc;
  if (col >= m) return;
#pragma unroll
  for (int rr = 0; rr < kRowsPerThread; ++rr) {
    const int32_t as = rows_of[tr + rr];
    if (as < 0) continue;
    if constexpr (kGated) {
      const float g = to_float(from_float<bf16>(acc[0][rr])), u = to_float(from_float<bf16>(acc[1][rr]));
      a.act[int64_t(as) * a.d_ff + col] = from_float<bf16>(silu(g) * u);
    } else {
      a.y[int64_t(as) * a.d_model + col] = acc[0][rr];
    }
  }
}

// out[r, c] = BF16(sum_j weights[r, j] * y[r * top_k + j, c]), summed in j order.
__global__ void moe_combine_kernel(MoeExpertsArgs a) {
  pdl_begin();
  const int64_t n = a.rows * a.d_model;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / a.d_model, c = i % a.d_model;
    float s = 0.0f;
    for (int64_t j = 0; j < a.top_k; ++j) s += a.weights[r * a.top_k + j] * a.y[(r * a.top_k + j) * a.d_model + c];
    a.out[i] = from_float<bf16>(s);
  }
}

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return unsigned(blocks < 65536 ? blocks : 65536);
}

}  // namespace

void launch_moe_route(const float* logits, int64_t rows, int64_t n_experts, int64_t top_k, bool renormalize,
                      int32_t* ids, float* weights, cudaStream_t stream) {
  if (rows == 0) return;
  const unsigned threads = 128, blocks = unsigned((rows + threads - 1) / threads);
  launch_pdl(moe_route_kernel, dim3(blocks), dim3(threads), 0, stream, logits, rows, n_experts, top_k, renormalize,
             ids, weights);
  TF_CUDA_CHECK_LAUNCH("moe_route_kernel");
}

void launch_moe_experts(const MoeExpertsArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  const int64_t n_assign = a.rows * a.top_k;
  launch_pdl(moe_sort_kernel, dim3(1), dim3(1024), size_t(a.n_experts) * sizeof(int32_t), stream, a.ids, n_assign,
             a.n_experts, a.index);
  if (a.tensor_cores && moe_mma_supported(a)) {
    launch_moe_mma_gemms(a, stream);
  } else {
    const unsigned tiles = unsigned((n_assign + kTileRows - 1) / kTileRows);
    launch_pdl(moe_gemm_kernel<true>,
               dim3(unsigned((a.d_ff + kTileCols - 1) / kTileCols), tiles, unsigned(a.n_experts)), dim3(kThreads), 0,
               stream, a);
    launch_pdl(moe_gemm_kernel<false>,
               dim3(unsigned((a.d_model + kTileCols - 1) / kTileCols), tiles, unsigned(a.n_experts)), dim3(kThreads),
               0, stream, a);
  }
  launch_pdl(moe_combine_kernel, dim3(grid_for(a.rows * a.d_model)), dim3(kThreads), 0, stream, a);
  TF_CUDA_CHECK_LAUNCH("moe_experts kernels");
}

}  // namespace tf::cuda

// Mixture-of-experts kernels: the router's softmax and top-k, and the experts' SwiGLU MLPs as
// grouped GEMMs over the assignments (token, choice) sorted by expert.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tf::cuda {

constexpr int64_t kMoeMaxTopK = 32;
constexpr int64_t kMoeMaxExperts = 4096;

// Per row: p = softmax(logits) (in double), the top_k experts by logit (descending, ties to
// the lower id; the order of p), weights p, divided by their sum when `renormalize`.
//   logits [rows, n_experts] F32, ids [rows, top_k] I32, weights [rows, top_k] F32;
//   top_k <= kMoeMaxTopK
void launch_moe_route(const float* logits, int64_t rows, int64_t n_experts, int64_t top_k, bool renormalize,
                      int32_t* ids, float* weights, cudaStream_t stream);

struct MoeExpertsArgs {
  const __nv_bfloat16* x = nullptr;        // [rows, d_model]
  const int32_t* ids = nullptr;            // [rows, top_k], each in [0, n_experts)
  const float* weights = nullptr;          // [rows, top_k]
  const __nv_bfloat16* w_gate_up = nullptr;  // [n_experts * 2 d_ff, d_model]: expert e's gate rows, then its up rows
  const __nv_bfloat16* w_down = nullptr;     // [n_experts * d_model, d_ff]
  __nv_bfloat16* out = nullptr;            // [rows, d_model]
  int64_t rows = 0, d_model = 0, d_ff = 0, n_experts = 0, top_k = 0;
  // Scratch (device): index (int32: offsets [n_experts + 1], perm [rows * top_k], the tile
  // count and the tile list, moe_tiles), act [rows * top_k, d_ff] BF16, y [rows * top_k,
  // d_model] F32.
  int32_t* index = nullptr;
  __nv_bfloat16* act = nullptr;
  float* y = nullptr;
  bool tensor_cores = true;  // the mma.sync GEMMs (moe_mma.cu) where moe_mma_supported
};

// The tensor-core GEMMs' work list: tiles of up to kMoeTileRows of one expert's sorted
// assignments, as (expert, first sorted position) pairs in expert order; at most
// moe_max_tiles of them (every expert may end with a partial tile).
constexpr int64_t kMoeTileRows = 64;
__host__ __device__ inline int64_t moe_max_tiles(int64_t n_assign, int64_t n_experts) {
  return (n_assign + kMoeTileRows - 1) / kMoeTileRows + n_experts;
}
struct MoeTiles {
  int32_t* count;  // [1]
  int32_t* list;   // [2 * moe_max_tiles]
};
__host__ __device__ inline MoeTiles moe_tiles(int32_t* index, int64_t n_assign, int64_t n_experts) {
  int32_t* p = index + n_experts + 1 + n_assign;
  return MoeTiles{p, p + 1};
}
// Ints of MoeExpertsArgs::index for a shape.
inline int64_t moe_index_ints(int64_t rows, int64_t top_k, int64_t n_experts) {
  return n_experts + 1 + rows * top_k + 1 + 2 * moe_max_tiles(rows * top_k, n_experts);
}

// out[r] = sum_j weights[r, j] * E_e(x[r]), e = ids[r, j], in j order (Backend::moe_experts).
// Four launches whatever the number of experts: (1) one block sorts the assignments a = r *
// top_k + j by expert (counts, offsets, positions; the order within an expert does not
// matter, each assignment is computed alone); (2) a grouped GEMM, grid z = expert, y = tiles
// of 16 of the expert's assignments, x = tiles of 64 features: act[a] = BF16(silu(BF16(gate))
// * BF16(up)) as the dense path rounds; (3) the same grouped GEMM for the down projection:
// y[a] = act[a] . Wdown_e in F32; (4) out[r] = BF16(sum_j weights[r, j] * y[r * top_k + j]).
// A block whose tile lies beyond its expert's assignments exits before reading any weight,
// so a decode step reads the chosen experts' weights only. (2) and (3) run on tensor cores
// (moe_mma.cu, over the sort's tile list) when a.tensor_cores and moe_mma_supported, else as
// shared-memory tiled SIMT GEMMs in F32 (grid z = expert, y = tiles of 16 assignments).
void launch_moe_experts(const MoeExpertsArgs& a, cudaStream_t stream);

// moe_mma.cu: d_model and d_ff multiples of 8 (16-byte rows), a tile list that fits a grid.
bool moe_mma_supported(const MoeExpertsArgs& a);
void launch_moe_mma_gemms(const MoeExpertsArgs& a, cudaStream_t stream);

}  // namespace tf::cuda

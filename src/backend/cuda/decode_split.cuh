// What the two decode attention kernels (decode_attention.cu on CUDA cores,
// decode_attention_mma.cu on tensor cores) share: the key range of a block's split, and
// where a split's merged state goes (the output row with one split, else its workspace
// slot, which combine_kernel reads back). Device code only.
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/common.cuh"

namespace tf::cuda {

// Block-table entries of one split a decode block keeps in shared memory.
constexpr int32_t kDecodeStagedBlocks = 64;

// Split `split` of decode item `item` (token row batch.decode_tokens[item] of sequence
// batch.decode_seqs[item]; a sequence verifying several tokens has one item per row): the row
// `it` at position `qpos` and the keys [k_begin, k_end) (causal: up to qpos, so a row of a
// short chunk sees the chunk's rows before it; empty past them; the window's first key counts
// from qpos - window + 1).
struct DecodeKeys {
  int32_t it, qpos, k_begin, k_end;
};
__device__ __forceinline__ DecodeKeys decode_keys(const PagedAttentionArgs& a, int32_t item, int32_t split) {
  const int32_t it = a.batch.decode_tokens[item];
  const int32_t qpos = a.batch.positions[it];
  const int32_t first = a.sliding_window > 0 ? max(0, qpos - int32_t(a.sliding_window) + 1) : 0;
  const int32_t split_keys = *a.batch.split_keys;
  const int32_t k_begin = first + split * split_keys;
  return {it, qpos, k_begin, min(qpos + 1, k_begin + split_keys)};
}

// The workspace slot (m, l, acc[head_dim]) of head h's split `split` for the decode row of
// this block (blockIdx.x).
__device__ __forceinline__ float* split_state(const PagedAttentionArgs& a, int64_t h, int32_t split) {
  return a.workspace + ((int64_t(blockIdx.x) * a.n_heads + h) * a.n_splits + split) * (a.head_dim + 2);
}

// A split without keys: its heads' slots say so (m = -inf, l = 0), read by the first
// `group` threads of the block.
__device__ __forceinline__ void mark_split_empty(const PagedAttentionArgs& a, int64_t kvh, int32_t split) {
  const int64_t group = a.n_heads / a.n_kv_heads;
  if (a.n_splits > 1 && threadIdx.x < group) {
    float* ws = split_state(a, kvh * group + threadIdx.x, split);
    ws[0] = -INFINITY;
    ws[1] = 0.0f;
  }
}

// Element d of head h's merged state for token row `it`: out = sum_a / sum_l with one split,
// else the split's slot gets (m, l, acc[d]), m in natural-log units as combine_kernel expects.
__device__ __forceinline__ void store_split(const PagedAttentionArgs& a, int32_t it, int64_t h, int32_t split,
                                            int64_t d, float m, float sum_l, float sum_a) {
  if (a.n_splits == 1) {
    a.out[int64_t(it) * a.n_heads * a.head_dim + h * a.head_dim + d] = from_float<bf16>(sum_a / sum_l);
    return;
  }
  float* ws = split_state(a, h, split);
  ws[2 + d] = sum_a;
  if (d == 0) {
    ws[0] = m;
    ws[1] = sum_l;
  }
}

}  // namespace tf::cuda

// Paged causal attention (prefill chunks and decodes alike) over the KV pool.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/batch_args.h"
#include "core/dtype.h"

namespace tf::cuda {

constexpr int64_t kAttnMaxHeadDim = 256;

struct PagedAttentionArgs {
  const __nv_bfloat16* qkv = nullptr;  // [n_tokens, (n_heads + 2 * n_kv_heads) * head_dim], q read
  const void* k_pool = nullptr;        // this layer's K: [n_blocks, n_kv_heads, block_size, head_dim]
  const void* v_pool = nullptr;        // this layer's V, same layout
  DType kv_dtype = DType::BF16;        // F32, BF16, F16, I8 or FP8
  const float* k_scale = nullptr;      // I8, FP8: scale of each pool row [n_blocks * n_kv_heads * block_size]
  const float* v_scale = nullptr;
  __nv_bfloat16* out = nullptr;        // [n_tokens, n_heads * head_dim]
  BatchArgs batch;                     // positions, seq_starts, block_tables, work lists
  const int32_t* tokens = nullptr;     // plain kernel: the token rows to run (device)
  int32_t n_list = 0;
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0, block_size = 0;
  float scale = 1.0f;
  int64_t sliding_window = 0;  // 0 = full causal; else keys with pos > q_pos - window
  // Decode kernel (flash-decoding): each sequence's key range is cut into pieces of
  // batch.split_keys[0] keys, one thread block each, at most n_splits of them (the grid); with
  // n_splits > 1 the partial results go to `workspace` ([n_decode items, n_heads, n_splits] x
  // (head_dim + 2) floats; unused splits only mark theirs empty) and a second kernel combines
  // them, except where the tensor-core kernel merges them in a thread block cluster
  // (decode_cluster, n_splits <= kDecodeClusterMax): the workspace is then unused.
  int32_t n_splits = 1;
  float* workspace = nullptr;
  bool decode_mma = true;      // BF16, INT8, FP8 pools: the tensor-core decode kernel where it applies
  bool decode_cluster = false;  // the tensor-core kernel's splits merged through distributed shared memory
  // the tensor-core kernel reads the batch metadata and copies its first tile's keys older than
  // the sequence's first new position before griddepcontrol.wait (decode_attention_mma.cu)
  bool decode_early_keys = false;
};

// Calls f(std::integral_constant<int, D>{}) for the kernels' head_dim D: 64, 128, else 256 (the
// callers' *_supported() checks have ruled out the rest).
template <typename F>
void with_head_dim(int64_t head_dim, F&& f) {
  if (head_dim == 64)
    f(std::integral_constant<int, 64>{});
  else if (head_dim == 128)
    f(std::integral_constant<int, 128>{});
  else
    f(std::integral_constant<int, 256>{});
}

// out[t, h] = softmax over keys kp in [first, positions[t]] of scale * q[t, h] . K[kp] applied
// to V[kp], where first = max(0, positions[t] - window + 1) with a window, else 0; K/V of key
// kp of token t's sequence s live at block block_tables[s][kp / block_size], offset
// kp % block_size, kv head h / (n_heads / n_kv_heads). head_dim <= kAttnMaxHeadDim.
// The plain kernel (attention.cu) runs this for the n_list token rows of `tokens`.
void launch_paged_attention(const PagedAttentionArgs& a, cudaStream_t stream);

// The same for the items of batch.decode_seqs / batch.decode_tokens (a sequence's one new
// token, or each row of a short chunk), GQA-grouped: one thread block reads each K/V row once
// for all query heads of its kv head (decode_attention.cu). decode_supported() says whether the shape has a specialisation
// (head_dim 64, 128 or 256, up to 8 query heads per kv head); the plain kernel serves the
// rest.
bool decode_supported(int64_t head_dim, int64_t group);
void launch_decode_attention(const PagedAttentionArgs& a, cudaStream_t stream);

// launch_decode_attention's tensor-core kernel (decode_attention_mma.cu), taken when
// a.decode_mma is set and decode_mma_supported(): BF16, INT8 and FP8 pools, head_dim 64, 128
// or 256, groups up to 8. Same splits and workspace format (the combine kernel is shared),
// unless a.decode_cluster and 1 < n_splits <= kDecodeClusterMax: then one thread block
// cluster holds a (item, kv head)'s splits, which merge through distributed shared memory
// into `out`, and this returns true (no combine kernel to run).
constexpr int32_t kDecodeClusterMax = 8;  // the portable cluster size
bool decode_mma_supported(DType kv_dtype, int64_t head_dim, int64_t group);
bool launch_decode_attention_mma(const PagedAttentionArgs& a, cudaStream_t stream);

// The same for the query tiles of batch.flash_tiles, on tensor cores (flash_attention.cu):
// head_dim 64, 128 or 256, any KV dtype (read into shared memory as BF16). BF16, INT8 and FP8
// pools at head_dim 64 or 128 take launch_flash_attention_bf16 (flash_attention_bf16.cu:
// FlashAttention-2 with scores and output in registers); F16 and F32 pools, and every dtype at
// head_dim 256, a WMMA kernel that converts while loading and keeps the output in shared memory.
bool flash_supported(int64_t head_dim);
void launch_flash_attention(const PagedAttentionArgs& a, cudaStream_t stream);
void launch_flash_attention_bf16(const PagedAttentionArgs& a, cudaStream_t stream);

// Prefill chunks of at least this many tokens take a tiled kernel in "auto" mode, shorter
// ones the plain kernel. Measured on the H200 (docs/PERF.md, "attention crossover", batch-1
// prefill of the 8B shape): the FlashAttention-2 kernel (BF16 pools) beats the plain one at
// every length measured, 8 tokens being the shortest (+2% at 8, +11% at 32, +35% at 64, 2.1x
// at 128, 8.1x at 512); the WMMA kernel (other pools, and head_dim 256) lost at 8-32 tokens (by 2-7%) and won
// from 64 on (8% at 64, 51% at 128, 4.7x at 512, 12x at 4096).
constexpr int32_t kFlashMinRowsBf16 = 8;
constexpr int32_t kFlashMinRowsOther = 64;
inline int32_t flash_min_rows(DType kv_dtype, int64_t head_dim) {
  return kv_dtype == DType::BF16 && head_dim <= 128 ? kFlashMinRowsBf16 : kFlashMinRowsOther;
}

// In "auto" mode, chunks of 2 to this many rows that the tiled kernel does not take (shorter
// than flash_min_rows, or a head_dim it lacks) run on the decode kernel, one item per row:
// a speculative verification of up to 7 proposals reads the keys once per row, split-K and
// GQA-grouped, where the plain kernel reads them once per row and query head.
constexpr int32_t kDecodeChunkMaxRows = 8;

}  // namespace tf::cuda

// Paged causal attention (prefill chunks and decodes alike) over the KV pool.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/batch_args.h"
#include "core/dtype.h"

namespace tf::cuda {

constexpr int64_t kAttnMaxHeadDim = 256;

struct PagedAttentionArgs {
  const __nv_bfloat16* qkv = nullptr;  // [n_tokens, (n_heads + 2 * n_kv_heads) * head_dim], q read
  const void* k_pool = nullptr;        // this layer's K: [n_blocks, n_kv_heads, block_size, head_dim]
  const void* v_pool = nullptr;        // this layer's V, same layout
  DType kv_dtype = DType::BF16;        // F32, BF16 or F16
  __nv_bfloat16* out = nullptr;        // [n_tokens, n_heads * head_dim]
  BatchArgs batch;                     // positions, seq_starts, block_tables
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0, block_size = 0;
  float scale = 1.0f;
  int64_t sliding_window = 0;  // 0 = full causal; else keys with pos > q_pos - window
};

// out[t, h] = softmax over keys kp in [first, positions[t]] of scale * q[t, h] . K[kp] applied
// to V[kp], where first = max(0, positions[t] - window + 1) with a window, else 0; K/V of key
// kp of token t's sequence s live at block block_tables[s][kp / block_size], offset
// kp % block_size, kv head h / (n_heads / n_kv_heads). head_dim <= kAttnMaxHeadDim.
void launch_paged_attention(const PagedAttentionArgs& a, cudaStream_t stream);

}  // namespace tf::cuda

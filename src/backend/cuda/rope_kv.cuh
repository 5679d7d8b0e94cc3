// Fused QKV epilogue: RoPE on q and k in place, then K and V written to the paged KV pool.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/batch_args.h"
#include "core/dtype.h"

namespace tf::cuda {

struct RopeKvArgs {
  __nv_bfloat16* qkv = nullptr;      // [n_tokens, (n_heads + 2 * n_kv_heads) * head_dim]
  const float* inv_freq = nullptr;   // [head_dim / 2]
  void* k_pool = nullptr;            // this layer's K: [n_blocks, n_kv_heads, block_size, head_dim]
  void* v_pool = nullptr;            // this layer's V, same layout
  DType kv_dtype = DType::BF16;      // F32, BF16, F16, I8 or FP8
  float* k_scale = nullptr;          // I8, FP8: scale of each pool row [n_blocks * n_kv_heads * block_size]
  float* v_scale = nullptr;
  BatchArgs batch;                   // positions, slot_mapping, n_tokens
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0, block_size = 0;
  bool fused = true;                 // false: rotate in one kernel, write the pool in another
};

// Rotate-half RoPE (Hugging Face Llama): dims (i, i + head_dim/2) of every q and k head are
// rotated by angle positions[t] * inv_freq[i] (the angle in F32, as the reference); the
// rotated values are rounded to BF16 in qkv and, separately from the float values, to the
// pool dtype in K. V is copied unrotated. Token t's rows go to slot slot_mapping[t]. I8 pools
// get each row quantized as src/quant/kv_int8.h does (scale = max|row| / 127, round half to
// even, non-finite rows: scale NaN and zeros), FP8 pools as src/quant/kv_fp8.h does (scale =
// max|row| / 448, E4M3 round to nearest even with saturation, the same edge cases).
// head_dim <= 256.
// Unfused (fused = false, for measuring the fusion): a second kernel reads k and v back from
// qkv, so K is stored from the BF16-rounded rotation.
void launch_rope_kv_write(const RopeKvArgs& a, cudaStream_t stream);

}  // namespace tf::cuda

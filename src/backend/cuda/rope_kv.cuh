// Fused QKV epilogue: q/k norms and RoPE on q and k in place, then K and V written to the paged
// KV pool.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/batch_args.h"
#include "core/dtype.h"

namespace tf::cuda {

struct RopeKvArgs {
  __nv_bfloat16* qkv = nullptr;      // [n_tokens, (n_heads + 2 * n_kv_heads) * head_dim]
  const float* inv_freq = nullptr;   // [n_rot / 2]
  const float* inv_freq_long = nullptr;  // [n_rot / 2] or null: the frequencies from position long_from on
  int32_t long_from = 0;
  float mscale = 1.0f;               // cos and sin multiplied by it
  int64_t n_rot = 0;                 // rotated dims (even, <= head_dim); the rest pass through
  const __nv_bfloat16* q_norm = nullptr;  // [head_dim] or null: RMSNorm of each q head first
  const __nv_bfloat16* k_norm = nullptr;  // [head_dim] or null: the same for k heads
  float eps = 0.0f;
  void* k_pool = nullptr;            // this layer's K: [n_blocks, n_kv_heads, block_size, head_dim]
  void* v_pool = nullptr;            // this layer's V, same layout
  DType kv_dtype = DType::BF16;      // F32, BF16, F16, I8 or FP8
  float* k_scale = nullptr;          // I8, FP8: scale of each pool row [n_blocks * n_kv_heads * block_size]
  float* v_scale = nullptr;
  BatchArgs batch;                   // positions, slot_mapping (of the layer's KV group), n_tokens
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0, block_size = 0;
  bool fused = true;                 // false: rotate in one kernel, write the pool in another
  // Or null: the qkv rows are an FP8 GEMM's unit-scale sums, [n_tokens, qkv row] BF16 (F32
  // with acc_f32), read as acc * acc_x_scale[token] * acc_w_scale[column] (+ acc_bias[column])
  // rounded to BF16 (what fp8_scale_kernel writes); every head's values are also stored to
  // qkv. Needs fused.
  const void* acc = nullptr;
  bool acc_f32 = false;
  const float* acc_x_scale = nullptr;
  const float* acc_w_scale = nullptr;
  const __nv_bfloat16* acc_bias = nullptr;

  // Plain Llama RoPE: every dim rotated, no norms, one frequency table, no mscale (what the
  // QKV GEMV's epilogue implements).
  bool plain_rope() const {
    return n_rot == head_dim && !q_norm && !k_norm && !inv_freq_long && mscale == 1.0f;
  }
};

// Backend::rope_kv_write on BF16 rows (backend.h QkRope): with q_norm / k_norm, each q / k
// head is RMS-normalized over head_dim in float (h / sqrt(mean(h^2) + eps) * w); then
// rotate-half RoPE of the first n_rot dims: the pair (i, i + n_rot/2) rotated by angle
// positions[t] * freq[i] (the angle in F32, as the reference), freq = inv_freq_long from
// position long_from on when set, else inv_freq, cos and sin times mscale. The results are
// rounded to BF16 in qkv and, separately from the float values, to the pool dtype in K. V is
// copied unchanged. Token t's rows go to slot slot_mapping[t]. I8 pools
// get each row quantized as src/quant/kv_int8.h does (scale = max|row| / 127, round half to
// even, non-finite rows: scale NaN and zeros), FP8 pools as src/quant/kv_fp8.h does (scale =
// max|row| / 448, E4M3 round to nearest even with saturation, the same edge cases).
// head_dim <= 256.
// Unfused (fused = false, for measuring the fusion): a second kernel reads k and v back from
// qkv, so K is stored from the BF16-rounded rotation.
void launch_rope_kv_write(const RopeKvArgs& a, cudaStream_t stream);

}  // namespace tf::cuda

// The CUDA backend's attention ops: the fused RoPE + KV write, and attention dispatched over the
// work lists set_batch made (plain, split-K decode and tiled kernels), with the decode
// workspace they need.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_backend_util.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/rope_kv.cuh"
#include "backend/shape_checks.h"

namespace tf::cuda {

using namespace detail;

void CudaBackend::check_layer(int layer, const AttentionParams& p) const {
  TF_ASSERT(!k_cache_.empty(), "the KV cache is not initialized (init_kv_cache)");
  TF_ASSERT(layer >= 0 && layer < int(kv_spec_.n_layers), "layer {} of a {}-layer KV cache", layer,
            kv_spec_.n_layers);
  TF_ASSERT(p.n_kv_heads == kv_spec_.kv_heads_of(layer) && p.head_dim == kv_spec_.head_dim,
            "attention params ({} kv heads, head_dim {}) vs layer {}'s KV cache ({}, {})", p.n_kv_heads, p.head_dim,
            layer, kv_spec_.kv_heads_of(layer), kv_spec_.head_dim);
  TF_ASSERT(p.n_heads > 0 && p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0, "{} heads over {} kv heads",
            p.n_heads, p.n_kv_heads);
  TF_ASSERT(p.head_dim % 2 == 0 && p.head_dim <= kAttnMaxHeadDim, "head_dim {}: the CUDA kernels take even "
            "head_dim <= {}", p.head_dim, kAttnMaxHeadDim);
}

void CudaBackend::rope_kv_write(int layer, const TensorView& qkv, const QkRope& rope, const AttentionParams& p) {
  OpScope scope(prof(), "rope_kv_write", stream_);
  launch_rope_kv_write(rope_args(layer, qkv, rope, p), stream_);
}

BatchArgs CudaBackend::layer_batch(int layer) const {
  BatchArgs b = dev_batch_;
  const int64_t g = kv_spec_.group_of(layer);
  b.block_tables += g * int64_t(batch_.n_seqs()) * batch_.max_blocks;
  b.slot_mapping += g * int64_t(batch_.n_tokens());
  return b;
}

RopeKvArgs CudaBackend::rope_args(int layer, const TensorView& qkv, const QkRope& rope, const AttentionParams& p) const {
  check_layer(layer, p);
  check_dev(qkv, DType::BF16, "rope_kv_write qkv");
  check_dev(rope.inv_freq, DType::F32, "rope_kv_write inv_freq");
  if (rope.inv_freq_long.data) check_dev(rope.inv_freq_long, DType::F32, "rope_kv_write inv_freq_long");
  if (rope.q_norm.data) check_dev(rope.q_norm, DType::BF16, "rope_kv_write q_norm");
  if (rope.k_norm.data) check_dev(rope.k_norm, DType::BF16, "rope_kv_write k_norm");
  check_2d(qkv, batch_.n_tokens(), (p.n_heads + 2 * p.n_kv_heads) * p.head_dim, "rope_kv_write qkv");
  check_qk_rope(rope, p.head_dim);
  return RopeKvArgs{.qkv = bf_mut(qkv),
                    .inv_freq = rope.inv_freq.as<const float>(),
                    .inv_freq_long = rope.inv_freq_long.data ? rope.inv_freq_long.as<const float>() : nullptr,
                    .long_from = rope.long_from,
                    .mscale = rope.mscale,
                    .n_rot = 2 * rope.inv_freq.numel(),
                    .q_norm = rope.q_norm.data ? bf(rope.q_norm) : nullptr,
                    .k_norm = rope.k_norm.data ? bf(rope.k_norm) : nullptr,
                    .eps = rope.eps,
                    .k_pool = k_cache_[size_t(layer)].data,
                    .v_pool = v_cache_[size_t(layer)].data,
                    .kv_dtype = kv_spec_.dtype,
                    .k_scale = scales_of(k_scale_, layer),
                    .v_scale = scales_of(v_scale_, layer),
                    .batch = layer_batch(layer),
                    .n_heads = p.n_heads,
                    .n_kv_heads = p.n_kv_heads,
                    .head_dim = p.head_dim,
                    .block_size = kv_spec_.block_size,
                    .fused = opt_.fusion};
}

void CudaBackend::attention(int layer, const TensorView& qkv, const AttentionParams& p, const TensorView& out) {
  OpScope scope(prof(), dev_batch_.n_decode == batch_.n_tokens() ? "attention (decode)" : "attention (prefill/mixed)",
                stream_);
  check_layer(layer, p);
  check_dev(qkv, DType::BF16, "attention qkv");
  check_dev(out, DType::BF16, "attention out");
  check_2d(qkv, batch_.n_tokens(), (p.n_heads + 2 * p.n_kv_heads) * p.head_dim, "attention qkv");
  check_2d(out, batch_.n_tokens(), p.n_heads * p.head_dim, "attention out");
  PagedAttentionArgs a{.qkv = bf(qkv),
                       .k_pool = k_cache_[size_t(layer)].data,
                       .v_pool = v_cache_[size_t(layer)].data,
                       .kv_dtype = kv_spec_.dtype,
                       .k_scale = scales_of(k_scale_, layer),
                       .v_scale = scales_of(v_scale_, layer),
                       .out = bf_mut(out),
                       .batch = layer_batch(layer),
                       .n_heads = p.n_heads,
                       .n_kv_heads = p.n_kv_heads,
                       .head_dim = p.head_dim,
                       .block_size = kv_spec_.block_size,
                       .scale = p.scale,
                       .sliding_window = p.sliding_window,
                       .decode_mma = opt_.decode_mma,
                       .decode_cluster = opt_.decode_cluster,
                       .decode_early_keys = opt_.decode_early_keys};
  // Prefill chunks: the plain kernel over their tokens.
  a.tokens = dev_batch_.plain_tokens;
  a.n_list = dev_batch_.n_plain;
  launch_paged_attention(a, stream_);
  launch_flash_attention(a, stream_);
  if (dev_batch_.n_decode == 0) return;
  if (!decode_supported(p.head_dim, p.n_heads / p.n_kv_heads)) {
    a.tokens = dev_batch_.decode_tokens;
    a.n_list = dev_batch_.n_decode;
    launch_paged_attention(a, stream_);
    return;
  }
  // Decode: the grid holds as many splits as set_batch may ask for (the split size itself
  // is read from device memory), a number fixed by the batch shape, so a recorded step
  // stays valid while contexts grow.
  const int64_t max_keys = int64_t(batch_.max_blocks) * kv_spec_.block_size;
  const int64_t quantum = decode_split_quantum();
  a.n_splits = int32_t(std::min(decode_want_splits(dev_batch_.n_decode), (max_keys + quantum - 1) / quantum));
  if (a.n_splits > 1)
    a.workspace = attention_workspace(size_t(dev_batch_.n_decode) * size_t(p.n_heads) * size_t(a.n_splits) *
                                      size_t(p.head_dim + 2));
  launch_decode_attention(a, stream_);
}

// The tensor-core kernel streams a split through shared memory in 64-key tiles with the next
// tile in flight, so one block per SM already keeps the memory busy and every extra split
// costs partial states and the combine kernel: measured on the H200 (docs/PERF.md), batch 1
// was fastest with 6 splits of 64 keys at 384 keys (240.5 tokens/s; 12 splits of 32: 236.6,
// 1: 215.3), batch 32 with one split (6,146; 3: 5,976). The CUDA-core kernel holds a few
// key steps per lane group in flight (its register ring) and keeps about four blocks per SM.
bool CudaBackend::decode_on_tensor_cores() const {
  return opt_.decode_mma && decode_mma_supported(kv_spec_.dtype, kv_spec_.head_dim, /*group=*/1);
}

int64_t CudaBackend::decode_want_splits(int64_t n_decode) const {
  if (opt_.decode_splits > 0) return opt_.decode_splits;
  const int64_t units = std::max<int64_t>(1, n_decode * std::max<int64_t>(1, kv_spec_.n_kv_heads));
  const int64_t blocks_per_sm = decode_on_tensor_cores() ? 1 : 4;
  // Not capped at a cluster's worth (kDecodeClusterMax) for the cluster merge: at long contexts
  // and few sequences 8 splits left SMs idle and lost more than the combine kernel costs
  // (docs/PERF.md, "Decode attention's splits merged in a cluster").
  return std::max<int64_t>(1, (blocks_per_sm * int64_t(n_sms_) + units - 1) / units);
}

int32_t CudaBackend::decode_split_quantum() const { return decode_on_tensor_cores() ? 64 : 32; }

// Grows only; growing drops the recordings (they hold the old address). Never during a
// recording: the model runs every key eagerly first, with the same sizes.
float* CudaBackend::attention_workspace(size_t floats) {
  if (floats <= attn_ws_floats_) return attn_ws_;
  TF_ASSERT(!capturing_, "attention workspace grows while recording a CUDA Graph");
  graph_reset();
  if (attn_ws_) release(make_view(attn_ws_, DType::F32, {int64_t(attn_ws_floats_)}, Device::Cuda));
  attn_ws_floats_ = std::max(floats, 2 * attn_ws_floats_);
  attn_ws_ = static_cast<float*>(alloc_bytes(attn_ws_floats_ * sizeof(float)));
  return attn_ws_;
}

}  // namespace tf::cuda

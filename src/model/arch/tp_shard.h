// This rank's widths under tensor parallelism (Megatron-LM): its query heads, KV heads, MLP
// columns and vocabulary rows, which size its scratch and attention. How each weight is cut
// to match is in the weight table (weight_table.h TpSlice; the loader applies it):
//
//   column-parallel (rows of W [out, in] split; outputs split, no communication):
//     q_proj, k_proj, v_proj (+ biases): by heads;  gate_proj, up_proj: by d_ff;
//     lm_head: by vocabulary (the logits are all-gathered)
//   row-parallel (columns of W split; partial outputs, one all-reduce after each):
//     o_proj: by heads;  down_proj: by d_ff
//   replicated: embedding, norms (and o_proj's bias, which only rank 0 adds)
//
// Rank r holds query heads [r H/N, (r+1) H/N). KV heads split the same way when N divides
// them; when the model has fewer KV heads than ranks (N a multiple of n_kv_heads), each
// rank keeps the one KV head its query heads read, so KV heads are replicated N/n_kv times
// (tp_groups() is that rule for every split). Each layer is cut by its own widths (a pruned
// model's layers differ: config.h heads_of, ...), so N must split every layer.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace tf {

// This rank's share of one layer.
struct TpLayer {
  int64_t head0 = 0, n_heads = 0;        // query heads [head0, head0 + n_heads)
  int64_t kv_head0 = 0, n_kv_heads = 0;  // KV heads [kv_head0, kv_head0 + n_kv_heads)
  int64_t ff0 = 0, d_ff = 0;             // MLP columns [ff0, ff0 + d_ff)
};

struct TpShard {
  int32_t rank = 0, size = 1;
  std::vector<TpLayer> layers;      // [n_layers]
  int64_t vocab0 = 0, n_vocab = 0;  // LM-head rows [vocab0, vocab0 + n_vocab)

  const TpLayer& layer(int64_t il) const { return layers[size_t(il)]; }
  // The widest layer's widths on this rank (the scratch buffers are sized for them).
  int64_t max_heads() const;
  int64_t max_qkv_heads() const;  // n_heads + 2 n_kv_heads
  int64_t max_d_ff() const;
  // [n_layers] this rank's KV heads per layer, empty when equal in every layer (KvCacheSpec::layer_kv_heads).
  std::vector<int64_t> kv_heads_per_layer() const;
  int64_t max_kv_heads() const;
};

// Rank `rank` of `size`; throws tf::Error naming the dimension (and, for a model whose layers
// differ, the layer) that `size` does not split.
TpShard tp_shard(const ModelConfig& cfg, int32_t rank, int32_t size);

// Rows [row0, row0 + n) of t (any rank >= 1), as a view of the same memory.
TensorView slice_rows(const TensorView& t, int64_t row0, int64_t n);
// Columns [col0, col0 + n) of the 2-D t, copied into a new buffer `buf` ([rows, n]).
TensorView copy_cols(const TensorView& t, int64_t col0, int64_t n, std::unique_ptr<uint8_t[]>& buf);

}  // namespace tf

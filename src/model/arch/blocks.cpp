#include "model/arch/blocks.h"

#include <cmath>

#include "dist/communicator.h"

namespace tf {

using Epi = MatmulFusion::Epilogue;

AttentionParams standard_attention(const ModelConfig& cfg, const TpShard& shard) {
  return AttentionParams{.n_heads = shard.n_heads,
                         .n_kv_heads = shard.n_kv_heads,
                         .head_dim = cfg.head_dim,
                         .scale = float(1.0 / std::sqrt(double(cfg.head_dim))),
                         .sliding_window = cfg.sliding_window};
}

void project_add(const BlockContext& ctx, const Activations& a, const TensorView& y, const TensorView& w,
                 const TensorView& b) {
  if (!ctx.comm) return ctx.be.matmul_fused(y, w, b, a.x, MatmulFusion{.epilogue = Epi::AddTo, .y = a.delta});
  ctx.be.matmul(y, w, b, a.delta);
  ctx.comm->all_reduce_sum(a.delta);  // row-parallel projection: sum the ranks' partial outputs
  ctx.be.add(a.x, a.delta);
}

void attention_block(const BlockContext& ctx, const Activations& a, const AttentionWeights& w,
                     const AttentionLayer& layer) {
  ctx.be.matmul_fused(a.x, w.wqkv, w.bqkv, a.qkv,
                      MatmulFusion{.norm_w = w.norm, .eps = ctx.eps, .h = a.h, .epilogue = Epi::RopeKv,
                                   .rope_layer = layer.layer, .inv_freq = layer.inv_freq, .attn = layer.params});
  ctx.be.attention(layer.layer, a.qkv, layer.params, a.attn);
  project_add(ctx, a, a.attn, w.wo, w.bo);
}

void swiglu_mlp_block(const BlockContext& ctx, const Activations& a, const MlpWeights& w) {
  ctx.be.matmul_fused(a.x, w.wgate_up, TensorView{}, a.act,
                      MatmulFusion{.norm_w = w.norm, .eps = ctx.eps, .h = a.h, .epilogue = Epi::Swiglu,
                                   .y = a.gate_up});
  project_add(ctx, a, a.act, w.wdown, TensorView{});
}

void lm_head_block(const BlockContext& ctx, const Activations& a, const TensorView& final_norm,
                   const TensorView& lm_head) {
  ctx.be.rms_norm(a.x, final_norm, ctx.eps, a.h);
  ctx.be.gather_logit_rows(a.h, a.out_rows);
  ctx.be.matmul(a.out_rows, lm_head, TensorView{}, a.logits);
}

}  // namespace tf

#include "model/arch/blocks.h"

#include <cmath>

#include "dist/communicator.h"

namespace tf {

using Epi = MatmulFusion::Epilogue;

AttentionParams layer_attention_params(const ModelConfig& cfg, const TpShard& shard, int64_t il) {
  const TpLayer& l = shard.layer(il);
  return AttentionParams{.n_heads = l.n_heads,
                         .n_kv_heads = l.n_kv_heads,
                         .head_dim = cfg.head_dim,
                         .scale = cfg.attn_scale > 0 ? cfg.attn_scale : float(1.0 / std::sqrt(double(cfg.head_dim))),
                         .sliding_window = cfg.layer_window(il)};
}

void project_add(const BlockContext& ctx, const Activations& a, const TensorView& y, const TensorView& w,
                 const TensorView& b, const TensorView& post_norm, const TensorView& next_norm) {
  if (!ctx.comm && !post_norm.data)
    return ctx.be.matmul_fused(y, w, b, a.x,
                               MatmulFusion{.epilogue = Epi::AddTo, .y = a.delta, .feeds_next = next_norm.data != nullptr,
                                            .next_norm_w = next_norm, .next_eps = ctx.eps});
  ctx.be.matmul(y, w, b, a.delta);
  if (ctx.comm) ctx.comm->all_reduce_sum(a.delta);  // row-parallel projection: sum the ranks' partial outputs
  if (post_norm.data) ctx.be.rms_norm(a.delta, post_norm, ctx.eps, a.delta);
  ctx.be.add(a.x, a.delta);
}

void attention_block(const BlockContext& ctx, const Activations& a, const AttentionWeights& w,
                     const AttentionLayer& layer, const TensorView& next_norm) {
  QkRope rope = layer.rope;
  rope.q_norm = w.q_norm;
  rope.k_norm = w.k_norm;
  rope.eps = ctx.eps;
  ctx.be.matmul_fused(a.x, w.wqkv, w.bqkv, a.qkv,
                      MatmulFusion{.norm_w = w.norm, .eps = ctx.eps, .h = a.h, .epilogue = Epi::RopeKv,
                                   .rope_layer = layer.layer, .rope = rope, .attn = layer.params});
  ctx.be.attention(layer.layer, a.qkv, layer.params, a.attn);
  project_add(ctx, a, a.attn, w.wo, w.bo, w.post_norm, next_norm);
}

void gated_mlp_block(const BlockContext& ctx, const Activations& a, const MlpWeights& w,
                     const TensorView& next_norm) {
  // The down projection is the next call on act where project_add fuses it.
  ctx.be.matmul_fused(a.x, w.wgate_up, TensorView{}, a.act,
                      MatmulFusion{.norm_w = w.norm, .eps = ctx.eps, .h = a.h,
                                   .epilogue = w.act == MlpActivation::GeluTanh ? Epi::Geglu : Epi::Swiglu,
                                   .y = a.gate_up, .feeds_next = !ctx.comm && !w.post_norm.data});
  project_add(ctx, a, a.act, w.wdown, w.bdown, w.post_norm, next_norm);
}

void moe_block(const BlockContext& ctx, const Activations& a, const MoeWeights& w, const MoeParams& p) {
  ctx.be.rms_norm(a.x, w.norm, ctx.eps, a.h);
  ctx.be.matmul(a.h, w.router, TensorView{}, a.router);
  ctx.be.moe_route(a.router, p, a.moe_ids, a.moe_w);
  ctx.be.moe_experts(a.h, a.moe_ids, a.moe_w, w.wgate_up, w.wdown, p, a.delta);
  if (ctx.comm) ctx.comm->all_reduce_sum(a.delta);  // each rank holds a share of every expert's columns
  ctx.be.add(a.x, a.delta);
}

void lm_head_block(const BlockContext& ctx, const Activations& a, const TensorView& final_norm,
                   const TensorView& lm_head) {
  ctx.be.rms_norm(a.x, final_norm, ctx.eps, a.h);
  ctx.be.gather_logit_rows(a.h, a.out_rows);
  ctx.be.matmul(a.out_rows, lm_head, TensorView{}, a.logits);
}

}  // namespace tf

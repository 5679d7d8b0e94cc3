// Blocks of backend ops that architecture files call in order to build their forward: a
// block issues the same ops whichever architecture calls it. Each matmul goes through
// Backend::matmul_fused with its norm prologue and its RoPE/KV-write, residual-add or gated
// activation epilogue, so a backend may run a block's line as one kernel (the CUDA decode
// GEMV) or as the plain ops in turn. Shapes are this rank's (tp_shard.h): n = the batch's
// tokens, n_out = its logit rows.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "model/arch/tp_shard.h"
#include "model/config.h"

namespace tf {

class Communicator;

// Scratch activations of one forward, each the first rows of a scratch buffer.
struct Activations {
  TensorView x;         // [n, d_model] the residual stream
  TensorView h;         // [n, d_model] normalized rows (when a fused prologue runs apart)
  TensorView qkv;       // [n, (n_heads + 2 n_kv_heads) head_dim] (the layer's heads: layer_activations)
  TensorView attn;      // [n, n_heads head_dim]
  TensorView delta;     // [n, d_model] a projection's output before the residual add
  TensorView gate_up;   // [n, 2 d_ff] (dense MLPs; the layer's d_ff)
  TensorView act;       // [n, d_ff] (dense MLPs)
  TensorView router;    // [n, n_experts] F32 router logits (mixture of experts)
  TensorView moe_ids;   // [n, top_k] I32 chosen experts
  TensorView moe_w;     // [n, top_k] F32 their weights
  TensorView out_rows;  // [n_out, d_model] rows that need logits
  TensorView logits;    // [n_out, n_vocab / tp_size] F32
};

// What every block needs besides its weights.
struct BlockContext {
  Backend& be;
  Communicator* comm = nullptr;  // set when tensor parallel: row-parallel outputs are all-reduced
  float eps = 0.0f;              // RMSNorm epsilon
};

// One layer's attention as its block sees it: the layer's KV pool, its head layout and RoPE.
struct AttentionLayer {
  int layer = 0;
  AttentionParams params;  // this rank's heads, scale, sliding window
  QkRope rope;             // the layer kind's frequencies on the backend (its q/k norms come from its weights)
};

// Attention params of layer il: this rank's heads of that layer, scale
// (ModelConfig::attn_scale, or 1/sqrt(head_dim)) and the layer's sliding window.
AttentionParams layer_attention_params(const ModelConfig& cfg, const TpShard& shard, int64_t il);

// x += post_norm(y @ w^T (+ b)): the residual add fused into the matmul, or the product in
// `delta` first when the ranks' partial products are summed (tensor parallel: one
// all-reduce) or a norm follows (Gemma's post-attention and post-feed-forward norms).
// next_norm: the norm of the matmul_fused that the caller runs next on x (MatmulFusion::
// feeds_next), or empty.
//   y [n, k], w [d_model, k] (this rank's columns), b [d_model] or empty, post_norm [d_model] or empty
void project_add(const BlockContext& ctx, const Activations& a, const TensorView& y, const TensorView& w,
                 const TensorView& b, const TensorView& post_norm = {}, const TensorView& next_norm = {});

struct AttentionWeights {
  TensorView norm;       // [d_model]
  TensorView wqkv;       // [(n_heads + 2 n_kv_heads) head_dim, d_model]
  TensorView bqkv;       // [(n_heads + 2 n_kv_heads) head_dim] or empty
  TensorView q_norm;     // [head_dim] or empty: RMSNorm of each q head before RoPE (Qwen3, Gemma 3)
  TensorView k_norm;     // [head_dim] or empty
  TensorView wo;         // [d_model, n_heads head_dim]
  TensorView bo;         // [d_model] or empty
  TensorView post_norm;  // [d_model] or empty: RMSNorm of the output before the residual add (Gemma)
};
// Pre-norm self-attention with rotary positions, into the residual stream:
//   qkv = rms_norm(x) @ Wqkv^T (+ bqkv); q/k norms, RoPE on q, k; k, v -> the layer's KV slots
//   attn = paged causal attention;  x += post_norm(attn @ Wo^T (+ bo))
// next_norm: the pre-norm of the block that follows when it starts with a fused matmul on x
// (the gated MLP's), or empty.
void attention_block(const BlockContext& ctx, const Activations& a, const AttentionWeights& w,
                     const AttentionLayer& layer, const TensorView& next_norm = {});

struct MlpWeights {
  TensorView norm;       // [d_model]
  TensorView wgate_up;   // [2 d_ff, d_model], gate rows first
  TensorView wdown;      // [d_model, d_ff]
  TensorView bdown;      // [d_model] or empty (a pruned model's bias compensation)
  TensorView post_norm;  // [d_model] or empty (Gemma's post-feed-forward norm)
  MlpActivation act = MlpActivation::Silu;
};
// Pre-norm gated MLP: x += post_norm(down(act(gate(h)) * up(h)) (+ bdown)), h = rms_norm(x);
// gate|up one matmul; act silu (SwiGLU) or gelu_tanh (GeGLU).
// next_norm as attention_block's (the next layer's attention norm).
void gated_mlp_block(const BlockContext& ctx, const Activations& a, const MlpWeights& w,
                     const TensorView& next_norm = {});

struct MoeWeights {
  TensorView norm;       // [d_model]
  TensorView router;     // [n_experts, d_model]
  TensorView wgate_up;   // [n_experts * 2 d_ff_expert, d_model]: expert e's gate rows, then its up rows
  TensorView wdown;      // [n_experts * d_model, d_ff_expert]
};
// Pre-norm mixture of SwiGLU experts: h = rms_norm(x); router logits h @ router^T (F32);
// the top_k experts of softmax(logits) (moe_route); x += sum of their weighted outputs
// (moe_experts; tensor parallel: each rank's share of every expert's columns, all-reduced).
void moe_block(const BlockContext& ctx, const Activations& a, const MoeWeights& w, const MoeParams& p);

// logits = rms_norm(x)[logits_rows] @ lm_head^T: only the rows that need logits go through the
// LM head.   final_norm [d_model], lm_head [n_vocab / tp_size, d_model]
void lm_head_block(const BlockContext& ctx, const Activations& a, const TensorView& final_norm,
                   const TensorView& lm_head);

}  // namespace tf

// Blocks of backend ops that architecture files call in order to build their forward: a
// block issues the same ops whichever architecture calls it. Each matmul goes through
// Backend::matmul_fused with its norm prologue and its RoPE/KV-write, residual-add or SwiGLU
// epilogue, so a backend may run a block's line as one kernel (the CUDA decode GEMV) or as
// the plain ops in turn. Shapes are this rank's (tp_shard.h): n = the batch's tokens,
// n_out = its logit rows.
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
  TensorView qkv;       // [n, (n_heads + 2 n_kv_heads) head_dim]
  TensorView attn;      // [n, n_heads head_dim]
  TensorView delta;     // [n, d_model] a projection's output before the residual add
  TensorView gate_up;   // [n, 2 d_ff]
  TensorView act;       // [n, d_ff]
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
  TensorView inv_freq;     // [head_dim / 2] F32 on the backend
};

// Attention params of the standard layer: this rank's heads, scale 1/sqrt(head_dim), the
// config's sliding window.
AttentionParams standard_attention(const ModelConfig& cfg, const TpShard& shard);

// x += y @ w^T (+ b): the residual add fused into the matmul, or (tensor parallel) the ranks'
// partial products summed in `delta` first (one all-reduce).
//   y [n, k], w [d_model, k] (this rank's columns), b [d_model] or empty
void project_add(const BlockContext& ctx, const Activations& a, const TensorView& y, const TensorView& w,
                 const TensorView& b);

struct AttentionWeights {
  TensorView norm;  // [d_model]
  TensorView wqkv;  // [(n_heads + 2 n_kv_heads) head_dim, d_model]
  TensorView bqkv;  // [(n_heads + 2 n_kv_heads) head_dim] or empty
  TensorView wo;    // [d_model, n_heads head_dim]
  TensorView bo;    // [d_model] or empty
};
// Pre-norm self-attention with rotary positions, into the residual stream:
//   qkv = rms_norm(x) @ Wqkv^T (+ bqkv); RoPE on q, k; k, v -> the layer's KV slots
//   attn = paged causal attention;  x += attn @ Wo^T (+ bo)
void attention_block(const BlockContext& ctx, const Activations& a, const AttentionWeights& w,
                     const AttentionLayer& layer);

struct MlpWeights {
  TensorView norm;      // [d_model]
  TensorView wgate_up;  // [2 d_ff, d_model], gate rows first
  TensorView wdown;     // [d_model, d_ff]
};
// Pre-norm SwiGLU MLP: x += down(silu(gate(h)) * up(h)), h = rms_norm(x); gate|up one matmul.
void swiglu_mlp_block(const BlockContext& ctx, const Activations& a, const MlpWeights& w);

// logits = rms_norm(x)[logits_rows] @ lm_head^T: only the rows that need logits go through the
// LM head.   final_norm [d_model], lm_head [n_vocab / tp_size, d_model]
void lm_head_block(const BlockContext& ctx, const Activations& a, const TensorView& final_norm,
                   const TensorView& lm_head);

}  // namespace tf

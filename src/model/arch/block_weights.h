// Weight-table rows of the shared blocks (blocks.h), in transformers' names for Llama-style
// checkpoints ("model.layers.{il}.self_attn.q_proj.weight", ...). Architecture files build
// their table from these and add rows of their own. Matrices are [out_features,
// in_features]; rows are appended in forward order (the order of the checkpoint tensors is
// also the order --load-format dummy draws them in).
#pragma once

#include <string>

#include "model/config.h"
#include "model/weight_table.h"

namespace tf {

// How the checkpoint stores an RMSNorm weight: w itself, or w with the norm using 1 + w
// (Gemma; the table adds the one at load, and dummy weights are zeros).
enum class NormStyle : uint8_t { Plain, OnePlus };

// model.embed_tokens.weight [n_vocab, d_model], replicated.
void add_embedding_weights(WeightTable& t, const ModelConfig& c);

// model.norm.weight [d_model] (replicated), then lm_head.weight [n_vocab, d_model], split by
// vocabulary. With tied embeddings lm_head.weight is optional and the LM head is the
// embedding's tensor (one upload when unsharded: weight_loader.h shares equal slices).
void add_final_norm_and_lm_head(WeightTable& t, const ModelConfig& c, NormStyle norm = NormStyle::Plain);

struct AttentionTensors {
  bool qkv_bias = false;   // q/k/v_proj.bias (Qwen2; Llama with attention_bias)
  bool o_bias = false;     // o_proj.bias (Llama with attention_bias)
  bool fused_qkv = false;  // one self_attn.qkv_proj.weight (Phi-3) instead of q/k/v_proj
  NormStyle norms = NormStyle::Plain;
  const char* post_norm = nullptr;  // the output's norm before the residual add (Gemma:
                                    // "post_attention_layernorm"), or none
};
// Layer il's pre-norm attention: input_layernorm; q_proj, k_proj, v_proj (or the rows of
// qkv_proj) concatenated into Wqkv [(n_heads + 2 n_kv_heads) head_dim, d_model], split by
// heads (KV heads replicated when fewer than ranks); their biases into Bqkv likewise; with
// c.qk_norm, self_attn.q_norm and k_norm [head_dim] (replicated); o_proj [d_model, n_heads
// head_dim] split by input heads; o_proj's bias on rank 0 (optional unless opt.o_bias: a
// pruned model's bias compensation); the post-norm if named. The head counts are layer il's
// (ModelConfig::heads_of, kv_heads_of).
void add_attention_weights(WeightTable& t, const ModelConfig& c, int il, const AttentionTensors& opt);

struct MlpTensors {
  const char* norm = "post_attention_layernorm";  // the pre-norm (Gemma: "pre_feedforward_layernorm")
  const char* post_norm = nullptr;                // Gemma: "post_feedforward_layernorm"
  NormStyle norms = NormStyle::Plain;
  bool fused_gate_up = false;                     // one mlp.gate_up_proj.weight (Phi-3)
};
// Layer il's gated MLP: its pre-norm; gate_proj and up_proj (or the halves of gate_up_proj)
// concatenated into WgateUp [2 d_ff, d_model] (gate rows first), split by d_ff; down_proj
// [d_model, d_ff] split by input columns; its optional bias [d_model] (a pruned model's bias
// compensation) on rank 0; the post-norm if named. d_ff is layer il's (ModelConfig::d_ff_of).
void add_gated_mlp_weights(WeightTable& t, const ModelConfig& c, int il, const MlpTensors& opt = {});

// Checkpoint names of a mixture-of-experts layer, below "model.layers.{il}.": the router and
// expert e's three matrices ("{}" stands for e).
struct MoeTensors {
  std::string router;            // "mlp.gate.weight" / "block_sparse_moe.gate.weight"
  std::string gate, up, down;    // "mlp.experts.{}.gate_proj.weight" / "block_sparse_moe.experts.{}.w1.weight", ...
};
// Layer il's mixture of experts: post_attention_layernorm; the router [n_experts, d_model]
// (replicated); every expert's gate and up rows concatenated into ExpertsGateUp
// [n_experts * 2 d_ff_expert, d_model] (expert by expert, gate rows first), each split by
// d_ff_expert; every expert's down_proj into ExpertsDown [n_experts * d_model, d_ff_expert],
// split by input columns, as a dense MLP's.
void add_moe_weights(WeightTable& t, const ModelConfig& c, int il, const MoeTensors& names);

// The standard pre-norm decoder of the Llama family: embedding, final norm and LM head, then
// per layer attention (with `attn`'s biases) and the SwiGLU MLP.
WeightTable standard_decoder_weights(const ModelConfig& c, const AttentionTensors& attn);

}  // namespace tf

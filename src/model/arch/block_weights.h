// Weight-table rows of the shared blocks (blocks.h), in transformers' names for Llama-style
// checkpoints ("model.layers.{il}.self_attn.q_proj.weight", ...). Architecture files build
// their table from these and add rows of their own. Matrices are [out_features,
// in_features]; rows are appended in forward order (the order of the checkpoint tensors is
// also the order --load-format dummy draws them in).
#pragma once

#include "model/config.h"
#include "model/weight_table.h"

namespace tf {

// model.embed_tokens.weight [n_vocab, d_model], replicated.
void add_embedding_weights(WeightTable& t, const ModelConfig& c);

// model.norm.weight [d_model] (replicated), then lm_head.weight [n_vocab, d_model], split by
// vocabulary. With tied embeddings lm_head.weight is optional and the LM head is the
// embedding's tensor (one upload when unsharded: weight_loader.h shares equal slices).
void add_final_norm_and_lm_head(WeightTable& t, const ModelConfig& c);

struct AttentionTensors {
  bool qkv_bias = false;  // q/k/v_proj.bias (Qwen2; Llama with attention_bias)
  bool o_bias = false;    // o_proj.bias (Llama with attention_bias)
};
// Layer il's pre-norm attention: input_layernorm; q_proj, k_proj, v_proj concatenated into
// Wqkv [(n_heads + 2 n_kv_heads) head_dim, d_model], split by heads (KV heads replicated
// when fewer than ranks); their biases into Bqkv likewise; o_proj [d_model, n_heads
// head_dim] split by input heads; o_proj's bias on rank 0.
void add_attention_weights(WeightTable& t, const ModelConfig& c, int il, const AttentionTensors& opt);

// Layer il's SwiGLU MLP: post_attention_layernorm; gate_proj and up_proj concatenated into
// WgateUp [2 d_ff, d_model] (gate rows first), split by d_ff; down_proj [d_model, d_ff]
// split by input columns.
void add_swiglu_mlp_weights(WeightTable& t, const ModelConfig& c, int il);

// The standard pre-norm decoder of the Llama family: embedding, final norm and LM head, then
// per layer attention (with `attn`'s biases) and the SwiGLU MLP.
WeightTable standard_decoder_weights(const ModelConfig& c, const AttentionTensors& attn);

}  // namespace tf

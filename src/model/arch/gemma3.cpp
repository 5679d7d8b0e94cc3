// Gemma 3 text models (model_type "gemma3_text"): the standard decoder with
//   - RMSNorms that scale by 1 + w (the table adds the one at load: NormStyle::OnePlus), also
//     for the q/k norms over each head before RoPE;
//   - sandwich norms: post_attention_layernorm on the attention output and
//     post_feedforward_layernorm on the MLP output before each residual add, with
//     pre_feedforward_layernorm as the MLP's pre-norm;
//   - GeGLU (gelu with the tanh approximation), embeddings times sqrt(hidden_size), the
//     softmax scale query_pre_attn_scalar^-0.5;
//   - per-layer attention kinds (layer_types, or every sliding_window_pattern-th layer
//     full): sliding-window layers with the local RoPE base, full layers with the global base
//     and scaling; their KV are kept in two groups (ModelConfig::kv_layer_groups) so that the
//     sliding layers' blocks are freed as their window moves on.
#include <cmath>

#include "model/arch/archs.h"
#include "model/arch/block_weights.h"

namespace tf {

void read_gemma3_config(const ConfigFields& f, ModelConfig& c) {
  const char* act_key = f.has("hidden_activation") ? "hidden_activation" : "hidden_act";
  const std::string act = f.string_or(act_key, "gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh" && act != "gelu_new")
    f.bad(act_key, "\"gelu_pytorch_tanh\" (GeGLU with the tanh approximation of gelu)");
  for (const char* key : {"final_logit_softcapping", "attn_logit_softcapping"})
    if (f.has(key)) f.bad(key, "null (logit soft-capping is not supported)");
  if (f.boolean_or("use_bidirectional_attention", false))
    f.bad("use_bidirectional_attention", "false (a causal language model)");
  c.mlp_act = MlpActivation::GeluTanh;
  c.attention_bias = f.boolean_or("attention_bias", false);
  c.qk_norm = true;
  c.attn_scale = float(1.0 / std::sqrt(f.positive_number_or("query_pre_attn_scalar", 256.0)));
  c.embed_scale = float(std::sqrt(double(c.d_model)));

  c.layer_types = read_layer_types(f, c.n_layers);
  if (c.layer_types.empty()) {  // transformers: every pattern-th layer is full, the others slide
    const char* pattern_key = f.has("sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern";
    const int64_t pattern = f.positive_int_or(pattern_key, ConfigLimits::kMaxLayers, 6);
    for (int64_t il = 0; il < c.n_layers; ++il)
      c.layer_types.push_back((il + 1) % pattern != 0 ? LayerAttention::Sliding : LayerAttention::Full);
  }
  for (LayerAttention t : c.layer_types)
    if (t == LayerAttention::Sliding) c.sliding_window = f.positive_int("sliding_window", ConfigLimits::kMaxPositions);
}

WeightTable gemma3_weight_table(const ModelConfig& c) {
  WeightTable t;
  add_embedding_weights(t, c);
  add_final_norm_and_lm_head(t, c, NormStyle::OnePlus);
  for (int il = 0; il < int(c.n_layers); ++il) {
    add_attention_weights(t, c, il,
                          AttentionTensors{.qkv_bias = c.attention_bias, .o_bias = c.attention_bias,
                                           .norms = NormStyle::OnePlus, .post_norm = "post_attention_layernorm"});
    add_gated_mlp_weights(t, c, il,
                          MlpTensors{.norm = "pre_feedforward_layernorm", .post_norm = "post_feedforward_layernorm",
                                     .norms = NormStyle::OnePlus});
  }
  return t;
}

}  // namespace tf

// Mixture-of-experts architectures: Mixtral (model_type "mixtral": experts in every layer,
// block_sparse_moe.* names, the chosen weights always renormalised) and Qwen3-MoE
// ("qwen3_moe": Qwen3's attention, experts in the layers decoder_sparse_step and
// mlp_only_layers leave sparse, dense MLPs in the others, renormalised only with
// norm_topk_prob). The forward is the standard decoder's moe_block: router softmax, top-k,
// the chosen experts' SwiGLU MLPs (Backend::moe_route / moe_experts).
#include <fmt/format.h>

#include <algorithm>

#include "model/arch/archs.h"
#include "model/arch/block_weights.h"

namespace tf {

void read_mixtral_config(const ConfigFields& f, ModelConfig& c) {
  require_silu_mlp(f);
  read_moe_fields(f, c, "intermediate_size");
  c.moe_renormalize = true;  // transformers' Mixtral always divides the top-k weights by their sum
  c.moe_layers.assign(size_t(c.n_layers), true);
  c.sliding_window = f.positive_int_or("sliding_window", ConfigLimits::kMaxPositions, 0);
}

WeightTable mixtral_weight_table(const ModelConfig& c) {
  WeightTable t;
  add_embedding_weights(t, c);
  add_final_norm_and_lm_head(t, c);
  const MoeTensors names{.router = "block_sparse_moe.gate.weight",
                         .gate = "block_sparse_moe.experts.{}.w1.weight",
                         .up = "block_sparse_moe.experts.{}.w3.weight",
                         .down = "block_sparse_moe.experts.{}.w2.weight"};
  for (int il = 0; il < int(c.n_layers); ++il) {
    add_attention_weights(t, c, il, AttentionTensors{});
    add_moe_weights(t, c, il, names);
  }
  return t;
}

// transformers' Qwen3MoeSparseMoeBlock is used in layer il when il is not in mlp_only_layers
// and (il + 1) % decoder_sparse_step == 0.
void read_qwen3_moe_config(const ConfigFields& f, ModelConfig& c) {
  read_qwen3_config(f, c);
  read_moe_fields(f, c, "moe_intermediate_size");
  c.moe_renormalize = f.boolean_or("norm_topk_prob", false);
  const int64_t step = f.positive_int_or("decoder_sparse_step", ConfigLimits::kMaxLayers, 1);
  std::vector<int64_t> dense;
  if (f.has("mlp_only_layers")) {
    const nlohmann::json& v = f.at("mlp_only_layers");
    const std::string what = fmt::format("a list of layer indices below {}", c.n_layers);
    if (!v.is_array()) f.bad("mlp_only_layers", what);
    for (const nlohmann::json& e : v) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= c.n_layers) f.bad("mlp_only_layers", what);
      dense.push_back(e.get<int64_t>());
    }
  }
  for (int64_t il = 0; il < c.n_layers; ++il)
    c.moe_layers.push_back(std::find(dense.begin(), dense.end(), il) == dense.end() && (il + 1) % step == 0);
}

WeightTable qwen3_moe_weight_table(const ModelConfig& c) {
  WeightTable t;
  add_embedding_weights(t, c);
  add_final_norm_and_lm_head(t, c);
  const MoeTensors names{.router = "mlp.gate.weight",
                         .gate = "mlp.experts.{}.gate_proj.weight",
                         .up = "mlp.experts.{}.up_proj.weight",
                         .down = "mlp.experts.{}.down_proj.weight"};
  for (int il = 0; il < int(c.n_layers); ++il) {
    add_attention_weights(t, c, il, AttentionTensors{.qkv_bias = c.attention_bias, .o_bias = c.attention_bias});
    if (c.layer_is_moe(il))
      add_moe_weights(t, c, il, names);
    else
      add_gated_mlp_weights(t, c, il);
  }
  return t;
}

}  // namespace tf

// Qwen2 (model_type "qwen2"): Llama's forward with biases on q, k and v (not o), and
// sliding-window attention as transformers decides it.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/arch/archs.h"
#include "model/arch/block_weights.h"

namespace tf {

// Sliding-window attention only with use_sliding_window, and then only on layers whose
// layer_types entry is "sliding_attention" (absent: layers il >= max_window_layers, default
// 28), as transformers' Qwen2Config and Qwen3Config decide it. A mix of sliding and full
// layers keeps the two kinds' KV apart (ModelConfig::mixed_attention).
void read_qwen_sliding_window(const ConfigFields& f, ModelConfig& c) {
  if (!f.boolean_or("use_sliding_window", false)) return;
  std::vector<LayerAttention> types = read_layer_types(f, c.n_layers);
  if (types.empty()) {
    int64_t first = 28;  // transformers' default for max_window_layers
    if (f.has("max_window_layers")) {
      if (!f.at("max_window_layers").is_number_integer() || f.at("max_window_layers").get<int64_t>() < 0)
        f.bad("max_window_layers", "a non-negative integer");
      first = f.at("max_window_layers").get<int64_t>();
    }
    for (int64_t il = 0; il < c.n_layers; ++il)
      types.push_back(il >= first ? LayerAttention::Sliding : LayerAttention::Full);
  }
  if (std::find(types.begin(), types.end(), LayerAttention::Sliding) == types.end()) return;
  c.sliding_window = f.positive_int("sliding_window", ConfigLimits::kMaxPositions);
  c.layer_types = std::move(types);
}

// The q/k/v biases are part of the architecture (transformers' Qwen2 has no attention_bias field).
void read_qwen2_config(const ConfigFields& f, ModelConfig& c) {
  read_qwen_sliding_window(f, c);
  require_silu_mlp(f);
  c.attention_bias = true;
}

WeightTable qwen2_weight_table(const ModelConfig& c) {
  return standard_decoder_weights(c, AttentionTensors{.qkv_bias = c.attention_bias, .o_bias = false});
}

}  // namespace tf

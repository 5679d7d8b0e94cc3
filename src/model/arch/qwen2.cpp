// Qwen2 (model_type "qwen2"): Llama's forward with biases on q, k and v (not o), and
// sliding-window attention as transformers decides it.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/arch/archs.h"
#include "model/arch/block_weights.h"

namespace tf {

namespace {

// Sliding-window attention only with use_sliding_window, and then only on layers whose
// layer_types entry is "sliding_attention" (absent: layers il >= max_window_layers, default
// 28). One window for all layers is all ModelConfig says, so a mix is refused rather than run
// wrongly.
void read_sliding_window(const ConfigFields& f, ModelConfig& c) {
  if (!f.boolean_or("use_sliding_window", false)) return;
  int64_t n_sliding = 0;
  if (f.has("layer_types")) {
    const nlohmann::json& lt = f.at("layer_types");
    if (!lt.is_array() || int64_t(lt.size()) != c.n_layers) f.bad("layer_types", "a list with one entry per layer");
    for (const nlohmann::json& t : lt) {
      if (!t.is_string()) f.bad("layer_types", "a list of \"full_attention\" / \"sliding_attention\"");
      if (t == "sliding_attention") {
        ++n_sliding;
      } else if (t != "full_attention") {
        f.bad("layer_types", "a list of \"full_attention\" / \"sliding_attention\"");
      }
    }
  } else {
    int64_t first = 28;  // transformers' Qwen2Config default for max_window_layers
    if (f.has("max_window_layers")) {
      if (!f.at("max_window_layers").is_number_integer() || f.at("max_window_layers").get<int64_t>() < 0)
        f.bad("max_window_layers", "a non-negative integer");
      first = f.at("max_window_layers").get<int64_t>();
    }
    n_sliding = first >= c.n_layers ? 0 : c.n_layers - first;
  }
  if (n_sliding == 0) return;
  if (n_sliding != c.n_layers)
    fail("{}: use_sliding_window is true with sliding attention on {} of {} layers; a per-layer "
         "mix of sliding and full attention is not supported", f.origin(), n_sliding, c.n_layers);
  c.sliding_window = f.positive_int("sliding_window", ConfigLimits::kMaxPositions);
}

}  // namespace

// The q/k/v biases are part of the architecture (transformers' Qwen2 has no attention_bias field).
void read_qwen2_config(const ConfigFields& f, ModelConfig& c) {
  read_sliding_window(f, c);
  require_silu_mlp(f);
  c.attention_bias = true;
}

WeightTable qwen2_weight_table(const ModelConfig& c) {
  return standard_decoder_weights(c, AttentionTensors{.qkv_bias = c.attention_bias, .o_bias = false});
}

}  // namespace tf

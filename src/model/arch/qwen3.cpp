// Qwen3 (model_type "qwen3"): Llama's layout with an RMSNorm over each q and k head before
// RoPE (self_attn.q_norm / k_norm), a head_dim that need not be hidden_size / heads, and
// Qwen2's sliding-window rule; attention biases only with attention_bias.
#include "model/arch/archs.h"
#include "model/arch/block_weights.h"

namespace tf {

void read_qwen3_config(const ConfigFields& f, ModelConfig& c) {
  read_qwen_sliding_window(f, c);
  require_silu_mlp(f);
  c.attention_bias = f.boolean_or("attention_bias", false);
  c.qk_norm = true;
}

WeightTable qwen3_weight_table(const ModelConfig& c) {
  return standard_decoder_weights(c, AttentionTensors{.qkv_bias = c.attention_bias, .o_bias = c.attention_bias});
}

}  // namespace tf

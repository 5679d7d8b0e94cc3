// Llama (model_type "llama"): config fields and weight table; the forward is the standard
// pre-norm decoder (standard_decoder.cpp). Mistral and Qwen2 share this table's builders.
#include "model/arch/archs.h"
#include "model/arch/block_weights.h"

namespace tf {

// transformers' LlamaConfig: the SwiGLU MLP without biases; attention_bias puts biases on q,
// k, v and o.
void read_llama_config(const ConfigFields& f, ModelConfig& c) {
  require_silu_mlp(f);
  c.attention_bias = f.boolean_or("attention_bias", false);
}

WeightTable llama_weight_table(const ModelConfig& c) {
  return standard_decoder_weights(c, AttentionTensors{.qkv_bias = c.attention_bias, .o_bias = c.attention_bias});
}

}  // namespace tf

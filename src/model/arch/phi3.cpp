// Phi-3 / Phi-4-mini (model_type "phi3"): Llama's forward over fused checkpoint tensors
// (self_attn.qkv_proj, mlp.gate_up_proj), partial rotary embeddings and LongRoPE scaling
// (both read by the shared RoPE fields, config.cpp), a sliding window on every layer when set.
//
// The fused tensors are used fused: the table addresses q, k and v (gate and up) as row
// ranges of the one tensor, so tensor parallelism still cuts them by heads (by d_ff), and
// unsharded the ranges are consecutive and load as one view of the tensor (weight_loader.cpp),
// read in place by the CPU backends.
#include "model/arch/archs.h"
#include "model/arch/block_weights.h"

namespace tf {

void read_phi3_config(const ConfigFields& f, ModelConfig& c) {
  require_silu_mlp(f);
  if (f.boolean_or("attention_bias", false)) f.bad("attention_bias", "false (Phi-3's projections have no biases)");
  c.sliding_window = f.positive_int_or("sliding_window", ConfigLimits::kMaxPositions, 0);
}

WeightTable phi3_weight_table(const ModelConfig& c) {
  WeightTable t;
  add_embedding_weights(t, c);
  add_final_norm_and_lm_head(t, c);
  for (int il = 0; il < int(c.n_layers); ++il) {
    add_attention_weights(t, c, il, AttentionTensors{.fused_qkv = true});
    add_gated_mlp_weights(t, c, il, MlpTensors{.fused_gate_up = true});
  }
  return t;
}

}  // namespace tf

#include "bench/active_weights.h"

#include <cmath>

namespace tf::bench {

ActiveWeights active_weights(const ModelConfig& cfg) {
  ActiveWeights a;
  const double d = double(cfg.d_model);
  a.expert_params_each = 3.0 * d * double(cfg.d_ff_expert);
  for (int64_t il = 0; il < cfg.n_layers; ++il) {  // each layer its own widths (pruned models)
    const int64_t heads = cfg.heads_of(il), kv = cfg.kv_heads_of(il);
    a.params_per_token += d * double((heads + 2 * kv) * cfg.head_dim) + double(heads * cfg.head_dim) * d;
    if (cfg.layer_is_moe(il)) {
      ++a.n_moe_layers;
      a.params_per_token += double(cfg.n_experts_per_tok) * a.expert_params_each + d * double(cfg.n_experts);
      a.expert_params += double(cfg.n_experts) * a.expert_params_each;
    } else {
      a.params_per_token += 3.0 * d * double(cfg.d_ff_of(il));
    }
  }
  a.params_per_token += d * double(cfg.n_vocab);  // LM head
  return a;
}

double expected_experts_read(const ModelConfig& cfg, int64_t batch) {
  if (cfg.n_experts <= 0) return 0;
  const double n = double(cfg.n_experts), k = double(cfg.n_experts_per_tok);
  return n * (1.0 - std::pow(1.0 - k / n, double(batch)));
}

double step_weight_bytes(const ModelConfig& cfg, double weight_bytes, double n_params, int64_t batch) {
  const ActiveWeights a = active_weights(cfg);
  if (a.n_moe_layers == 0 || n_params <= 0) return weight_bytes;
  // weight_bytes (the model's step bytes) leaves out an untied embedding table: so do the params.
  if (!cfg.tie_word_embeddings) n_params -= double(cfg.n_vocab) * double(cfg.d_model);
  const double per_param = weight_bytes / n_params;
  const double read = n_params - a.expert_params +
                      double(a.n_moe_layers) * expected_experts_read(cfg, batch) * a.expert_params_each;
  return read * per_param;
}

}  // namespace tf::bench

// What one decode step reads and what one token computes, counting only the weights a token
// actually uses: the roofline and TFLOP/s columns of `twofold bench`. A dense model uses all
// of its weights; a mixture-of-experts layer only its router's top-k experts per token.
#pragma once

#include <cstdint>

#include "model/config.h"

namespace tf::bench {

struct ActiveWeights {
  // Parameters of the layers' and LM head's matmuls one token multiplies by (experts: top_k
  // of them per MoE layer, plus the router).
  double params_per_token = 0;
  // Parameters of the experts of all MoE layers (0 for a dense model).
  double expert_params = 0;
  double expert_params_each = 0;  // one expert of one layer: 3 * d_model * d_ff_expert
  int64_t n_moe_layers = 0;
};
ActiveWeights active_weights(const ModelConfig& cfg);

// Expected number of distinct experts a step of `batch` tokens reads in one MoE layer when
// each token's top_k are drawn uniformly at random without repeats: n (1 - (1 - k/n)^batch).
double expected_experts_read(const ModelConfig& cfg, int64_t batch);

// Weight bytes one decode step of `batch` sequences reads: every weight outside the experts
// once, and expected_experts_read() experts of each MoE layer, at the model's mean bytes per
// parameter. weight_bytes is what a step reads with every expert (Model::step_weight_bytes:
// an untied embedding table left out), n_params all parameters.
double step_weight_bytes(const ModelConfig& cfg, double weight_bytes, double n_params, int64_t batch);

}  // namespace tf::bench

// RoPE inverse frequencies, plain and Llama-3.1-scaled, computed as Hugging Face does (float32).
#pragma once

#include <vector>

#include "model/config.h"

namespace tf {

// [head_dim / 2]: inv_freq[i] = theta^(-2i / head_dim), then the rope_scaling rule.
std::vector<float> rope_inv_freq(const ModelConfig& cfg);

}  // namespace tf

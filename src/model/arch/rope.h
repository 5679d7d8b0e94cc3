// RoPE inverse frequencies as Hugging Face computes them (float32): plain, linear,
// Llama-3.1 and LongRoPE scaling, over the rotated dims of a head (ModelConfig::rotary_dim).
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace tf {

// What Backend::rope_kv_write (QkRope) takes for one kind of layer, on the host.
struct RopeFrequencies {
  std::vector<float> inv_freq;       // [rotary_dim / 2]
  std::vector<float> inv_freq_long;  // [rotary_dim / 2] LongRoPE only: for positions >= long_from
  int32_t long_from = 0;
  float mscale = 1.0f;               // cos and sin multiplied by this (LongRoPE's attention_factor)
};

// inv_freq[i] = theta^(-2i / rotary_dim), then the scaling rule of the layer kind's RoPE
// (ModelConfig::rope).
RopeFrequencies rope_frequencies(const ModelConfig& cfg, LayerAttention kind = LayerAttention::Full);

}  // namespace tf

// The functions each architecture file exports for its registry row (registry.cpp).
#pragma once

#include <memory>

#include "model/arch/registry.h"

namespace tf {

// standard_decoder.cpp: the forward every row runs
std::unique_ptr<Model> make_standard_decoder(ModelBuild b);

// llama.cpp (its table is shared by mistral)
void read_llama_config(const ConfigFields& f, ModelConfig& c);
WeightTable llama_weight_table(const ModelConfig& c);

// mistral.cpp
void read_mistral_config(const ConfigFields& f, ModelConfig& c);

// qwen2.cpp; read_qwen_sliding_window is Qwen2's and Qwen3's sliding-window rule
void read_qwen_sliding_window(const ConfigFields& f, ModelConfig& c);
void read_qwen2_config(const ConfigFields& f, ModelConfig& c);
WeightTable qwen2_weight_table(const ModelConfig& c);

// qwen3.cpp
void read_qwen3_config(const ConfigFields& f, ModelConfig& c);
WeightTable qwen3_weight_table(const ModelConfig& c);

// gemma3.cpp
void read_gemma3_config(const ConfigFields& f, ModelConfig& c);
WeightTable gemma3_weight_table(const ModelConfig& c);

// phi3.cpp
void read_phi3_config(const ConfigFields& f, ModelConfig& c);
WeightTable phi3_weight_table(const ModelConfig& c);

// moe.cpp: Mixtral and Qwen3-MoE
void read_mixtral_config(const ConfigFields& f, ModelConfig& c);
WeightTable mixtral_weight_table(const ModelConfig& c);
void read_qwen3_moe_config(const ConfigFields& f, ModelConfig& c);
WeightTable qwen3_moe_weight_table(const ModelConfig& c);

}  // namespace tf

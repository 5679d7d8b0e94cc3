// The functions each architecture file exports for its registry row (registry.cpp).
#pragma once

#include <memory>

#include "model/arch/registry.h"

namespace tf {

// llama.cpp: the Llama forward, shared by mistral and qwen2
void read_llama_config(const ConfigFields& f, ModelConfig& c);
WeightTable llama_weight_table(const ModelConfig& c);
std::unique_ptr<Model> make_llama_model(ModelBuild b);

// mistral.cpp
void read_mistral_config(const ConfigFields& f, ModelConfig& c);

// qwen2.cpp
void read_qwen2_config(const ConfigFields& f, ModelConfig& c);
WeightTable qwen2_weight_table(const ModelConfig& c);

}  // namespace tf

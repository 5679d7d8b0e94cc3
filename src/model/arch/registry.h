// The architecture registry: config.json's model_type -> the architecture's config reader,
// weight table and model (its forward). Each architecture is one file under src/model/arch/
// and one row of kArchs in registry.cpp; docs/ADDING_AN_ARCHITECTURE.md walks through it.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "model/arch/model.h"
#include "model/config.h"
#include "model/config_fields.h"
#include "model/tensor_source.h"
#include "model/weight_table.h"

namespace tf {

// What an architecture's model is built from: the config, its weight table, the tensors
// (already validated against the table) and where to put them.
struct ModelBuild {
  ModelConfig cfg;
  WeightTable table;
  std::unique_ptr<TensorSource> weights;  // kept by the model: zero-copy backends read it in place
  Backend* backend = nullptr;
  LoadOptions opt;
};

struct ArchEntry {
  std::string_view model_type;  // config.json's model_type
  // Reads the architecture's own fields into `c`, whose shared fields parse_common_config
  // has filled; refuses fields it cannot honour. Throws tf::Error naming the field.
  void (*read_config)(const ConfigFields& f, ModelConfig& c);
  // Every checkpoint tensor and forward weight for this config (weight_table.h).
  WeightTable (*weight_table)(const ModelConfig& c);
  // The model: uploads the weights of b.table and runs the architecture's forward.
  std::unique_ptr<Model> (*make_model)(ModelBuild b);
};

// Every registered architecture, in registry order.
std::span<const ArchEntry> arch_registry();
// The row for `model_type`; nullptr when none.
const ArchEntry* find_arch(std::string_view model_type);
// The row for cfg.model_type (a config from parse_model_config always has one).
const ArchEntry& arch_of(const ModelConfig& cfg);
// "llama, mistral, qwen2": the supported model_type values, for messages.
std::string supported_model_types();

// config.json text -> config: the shared fields, then the architecture's own. Throws
// tf::Error naming `origin` and the field, also for an unknown model_type (listing the
// supported ones).
ModelConfig parse_model_config(const std::string& config_json, const std::string& origin);
// DIR/config.json (required) and DIR/generation_config.json (optional, overrides bos/eos); for
// a GGUF file (or a folder holding one and no safetensors), its metadata (gguf_config.h).
ModelConfig load_model_config(const std::string& dir);
// The table of the checkpoint as stored: arch_of(cfg).weight_table(cfg) with cfg.quant's
// quantized formats applied (quant_config.h), checked for internal consistency.
WeightTable weight_table(const ModelConfig& cfg);
// The architecture's table with every weight dense, whatever cfg.quant says: what random
// weights are drawn for and what `twofold quantize` reads.
WeightTable dense_weight_table(const ModelConfig& cfg);

}  // namespace tf

// The registry's rows and the entry points that dispatch on model_type.
#include "model/arch/registry.h"

#include <algorithm>

#include "core/error.h"
#include "core/mapped_file.h"
#include "model/arch/archs.h"
#include "model/dummy_weights.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf_config.h"
#include "model/quant_config.h"

namespace tf {

namespace {

// One row per architecture. Every row runs the standard pre-norm decoder: what differs is in
// the config fields each reads and the weight table each builds.
constexpr ArchEntry kArchs[] = {
    {"llama", read_llama_config, llama_weight_table, make_standard_decoder},
    {"mistral", read_mistral_config, llama_weight_table, make_standard_decoder},
    {"qwen2", read_qwen2_config, qwen2_weight_table, make_standard_decoder},
    {"qwen3", read_qwen3_config, qwen3_weight_table, make_standard_decoder},
    {"gemma3_text", read_gemma3_config, gemma3_weight_table, make_standard_decoder},
    {"phi3", read_phi3_config, phi3_weight_table, make_standard_decoder},
    {"mixtral", read_mixtral_config, mixtral_weight_table, make_standard_decoder},
    {"qwen3_moe", read_qwen3_moe_config, qwen3_moe_weight_table, make_standard_decoder},
};

}  // namespace

std::span<const ArchEntry> arch_registry() { return kArchs; }

const ArchEntry* find_arch(std::string_view model_type) {
  for (const ArchEntry& a : kArchs)
    if (a.model_type == model_type) return &a;
  return nullptr;
}

const ArchEntry& arch_of(const ModelConfig& cfg) {
  const ArchEntry* a = find_arch(cfg.model_type);
  if (!a) fail("model_type '{}' is not supported (supported: {})", cfg.model_type, supported_model_types());
  return *a;
}

std::string supported_model_types() {
  std::string s;
  for (const ArchEntry& a : kArchs) s += (s.empty() ? "" : ", ") + std::string(a.model_type);
  return s;
}

ModelConfig parse_model_config(const std::string& config_json, const std::string& origin) {
  const nlohmann::json j = parse_json_object(config_json, origin);
  const ConfigFields f(j, origin);
  const ArchEntry* arch = find_arch(f.string("model_type"));
  if (!arch) f.bad("model_type", "one of the supported values: " + supported_model_types());
  ModelConfig c = parse_common_config(f);
  arch->read_config(f, c);
  if (c.n_experts > 0 && !c.layer_d_ff.empty())
    f.bad("layer_intermediate_size", "absent for a mixture-of-experts model (per-layer widths of experts are not supported)");
  return c;
}

ModelConfig load_model_config(const std::string& dir) {
  if (const std::optional<std::string> gguf = find_gguf_model(dir)) return gguf_model_config(GgufFile(*gguf));
  const std::string config_path = dir + "/config.json";
  if (!file_exists(config_path)) fail("{}: no such file (a model folder needs config.json)", config_path);
  ModelConfig c = load_guarded(config_path, [&] { return parse_model_config(read_text_file(config_path), config_path); });

  const std::string gen_path = dir + "/generation_config.json";
  if (file_exists(gen_path)) {
    load_guarded(gen_path, [&] {
      const nlohmann::json g = parse_json_object(read_text_file(gen_path), gen_path);
      parse_special_ids(ConfigFields(g, gen_path), c);
    });
  }
  return c;
}

KvCacheSpec kv_geometry(const ModelConfig& cfg) {
  KvCacheSpec s{.n_layers = cfg.n_layers, .n_kv_heads = 0, .head_dim = cfg.head_dim,
                .layer_kv_heads = cfg.kv_heads_per_layer()};
  for (int64_t il = 0; il < cfg.n_layers; ++il) s.n_kv_heads = std::max(s.n_kv_heads, cfg.kv_heads_of(il));
  if (cfg.n_layers == 0) s.n_kv_heads = cfg.n_kv_heads;
  return s;
}

WeightTable dense_weight_table(const ModelConfig& cfg) {
  WeightTable t = arch_of(cfg).weight_table(cfg);
  t.arch = cfg.model_type;
  check_table(t);
  return t;
}

WeightTable weight_table(const ModelConfig& cfg) {
  WeightTable t = dense_weight_table(cfg);
  apply_quant_config(t, cfg.quant);
  check_table(t);
  return t;
}

namespace {

// The GGUF block types whose matrices stay quantized: those the backend reads, when the
// weights are uploaded as stored (one copy as stored, no tensor-parallel cut); none otherwise.
std::vector<DType> gguf_blocks_kept(const Backend& backend, const LoadOptions& opt) {
  const bool as_stored = std::all_of(opt.weight_copies.begin(), opt.weight_copies.end(),
                                     [](const WeightCopy& c) { return c.kind == WeightCopy::Kind::Stored; });
  if (opt.dequantize_gguf || !opt.keep_stored_dtype || opt.tp_size > 1 || !as_stored) return {};
  std::vector<DType> kept;
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q5_K, DType::Q6_K})
    if (backend.reads_gguf_block(t)) kept.push_back(t);
  return kept;
}

}  // namespace

// Random weights are drawn dense; a config that names a quantized format has them quantized at
// load into it (unless the caller chose the copies).
std::unique_ptr<Model> load_model(const std::string& dir, Backend& backend, const LoadOptions& opt) {
  ModelConfig cfg = load_model_config(dir);
  if (!opt.dummy_weights)
    return load_model(std::move(cfg), open_tensor_source(dir, gguf_blocks_kept(backend, opt)), backend, opt);
  LoadOptions o = opt;
  if (cfg.quant.quantized() && o.weight_copies.empty())
    o.weight_copies = {WeightCopy{.kind = WeightCopy::Kind::Quantized, .format = cfg.quant.format,
                                  .group_size = cfg.quant.group_size ? cfg.quant.group_size : 128}};
  o.quantize_lm_head = o.quantize_lm_head ||
                       (cfg.quant.quantized() && std::find(cfg.quant.modules_to_not_convert.begin(),
                                                           cfg.quant.modules_to_not_convert.end(),
                                                           "lm_head") == cfg.quant.modules_to_not_convert.end());
  cfg.quant = QuantConfig{};
  WeightTable table = dense_weight_table(cfg);
  // Random weights are sized by the config alone, so an allocation failure there is its fault.
  const std::string config_path = find_gguf_model(dir).value_or(dir + "/config.json");
  std::unique_ptr<TensorSource> weights =
      load_guarded(config_path, [&] { return std::make_unique<RandomWeights>(table, opt.dummy_seed); });
  const ArchEntry& arch = arch_of(cfg);
  return arch.make_model(ModelBuild{.cfg = std::move(cfg), .table = std::move(table), .weights = std::move(weights),
                                    .backend = &backend, .opt = o});
}

std::unique_ptr<Model> load_model(ModelConfig cfg, std::unique_ptr<TensorSource> weights, Backend& backend,
                                  const LoadOptions& opt) {
  WeightTable table = weight_table(cfg);
  validate_weights(table, *weights);
  const ArchEntry& arch = arch_of(cfg);
  return arch.make_model(ModelBuild{.cfg = std::move(cfg), .table = std::move(table), .weights = std::move(weights),
                                    .backend = &backend, .opt = opt});
}

}  // namespace tf

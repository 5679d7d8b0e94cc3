// Reading config.json: typed access to its fields with errors that name the file and the
// field, and the fields every architecture shares. Architecture files read their own fields
// through ConfigFields (src/model/arch/*.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "model/config.h"

namespace tf {

// Typed access to one JSON object (config.json itself, or a nested object such as
// rope_scaling), where every error names the file and the field. Absent and null mean the
// same: "not set", because transformers writes null for unset optional fields.
class ConfigFields {
 public:
  ConfigFields(const nlohmann::json& obj, const std::string& origin, std::string prefix = "")
      : obj_(obj), origin_(origin), prefix_(std::move(prefix)) {}

  const nlohmann::json& object() const { return obj_; }
  const std::string& origin() const { return origin_; }
  bool has(const char* key) const;
  const nlohmann::json& at(const char* key) const { return obj_.at(key); }
  std::string field(const char* key) const { return prefix_ + key; }  // the name errors show

  [[noreturn]] void missing(const char* key, const std::string& expected) const;
  [[noreturn]] void bad(const char* key, const std::string& expected) const;

  // A positive integer no larger than `max` (a ConfigLimits bound).
  int64_t positive_int(const char* key, int64_t max) const;
  int64_t positive_int_or(const char* key, int64_t max, int64_t fallback) const;
  // A positive number that a float holds as a normal number (no infinity, no denormal).
  double positive_number(const char* key) const;
  double positive_number_or(const char* key, double fallback) const;
  bool boolean_or(const char* key, bool fallback) const;
  std::string string(const char* key) const;
  std::string string_or(const char* key, std::string fallback) const;
  // A token id: a non-negative integer below n_vocab (the model's vocab_size).
  int32_t token_id(const char* key, const nlohmann::json& v, int64_t n_vocab) const;

 private:
  const nlohmann::json& obj_;
  const std::string& origin_;
  std::string prefix_;
};

// `text` parsed as a JSON object (nesting bounded); errors name `origin`.
nlohmann::json parse_json_object(const std::string& text, const std::string& origin);

// The fields every architecture shares. Required: model_type, hidden_size,
// intermediate_size, num_hidden_layers, num_attention_heads, vocab_size,
// max_position_embeddings and rms_norm_eps; every other field has transformers' default:
// attention geometry, RoPE base and scaling, tied embeddings, bos/eos ids, dtype.
ModelConfig parse_common_config(const ConfigFields& f);

// bos_token_id / eos_token_id where present (generation_config.json overrides config.json's);
// each id is below c.n_vocab.
void parse_special_ids(const ConfigFields& f, ModelConfig& c);

// The SwiGLU MLP of the Llama family: hidden_act silu (or swish) and no mlp_bias; anything
// else is refused naming the field.
void require_silu_mlp(const ConfigFields& f);

}  // namespace tf

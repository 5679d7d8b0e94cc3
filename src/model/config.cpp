#include "model/config.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>

#include "core/error.h"
#include "core/json_bounded.h"
#include "model/config_fields.h"
#include "model/quant_config.h"

namespace tf {

using json = nlohmann::json;

namespace {

using L = ConfigLimits;

// A short rendering of a bad value for error messages: `"abc"`, `-3`, `[1, 2]`.
std::string show(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

}  // namespace

// ---- ConfigFields ---------------------------------------------------------------------------

bool ConfigFields::has(const char* key) const {
  auto it = obj_.find(key);
  return it != obj_.end() && !it->is_null();
}

void ConfigFields::missing(const char* key, const std::string& expected) const {
  fail("{}: field '{}' is missing (expected {})", origin_, field(key), expected);
}

void ConfigFields::bad(const char* key, const std::string& expected) const {
  fail("{}: field '{}' is {} (expected {})", origin_, field(key), show(at(key)), expected);
}

int64_t ConfigFields::positive_int(const char* key, int64_t max) const {
  constexpr const char* kWhat = "a positive integer";
  if (!has(key)) missing(key, kWhat);
  const json& v = at(key);
  if (!v.is_number_integer()) bad(key, kWhat);
  if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(max) : v.get<int64_t>() > max)
    fail("{}: field '{}' is {} (expected a positive integer no larger than {})", origin_, field(key), show(v), max);
  if (v.get<int64_t>() <= 0) bad(key, kWhat);
  return v.get<int64_t>();
}

int64_t ConfigFields::positive_int_or(const char* key, int64_t max, int64_t fallback) const {
  return has(key) ? positive_int(key, max) : fallback;
}

double ConfigFields::positive_number(const char* key) const {
  constexpr const char* kWhat = "a positive number";
  if (!has(key)) missing(key, kWhat);
  const json& v = at(key);
  if (!v.is_number()) bad(key, kWhat);
  double d = v.get<double>();
  if (!std::isfinite(d) || d <= 0) bad(key, kWhat);
  // Stored as float: a value that would become infinity or a denormal there is refused too.
  if (d > std::numeric_limits<float>::max() || d < std::numeric_limits<float>::min())
    bad(key, "a positive number within the range of a 32-bit float");
  return d;
}

double ConfigFields::positive_number_or(const char* key, double fallback) const {
  return has(key) ? positive_number(key) : fallback;
}

bool ConfigFields::boolean_or(const char* key, bool fallback) const {
  if (!has(key)) return fallback;
  if (!at(key).is_boolean()) bad(key, "true or false");
  return at(key).get<bool>();
}

std::string ConfigFields::string(const char* key) const {
  if (!has(key)) missing(key, "a string");
  if (!at(key).is_string()) bad(key, "a string");
  return at(key).get<std::string>();
}

std::string ConfigFields::string_or(const char* key, std::string fallback) const {
  return has(key) ? string(key) : fallback;
}

int32_t ConfigFields::token_id(const char* key, const json& v, int64_t n_vocab) const {
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
    fail("{}: field '{}' holds {} (expected a non-negative integer token id, or a list of them)", origin_,
         field(key), show(v));
  if (v.get<uint64_t>() >= uint64_t(n_vocab))
    fail("{}: field '{}' holds token id {} (expected an id below vocab_size {})", origin_, field(key), show(v),
         n_vocab);
  return int32_t(v.get<int64_t>());
}

json parse_json_object(const std::string& text, const std::string& origin) {
  json j = parse_json_bounded(text, origin);
  if (!j.is_object()) fail("{}: expected a JSON object at the top level", origin);
  return j;
}

// ---- the shared fields ----------------------------------------------------------------------

namespace {

// Attention geometry: heads, key/value heads (absent = MHA) and head_dim (absent = d_model /
// n_heads). Grouped-query attention needs n_heads to be a multiple of n_kv_heads, and
// rotate-half RoPE pairs dimension i with i + head_dim/2, so head_dim must be even.
void parse_attention(const ConfigFields& f, ModelConfig& c) {
  const std::string& origin = f.origin();
  c.n_heads = f.positive_int("num_attention_heads", L::kMaxHeads);
  c.n_kv_heads = f.positive_int_or("num_key_value_heads", L::kMaxHeads, c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0)
    fail("{}: num_attention_heads ({}) is not a multiple of num_key_value_heads ({})", origin,
         c.n_heads, c.n_kv_heads);
  if (f.has("head_dim")) {
    c.head_dim = f.positive_int("head_dim", L::kMaxHeadDim);
  } else {
    if (c.d_model % c.n_heads != 0)
      fail("{}: hidden_size ({}) is not a multiple of num_attention_heads ({}) and field "
           "'head_dim' is absent", origin, c.d_model, c.n_heads);
    c.head_dim = c.d_model / c.n_heads;
    if (c.head_dim > L::kMaxHeadDim)
      fail("{}: hidden_size / num_attention_heads = {} / {} = {} is larger than the largest "
           "supported head_dim ({})", origin, c.d_model, c.n_heads, c.head_dim, L::kMaxHeadDim);
  }
  if (c.head_dim % 2 != 0) fail("{}: head_dim {} is odd (RoPE needs an even head_dim)", origin, c.head_dim);
}

// RoPE base and frequency scaling. transformers 5 writes both under "rope_parameters"
// ({"rope_type", "rope_theta", ...}); older versions write a top-level "rope_theta" and a
// "rope_scaling" object (or null) whose kind is "rope_type" or, older still, "type".
void parse_rope(const ConfigFields& top, ModelConfig& c) {
  const json& j = top.object();
  const std::string& origin = top.origin();
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (top.has(key) && !top.at(key).is_object()) top.bad(key, "an object or null");
  }
  const bool has_params = top.has("rope_parameters");
  const bool has_scaling = top.has("rope_scaling");

  ConfigFields params(has_params ? j.at("rope_parameters") : j, origin, "rope_parameters.");
  if (has_params && params.has("rope_theta")) {
    c.rope_theta = float(params.positive_number("rope_theta"));
  } else {
    c.rope_theta = float(top.positive_number_or("rope_theta", 10000.0));
  }

  if (!has_params && !has_scaling) return;
  const char* obj_key = has_scaling ? "rope_scaling" : "rope_parameters";
  ConfigFields s(j.at(obj_key), origin, std::string(obj_key) + ".");
  const char* type_key = s.has("rope_type") ? "rope_type" : "type";
  std::string type;
  if (s.has(type_key)) {
    type = s.string(type_key);
  } else if (has_scaling) {
    s.missing("rope_type", "a RoPE type: default or llama3");
  } else {
    type = "default";  // transformers 5 fills in "default" when rope_parameters has no type
  }

  if (type == "default") return;
  if (type != "llama3")
    fail("{}: field '{}' is \"{}\": unsupported RoPE scaling type '{}' (supported: default, "
         "llama3)", origin, s.field(type_key), type, type);
  RopeScaling& r = c.rope_scaling;
  r.type = RopeScaling::Type::Llama3;
  r.factor = float(s.positive_number("factor"));
  r.low_freq_factor = float(s.positive_number("low_freq_factor"));
  r.high_freq_factor = float(s.positive_number("high_freq_factor"));
  r.original_max_position_embeddings = s.positive_int("original_max_position_embeddings", L::kMaxPositions);
  // llama3 interpolates between the two wavelength bounds, dividing by their difference.
  if (!(r.high_freq_factor > r.low_freq_factor))
    fail("{}: field '{}' ({}) must be larger than '{}' ({})", origin, s.field("high_freq_factor"),
         r.high_freq_factor, s.field("low_freq_factor"), r.low_freq_factor);
}

}  // namespace

// bos_token_id: an int or null. eos_token_id: an int, a list of ints, or null. Absent or
// null leaves the current value alone, so generation_config.json only overrides what it has.
void parse_special_ids(const ConfigFields& f, ModelConfig& c) {
  if (f.has("bos_token_id")) c.bos_id = f.token_id("bos_token_id", f.at("bos_token_id"), c.n_vocab);
  if (f.has("eos_token_id")) {
    const json& v = f.at("eos_token_id");
    c.eos_ids.clear();
    if (v.is_array()) {
      for (const json& e : v) c.eos_ids.push_back(f.token_id("eos_token_id", e, c.n_vocab));
    } else {
      c.eos_ids.push_back(f.token_id("eos_token_id", v, c.n_vocab));
    }
  }
}

ModelConfig parse_common_config(const ConfigFields& f) {
  ModelConfig c;
  c.model_type = f.string("model_type");
  c.d_model = f.positive_int("hidden_size", L::kMaxHidden);
  c.d_ff = f.positive_int("intermediate_size", L::kMaxIntermediate);
  c.n_layers = f.positive_int("num_hidden_layers", L::kMaxLayers);
  c.n_vocab = f.positive_int("vocab_size", L::kMaxVocab);
  c.max_position = f.positive_int("max_position_embeddings", L::kMaxPositions);
  c.rms_norm_eps = float(f.positive_number("rms_norm_eps"));
  parse_attention(f, c);
  parse_rope(f, c);
  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", false);
  parse_special_ids(f, c);
  c.torch_dtype = f.has("dtype") ? f.string("dtype") : f.string_or("torch_dtype", "");
  c.quant = parse_quant_config(f);
  return c;
}

void require_silu_mlp(const ConfigFields& f) {
  std::string act = f.string_or("hidden_act", "silu");
  if (act != "silu" && act != "swish") f.bad("hidden_act", "\"silu\" (the SwiGLU MLP)");
  if (f.boolean_or("mlp_bias", false)) f.bad("mlp_bias", "false (MLP biases are not supported)");
}

}  // namespace tf

#include "model/config.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>

#include <fmt/format.h>

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

// The frequency scaling an object describes: a rope_scaling object (its kind under
// "rope_type" or, older, "type", required) or a rope_parameters object (no kind = default).
// Needs c.rotary_dim and c.max_position. `top` is config.json itself (LongRoPE's
// original_max_position_embeddings may be there).
RopeScaling parse_scaling(const ConfigFields& s, bool kind_required, const ConfigFields& top, const ModelConfig& c) {
  const std::string& origin = s.origin();
  const char* type_key = s.has("rope_type") ? "rope_type" : "type";
  std::string type = "default";
  if (s.has(type_key)) {
    type = s.string(type_key);
  } else if (kind_required) {
    s.missing("rope_type", "a RoPE type: default, linear, llama3 or longrope");
  }
  RopeScaling r;
  if (type == "default") return r;
  if (type == "linear") {
    r.type = RopeScaling::Type::Linear;
    r.factor = float(s.positive_number("factor"));
    return r;
  }
  if (type == "llama3") {
    r.type = RopeScaling::Type::Llama3;
    r.factor = float(s.positive_number("factor"));
    r.low_freq_factor = float(s.positive_number("low_freq_factor"));
    r.high_freq_factor = float(s.positive_number("high_freq_factor"));
    r.original_max_position_embeddings = s.positive_int("original_max_position_embeddings", L::kMaxPositions);
    // llama3 interpolates between the two wavelength bounds, dividing by their difference.
    if (!(r.high_freq_factor > r.low_freq_factor))
      fail("{}: field '{}' ({}) must be larger than '{}' ({})", origin, s.field("high_freq_factor"),
           r.high_freq_factor, s.field("low_freq_factor"), r.low_freq_factor);
    return r;
  }
  if (type == "longrope") {
    // transformers' _compute_longrope_parameters: with original_max_position_embeddings
    // (config.json's, or the rope object's), factor = max_position_embeddings / that;
    // attention_factor, unless given, sqrt(1 + ln(factor) / ln(original)) for factor > 1, else 1.
    r.type = RopeScaling::Type::LongRope;
    const size_t n = size_t(c.rotary_dim / 2);
    for (const char* key : {"short_factor", "long_factor"}) {
      const std::string what = fmt::format("a list of {} positive numbers (rotary_dim / 2)", n);
      if (!s.has(key)) s.missing(key, what);
      const json& v = s.at(key);
      if (!v.is_array() || v.size() != n) s.bad(key, what);
      std::vector<float>& out = std::string_view(key) == "short_factor" ? r.short_factor : r.long_factor;
      for (const json& e : v) {
        if (!e.is_number() || !(e.get<double>() > 0) || !std::isfinite(e.get<double>())) s.bad(key, what);
        out.push_back(float(e.get<double>()));
      }
    }
    const ConfigFields& orig_in = s.has("original_max_position_embeddings") ? s : top;
    if (orig_in.has("original_max_position_embeddings")) {
      r.original_max_position_embeddings = orig_in.positive_int("original_max_position_embeddings", L::kMaxPositions);
      r.factor = float(double(c.max_position) / double(r.original_max_position_embeddings));
    } else {
      r.original_max_position_embeddings = c.max_position;
      r.factor = float(s.positive_number_or("factor", 1.0));
    }
    r.attention_factor =
        s.has("attention_factor") ? float(s.positive_number("attention_factor"))
        : r.factor <= 1.0f
            ? 1.0f
            : float(std::sqrt(1.0 + std::log(double(r.factor)) / std::log(double(r.original_max_position_embeddings))));
    return r;
  }
  fail("{}: field '{}' is \"{}\": unsupported RoPE scaling type '{}' (supported: default, linear, llama3, "
       "longrope)", origin, s.field(type_key), type, type);
}

// RoPE: base, the rotated share of each head, frequency scaling. transformers 5 writes them
// under "rope_parameters" ({"rope_type", "rope_theta", "partial_rotary_factor", ...}), for
// Gemma 3 one such object per layer type ({"full_attention": {...}, "sliding_attention":
// {...}}); older versions write top-level rope_theta / partial_rotary_factor, a "rope_scaling"
// object (or null) and, for Gemma 3, rope_local_base_freq for the sliding layers.
void parse_rope(const ConfigFields& top, ModelConfig& c) {
  const json& j = top.object();
  const std::string& origin = top.origin();
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (top.has(key) && !top.at(key).is_object()) top.bad(key, "an object or null");
  }
  const bool has_params = top.has("rope_parameters");
  const bool has_scaling = top.has("rope_scaling");
  const json* per_type = nullptr;  // rope_parameters by layer type
  if (has_params) {
    const json& p = j.at("rope_parameters");
    if (p.contains("full_attention") || p.contains("sliding_attention")) per_type = &p;
  }
  if (per_type) {
    for (const char* kind : {"full_attention", "sliding_attention"}) {
      if (!per_type->contains(kind) || !per_type->at(kind).is_object())
        fail("{}: field 'rope_parameters.{}' is missing or not an object (rope_parameters by layer type needs "
             "full_attention and sliding_attention)", origin, kind);
    }
  }
  const json& main_obj = per_type ? per_type->at("full_attention") : has_params ? j.at("rope_parameters") : j;
  const ConfigFields m(main_obj, origin,
                       per_type ? "rope_parameters.full_attention." : has_params ? "rope_parameters." : "");

  const ConfigFields& prf = m.has("partial_rotary_factor") ? m : top;
  const double factor = prf.has("partial_rotary_factor") ? prf.positive_number("partial_rotary_factor") : 1.0;
  c.rotary_dim = int64_t(double(c.head_dim) * factor);  // transformers: int(head_dim * factor)
  if (factor > 1.0 || c.rotary_dim < 2 || c.rotary_dim % 2 != 0)
    fail("{}: field '{}' is {}: head_dim {} x {} gives {} rotated dims (expected an even number from 2 to head_dim)",
         origin, prf.field("partial_rotary_factor"), factor, c.head_dim, factor, c.rotary_dim);

  c.rope_theta = float(m.has("rope_theta") ? m.positive_number("rope_theta") : top.positive_number_or("rope_theta", 10000.0));
  if (has_scaling) {
    c.rope_scaling = parse_scaling(ConfigFields(j.at("rope_scaling"), origin, "rope_scaling."), true, top, c);
  } else if (has_params) {
    c.rope_scaling = parse_scaling(m, false, top, c);
  }
  c.rope_local = RopeParams{.theta = c.rope_theta, .scaling = c.rope_scaling};
  if (per_type) {
    const ConfigFields l(per_type->at("sliding_attention"), origin, "rope_parameters.sliding_attention.");
    c.rope_local = RopeParams{.theta = float(l.positive_number_or("rope_theta", 10000.0)),
                              .scaling = parse_scaling(l, false, top, c)};
  } else if (top.has("rope_local_base_freq")) {
    c.rope_local = RopeParams{.theta = float(top.positive_number("rope_local_base_freq"))};
  }
}

// Per-layer widths (docs/PER_LAYER_WIDTHS.md): layer_num_attention_heads,
// layer_num_key_value_heads and layer_intermediate_size, each absent (every layer has the
// scalar) or one positive integer per layer within the scalar's bound. Layer il's query
// heads must be a multiple of its KV heads (the scalar ones where an array is absent).
std::vector<int64_t> read_layer_widths(const ConfigFields& f, const char* key, int64_t n_layers, int64_t max) {
  std::vector<int64_t> out;
  if (!f.has(key)) return out;
  const json& v = f.at(key);
  if (!v.is_array() || int64_t(v.size()) != n_layers)
    f.bad(key, fmt::format("a list with one positive integer per layer ({})", n_layers));
  for (size_t il = 0; il < v.size(); ++il) {
    const json& e = v[il];
    const int64_t n = !e.is_number_integer()                                     ? 0
                      : e.is_number_unsigned() && e.get<uint64_t>() > uint64_t(max) ? max + 1
                                                                                     : e.get<int64_t>();
    if (n <= 0 || n > max)
      fail("{}: field '{}' entry {} (layer {}) is {} (expected a positive integer no larger than {})", f.origin(),
           f.field(key), il, il, show(e), max);
    out.push_back(e.get<int64_t>());
  }
  return out;
}

void parse_layer_widths(const ConfigFields& f, ModelConfig& c) {
  c.layer_n_heads = read_layer_widths(f, "layer_num_attention_heads", c.n_layers, L::kMaxHeads);
  c.layer_n_kv_heads = read_layer_widths(f, "layer_num_key_value_heads", c.n_layers, L::kMaxHeads);
  c.layer_d_ff = read_layer_widths(f, "layer_intermediate_size", c.n_layers, L::kMaxIntermediate);
  if (c.layer_n_heads.empty() && c.layer_n_kv_heads.empty()) return;
  for (int64_t il = 0; il < c.n_layers; ++il) {
    if (c.heads_of(il) % c.kv_heads_of(il) != 0)
      fail("{}: layer {} has {} query heads ({}), not a multiple of its {} key/value heads ({})", f.origin(), il,
           c.heads_of(il), c.layer_n_heads.empty() ? "num_attention_heads" : "layer_num_attention_heads",
           c.kv_heads_of(il), c.layer_n_kv_heads.empty() ? "num_key_value_heads" : "layer_num_key_value_heads");
  }
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
  parse_layer_widths(f, c);
  parse_rope(f, c);
  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", false);
  parse_special_ids(f, c);
  c.torch_dtype = f.has("dtype") ? f.string("dtype") : f.string_or("torch_dtype", "");
  c.quant = parse_quant_config(f);
  return c;
}

std::vector<LayerAttention> read_layer_types(const ConfigFields& f, int64_t n_layers) {
  std::vector<LayerAttention> out;
  if (!f.has("layer_types")) return out;
  const json& lt = f.at("layer_types");
  if (!lt.is_array() || int64_t(lt.size()) != n_layers)
    f.bad("layer_types", fmt::format("a list with one entry per layer ({})", n_layers));
  for (size_t il = 0; il < lt.size(); ++il) {
    const json& t = lt[il];
    if (t == "full_attention") {
      out.push_back(LayerAttention::Full);
    } else if (t == "sliding_attention") {
      out.push_back(LayerAttention::Sliding);
    } else {
      fail("{}: field '{}' entry {} is {} (expected \"full_attention\" or \"sliding_attention\")", f.origin(),
           f.field("layer_types"), il, show(t));
    }
  }
  return out;
}

void read_moe_fields(const ConfigFields& f, ModelConfig& c, const char* d_ff_key) {
  const char* experts_key = f.has("num_local_experts") || !f.has("num_experts") ? "num_local_experts" : "num_experts";
  c.n_experts = f.positive_int(experts_key, L::kMaxExperts);
  c.n_experts_per_tok = f.positive_int("num_experts_per_tok", L::kMaxExperts);
  if (c.n_experts_per_tok > c.n_experts)
    fail("{}: field '{}' is {} (expected at most {} = {}, the number of experts)", f.origin(),
         f.field("num_experts_per_tok"), c.n_experts_per_tok, f.field(experts_key), c.n_experts);
  c.d_ff_expert = f.positive_int(d_ff_key, L::kMaxIntermediate);
}

bool ModelConfig::non_uniform() const {
  for (int64_t il = 0; il < n_layers; ++il)
    if (heads_of(il) != n_heads || kv_heads_of(il) != n_kv_heads || d_ff_of(il) != d_ff) return true;
  return false;
}

std::vector<int64_t> ModelConfig::kv_heads_per_layer() const {
  std::vector<int64_t> h;
  for (int64_t il = 0; il < n_layers; ++il)
    if (kv_heads_of(il) != n_kv_heads) {
      for (int64_t l = 0; l < n_layers; ++l) h.push_back(kv_heads_of(l));
      break;
    }
  return h;
}

bool ModelConfig::mixed_attention() const {
  bool full = false, sliding = false;
  for (int64_t il = 0; il < n_layers; ++il) (layer_attention(il) == LayerAttention::Full ? full : sliding) = true;
  return full && sliding;
}

std::vector<int32_t> ModelConfig::kv_layer_groups() const {
  std::vector<int32_t> g;
  if (!mixed_attention()) return g;
  for (int64_t il = 0; il < n_layers; ++il) g.push_back(layer_attention(il) == LayerAttention::Sliding ? 1 : 0);
  return g;
}

RopeParams ModelConfig::rope(LayerAttention kind) const {
  if (kind == LayerAttention::Sliding && mixed_attention()) return rope_local;
  return RopeParams{.theta = rope_theta, .scaling = rope_scaling};
}

void require_silu_mlp(const ConfigFields& f) {
  std::string act = f.string_or("hidden_act", "silu");
  if (act != "silu" && act != "swish") f.bad("hidden_act", "\"silu\" (the SwiGLU MLP)");
  if (f.boolean_or("mlp_bias", false)) f.bad("mlp_bias", "false (MLP biases are not supported)");
}

}  // namespace tf

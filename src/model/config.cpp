#include "model/config.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>

#include "core/error.h"
#include "core/json_bounded.h"
#include "core/mapped_file.h"

namespace tf {

using json = nlohmann::json;

std::string_view arch_name(Arch a) {
  switch (a) {
    case Arch::Llama: return "llama";
    case Arch::Mistral: return "mistral";
    case Arch::Qwen2: return "qwen2";
  }
  return "?";
}

namespace {

// Upper bounds on config.json's sizes, checked before anything is sized from them (the weight
// table has one entry per layer and tensor; --load-format dummy and the KV pool allocate from
// these sizes). Each is far above every released Llama-family model (the largest seen: 126
// layers, hidden 16384 and intermediate 53248 in Llama-3.1-405B, 128 heads, head_dim 256,
// vocab 262144, context 10M in Llama 4 Scout) and small enough that the products formed from
// them (weight elements, KV bytes per token) stay far inside int64.
struct SizeBound {
  const char* key;
  int64_t max;
};
constexpr SizeBound kMaxLayers{"num_hidden_layers", 1024};
constexpr SizeBound kMaxHidden{"hidden_size", int64_t(1) << 17};
constexpr SizeBound kMaxIntermediate{"intermediate_size", int64_t(1) << 20};
constexpr SizeBound kMaxHeads{"num_attention_heads", 1024};
constexpr SizeBound kMaxHeadDim{"head_dim", 1024};
constexpr SizeBound kMaxVocab{"vocab_size", int64_t(1) << 24};
constexpr SizeBound kMaxPositions{"max_position_embeddings", int64_t(1) << 26};

// A short rendering of a bad value for error messages: `"abc"`, `-3`, `[1, 2]`.
std::string show(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// Typed access to one JSON object (config.json itself, or a nested rope_scaling object),
// where every error names the file and the field. Absent and null mean the same: "not set",
// because transformers writes null for unset optional fields.
class Fields {
 public:
  Fields(const json& obj, const std::string& origin, std::string prefix = "")
      : obj_(obj), origin_(origin), prefix_(std::move(prefix)) {}

  bool has(const char* key) const {
    auto it = obj_.find(key);
    return it != obj_.end() && !it->is_null();
  }
  const json& at(const char* key) const { return obj_.at(key); }
  std::string field(const char* key) const { return prefix_ + key; }

  [[noreturn]] void missing(const char* key, const char* expected) const {
    fail("{}: field '{}' is missing (expected {})", origin_, field(key), expected);
  }
  [[noreturn]] void bad(const char* key, const char* expected) const {
    fail("{}: field '{}' is {} (expected {})", origin_, field(key), show(at(key)), expected);
  }

  // A positive integer no larger than `max`.
  int64_t positive_int(const char* key, int64_t max) const {
    constexpr const char* kWhat = "a positive integer";
    if (!has(key)) missing(key, kWhat);
    const json& v = at(key);
    if (!v.is_number_integer()) bad(key, kWhat);
    if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(max) : v.get<int64_t>() > max)
      fail("{}: field '{}' is {} (expected a positive integer no larger than {})", origin_,
           field(key), show(v), max);
    if (v.get<int64_t>() <= 0) bad(key, kWhat);
    return v.get<int64_t>();
  }
  int64_t positive_int(const SizeBound& b) const { return positive_int(b.key, b.max); }
  int64_t positive_int_or(const char* key, int64_t max, int64_t fallback) const {
    return has(key) ? positive_int(key, max) : fallback;
  }

  double positive_number(const char* key) const {
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
  double positive_number_or(const char* key, double fallback) const {
    return has(key) ? positive_number(key) : fallback;
  }

  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!at(key).is_boolean()) bad(key, "true or false");
    return at(key).get<bool>();
  }

  std::string string(const char* key) const {
    if (!has(key)) missing(key, "a string");
    if (!at(key).is_string()) bad(key, "a string");
    return at(key).get<std::string>();
  }
  std::string string_or(const char* key, std::string fallback) const {
    return has(key) ? string(key) : fallback;
  }

  // A token id: a non-negative integer below n_vocab (config.json's vocab_size).
  int32_t token_id(const char* key, const json& v, int64_t n_vocab) const {
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
      fail("{}: field '{}' holds {} (expected a non-negative integer token id, or a list of them)",
           origin_, field(key), show(v));
    if (v.get<uint64_t>() >= uint64_t(n_vocab))
      fail("{}: field '{}' holds token id {} (expected an id below vocab_size {})", origin_,
           field(key), show(v), n_vocab);
    return int32_t(v.get<int64_t>());
  }

 private:
  const json& obj_;
  const std::string& origin_;
  std::string prefix_;
};

json parse_json_object(const std::string& text, const std::string& origin) {
  json j = parse_json_bounded(text, origin);
  if (!j.is_object()) fail("{}: expected a JSON object at the top level", origin);
  return j;
}

Arch parse_arch(const Fields& f) {
  std::string type = f.string("model_type");
  if (type == "llama") return Arch::Llama;
  if (type == "mistral") return Arch::Mistral;
  if (type == "qwen2") return Arch::Qwen2;
  f.bad("model_type", "one of the supported values: llama, mistral, qwen2");
}

// Attention geometry: heads, key/value heads (absent = MHA) and head_dim (absent = d_model /
// n_heads). Grouped-query attention needs n_heads to be a multiple of n_kv_heads, and
// rotate-half RoPE pairs dimension i with i + head_dim/2, so head_dim must be even.
void parse_attention(const Fields& f, const std::string& origin, ModelConfig& c) {
  c.n_heads = f.positive_int(kMaxHeads);
  c.n_kv_heads = f.positive_int_or("num_key_value_heads", kMaxHeads.max, c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0)
    fail("{}: num_attention_heads ({}) is not a multiple of num_key_value_heads ({})", origin,
         c.n_heads, c.n_kv_heads);
  if (f.has("head_dim")) {
    c.head_dim = f.positive_int(kMaxHeadDim);
  } else {
    if (c.d_model % c.n_heads != 0)
      fail("{}: hidden_size ({}) is not a multiple of num_attention_heads ({}) and field "
           "'head_dim' is absent", origin, c.d_model, c.n_heads);
    c.head_dim = c.d_model / c.n_heads;
    if (c.head_dim > kMaxHeadDim.max)
      fail("{}: hidden_size / num_attention_heads = {} / {} = {} is larger than the largest "
           "supported head_dim ({})", origin, c.d_model, c.n_heads, c.head_dim, kMaxHeadDim.max);
  }
  if (c.head_dim % 2 != 0) fail("{}: head_dim {} is odd (RoPE needs an even head_dim)", origin, c.head_dim);
}

// RoPE base and frequency scaling. transformers 5 writes both under "rope_parameters"
// ({"rope_type", "rope_theta", ...}); older versions write a top-level "rope_theta" and a
// "rope_scaling" object (or null) whose kind is "rope_type" or, older still, "type".
void parse_rope(const json& j, const Fields& top, const std::string& origin, ModelConfig& c) {
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (top.has(key) && !top.at(key).is_object()) top.bad(key, "an object or null");
  }
  const bool has_params = top.has("rope_parameters");
  const bool has_scaling = top.has("rope_scaling");

  Fields params(has_params ? j.at("rope_parameters") : j, origin, "rope_parameters.");
  if (has_params && params.has("rope_theta")) {
    c.rope_theta = float(params.positive_number("rope_theta"));
  } else {
    c.rope_theta = float(top.positive_number_or("rope_theta", 10000.0));
  }

  if (!has_params && !has_scaling) return;
  const char* obj_key = has_scaling ? "rope_scaling" : "rope_parameters";
  Fields s(j.at(obj_key), origin, std::string(obj_key) + ".");
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
  r.original_max_position_embeddings = s.positive_int("original_max_position_embeddings", kMaxPositions.max);
  // llama3 interpolates between the two wavelength bounds, dividing by their difference.
  if (!(r.high_freq_factor > r.low_freq_factor))
    fail("{}: field '{}' ({}) must be larger than '{}' ({})", origin, s.field("high_freq_factor"),
         r.high_freq_factor, s.field("low_freq_factor"), r.low_freq_factor);
}

// Sliding-window attention, as transformers decides it. Mistral: every layer uses
// sliding_window when it is set. Qwen2: only with use_sliding_window, and then only layers
// whose layer_types entry is "sliding_attention" (absent: layers il >= max_window_layers,
// default 28). One window for all layers is all ModelConfig can say, so a mix is refused
// rather than run wrongly.
void parse_sliding_window(const Fields& f, const std::string& origin, ModelConfig& c) {
  if (c.arch == Arch::Mistral) {
    c.sliding_window = f.positive_int_or("sliding_window", kMaxPositions.max, 0);
    return;
  }
  if (c.arch != Arch::Qwen2 || !f.boolean_or("use_sliding_window", false)) return;

  int64_t n_sliding = 0;
  if (f.has("layer_types")) {
    const json& lt = f.at("layer_types");
    if (!lt.is_array() || int64_t(lt.size()) != c.n_layers)
      f.bad("layer_types", "a list with one entry per layer");
    for (const json& t : lt) {
      if (!t.is_string()) f.bad("layer_types", "a list of \"full_attention\" / \"sliding_attention\"");
      if (t == "sliding_attention") {
        ++n_sliding;
      } else if (t != "full_attention") {
        f.bad("layer_types", "a list of \"full_attention\" / \"sliding_attention\"");
      }
    }
  } else {
    int64_t first = 28;  // transformers' Qwen2Config default for max_window_layers
    if (f.has("max_window_layers")) {
      if (!f.at("max_window_layers").is_number_integer() || f.at("max_window_layers").get<int64_t>() < 0)
        f.bad("max_window_layers", "a non-negative integer");
      first = f.at("max_window_layers").get<int64_t>();
    }
    n_sliding = first >= c.n_layers ? 0 : c.n_layers - first;
  }
  if (n_sliding == 0) return;
  if (n_sliding != c.n_layers)
    fail("{}: use_sliding_window is true with sliding attention on {} of {} layers; a per-layer "
         "mix of sliding and full attention is not supported", origin, n_sliding, c.n_layers);
  c.sliding_window = f.positive_int("sliding_window", kMaxPositions.max);
}

// bos_token_id: an int or null. eos_token_id: an int, a list of ints, or null. Absent or
// null leaves the current value alone, so generation_config.json only overrides what it has.
// Every id is below c.n_vocab.
void parse_special_ids(const Fields& f, ModelConfig& c) {
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

}  // namespace

// Reads the Llama-family fields of a Hugging Face config.json. Required: model_type,
// hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, vocab_size,
// max_position_embeddings and rms_norm_eps; every other field has transformers' default.
// Fields we cannot honour (an MLP bias, another activation) are refused, not ignored.
ModelConfig parse_model_config(const std::string& config_json, const std::string& origin) {
  json j = parse_json_object(config_json, origin);
  Fields f(j, origin);
  ModelConfig c;
  c.arch = parse_arch(f);
  c.model_type = f.string("model_type");

  c.d_model = f.positive_int(kMaxHidden);
  c.d_ff = f.positive_int(kMaxIntermediate);
  c.n_layers = f.positive_int(kMaxLayers);
  c.n_vocab = f.positive_int(kMaxVocab);
  c.max_position = f.positive_int(kMaxPositions);
  c.rms_norm_eps = float(f.positive_number("rms_norm_eps"));
  parse_attention(f, origin, c);
  parse_rope(j, f, origin, c);
  parse_sliding_window(f, origin, c);

  std::string act = f.string_or("hidden_act", "silu");
  if (act != "silu" && act != "swish") f.bad("hidden_act", "\"silu\" (the SwiGLU MLP)");
  if (f.boolean_or("mlp_bias", false)) f.bad("mlp_bias", "false (MLP biases are not supported)");
  c.attention_bias = c.arch == Arch::Qwen2 || (c.arch == Arch::Llama && f.boolean_or("attention_bias", false));
  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", false);
  parse_special_ids(f, c);
  c.torch_dtype = f.has("dtype") ? f.string("dtype") : f.string_or("torch_dtype", "");
  return c;
}

ModelConfig load_model_config(const std::string& dir) {
  const std::string config_path = dir + "/config.json";
  if (!file_exists(config_path)) fail("{}: no such file (a model folder needs config.json)", config_path);
  ModelConfig c = load_guarded(config_path, [&] { return parse_model_config(read_text_file(config_path), config_path); });

  const std::string gen_path = dir + "/generation_config.json";
  if (file_exists(gen_path)) {
    load_guarded(gen_path, [&] {
      json g = parse_json_object(read_text_file(gen_path), gen_path);
      parse_special_ids(Fields(g, gen_path), c);
    });
  }
  return c;
}

}  // namespace tf

#include "model/gguf_config.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "model/gguf/gguf_file.h"

namespace tf {

namespace {

// The bounds config.json's sizes get (config.h).
constexpr int64_t kMaxLayers = ConfigLimits::kMaxLayers, kMaxHidden = ConfigLimits::kMaxHidden,
                  kMaxIntermediate = ConfigLimits::kMaxIntermediate, kMaxHeads = ConfigLimits::kMaxHeads,
                  kMaxHeadDim = ConfigLimits::kMaxHeadDim, kMaxVocab = ConfigLimits::kMaxVocab,
                  kMaxPositions = ConfigLimits::kMaxPositions, kMaxExperts = ConfigLimits::kMaxExperts;

// general.architecture -> the registry's model_type (llama with experts is Mixtral's).
constexpr std::pair<std::string_view, std::string_view> kArchs[] = {
    {"llama", "llama"}, {"qwen2", "qwen2"}, {"qwen3", "qwen3"}, {"qwen3moe", "qwen3_moe"},
    {"phi3", "phi3"},   {"gemma3", "gemma3_text"},
};

// Reads <arch>.<name> keys with errors naming the full key.
class ArchKeys {
 public:
  ArchKeys(const GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}
  std::string key(std::string_view name) const { return arch_ + "." + std::string(name); }
  bool has(std::string_view name) const { return f_.has(key(name)); }

  int64_t positive(std::string_view name, int64_t max) const {
    const std::string k = key(name);
    const uint64_t v = f_.get_uint(k);
    if (v == 0 || v > uint64_t(max)) f_.fail_key(k, "is {} (expected a positive integer no larger than {})", v, max);
    return int64_t(v);
  }
  int64_t positive_or(std::string_view name, int64_t max, int64_t fallback) const {
    return has(name) ? positive(name, max) : fallback;
  }
  // 0 .. max; 0 when absent.
  int64_t count_or_zero(std::string_view name, int64_t max) const {
    if (!has(name)) return 0;
    const std::string k = key(name);
    const uint64_t v = f_.get_uint(k);
    if (v > uint64_t(max)) f_.fail_key(k, "is {} (expected at most {})", v, max);
    return int64_t(v);
  }

  double positive_number(std::string_view name) const {
    const std::string k = key(name);
    const double v = f_.get_float(k);
    if (!std::isfinite(v) || v <= 0) f_.fail_key(k, "is {} (expected a positive number)", v);
    return v;
  }
  double positive_number_or(std::string_view name, double fallback) const {
    return has(name) ? positive_number(name) : fallback;
  }

  template <typename... Args>
  [[noreturn]] void fail(std::string_view name, fmt::format_string<Args...> f, Args&&... args) const {
    f_.fail_key(key(name), f, std::forward<Args>(args)...);
  }

 private:
  const GgufFile& f_;
  std::string arch_;
};

// Heads and head_dim, with the checks parse_model_config makes on a config.json. Partial
// rotation (rope.dimension_count below the head size) only for phi3, whose converter keeps
// Hugging Face's rotate-half layout; llama's reorders whole heads for ggml's RoPE.
void read_attention(const ArchKeys& k, std::string_view arch, ModelConfig& c) {
  c.n_heads = k.positive("attention.head_count", kMaxHeads);
  c.n_kv_heads = k.positive_or("attention.head_count_kv", kMaxHeads, c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0)
    k.fail("attention.head_count_kv", "is {}, which does not divide {} ({})", c.n_kv_heads, k.key("attention.head_count"),
           c.n_heads);
  if (k.has("attention.key_length")) {
    c.head_dim = k.positive("attention.key_length", kMaxHeadDim);
  } else {
    if (c.d_model % c.n_heads != 0)
      k.fail("attention.head_count", "is {}, which does not divide {} ({}), and {} is absent", c.n_heads,
             k.key("embedding_length"), c.d_model, k.key("attention.key_length"));
    c.head_dim = c.d_model / c.n_heads;
    if (c.head_dim > kMaxHeadDim)
      k.fail("embedding_length", "/ {} = {} exceeds the largest supported head size {}", k.key("attention.head_count"),
             c.head_dim, kMaxHeadDim);
  }
  if (k.positive_or("attention.value_length", kMaxHeadDim, c.head_dim) != c.head_dim)
    k.fail("attention.value_length", "differs from the key length {} (not supported)", c.head_dim);
  if (c.head_dim % 2 != 0) k.fail("attention.key_length", "is {} (RoPE needs an even head size)", c.head_dim);
  c.rotary_dim = k.positive_or("rope.dimension_count", kMaxHeadDim, c.head_dim);
  if (c.rotary_dim != c.head_dim && (arch != "phi3" || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0))
    k.fail("rope.dimension_count", "is {}, not the head size {}: partial rotary embeddings are supported for phi3 only "
           "(an even count below the head size)", c.rotary_dim, c.head_dim);
}

// A tensor of per-frequency RoPE factors: F32, rotary_dim / 2 positive values.
std::vector<float> rope_factor_tensor(const GgufFile& f, const GgufTensor& t, const ModelConfig& c) {
  const int64_t n = c.rotary_dim / 2;
  if (dtype_of_ggml(t.ggml_type) != DType::F32 || t.numel() != n)
    fail("{}: tensor '{}' ({}, {} values) must be F32 with {} values (rotary dimensions / 2)", f.path(), t.name,
         t.type_name(), t.numel(), n);
  std::vector<float> v(static_cast<size_t>(n));
  std::memcpy(v.data(), t.data, size_t(n) * sizeof(float));
  for (float x : v)
    if (!std::isfinite(x) || x <= 0) fail("{}: tensor '{}' holds {} (expected positive factors)", f.path(), t.name, x);
  return v;
}

// RoPE base and scaling: rope.scaling.type none or linear (rope.scaling.factor); a
// rope_freqs tensor (Llama 3.1's scaling as llama.cpp's converter writes it: each frequency
// divided by its factor); phi3's rope_factors_short / _long tensors (LongRoPE, with
// rope.scaling.original_context_length and rope.scaling.attn_factor).
void read_rope(const GgufFile& f, const ArchKeys& k, ModelConfig& c) {
  c.rope_theta = float(k.positive_number_or("rope.freq_base", 10000.0));
  const std::string scaling(f.opt_string(k.key("rope.scaling.type")).value_or("none"));
  if (scaling == "linear") {
    c.rope_scaling.type = RopeScaling::Type::Linear;
    c.rope_scaling.factor = float(k.positive_number("rope.scaling.factor"));
  } else if (scaling != "none") {
    k.fail("rope.scaling.type", "is \"{}\": this RoPE scaling is not supported for GGUF files (supported: none, linear)",
           scaling);
  } else if (k.has("rope.scaling.factor") && k.positive_number("rope.scaling.factor") != 1.0) {
    k.fail("rope.scaling.factor", "is not 1 while {} is none", k.key("rope.scaling.type"));
  }
  const GgufTensor* freqs = f.find_tensor("rope_freqs.weight");
  const GgufTensor* shorts = f.find_tensor("rope_factors_short.weight");
  const GgufTensor* longs = f.find_tensor("rope_factors_long.weight");
  if ((freqs || shorts || longs) && c.rope_scaling.type != RopeScaling::Type::None)
    k.fail("rope.scaling.type", "is \"{}\" and the file also holds RoPE factor tensors (only one scaling at a time)",
           scaling);
  if (freqs) {
    c.rope_scaling.type = RopeScaling::Type::Factors;
    c.rope_scaling.factors = rope_factor_tensor(f, *freqs, c);
  }
  if (shorts || longs) {
    if (freqs || !shorts || !longs)
      fail("{}: RoPE factors need both rope_factors_short.weight and rope_factors_long.weight, and no rope_freqs.weight",
           f.path());
    RopeScaling& r = c.rope_scaling;
    r.type = RopeScaling::Type::LongRope;
    r.short_factor = rope_factor_tensor(f, *shorts, c);
    r.long_factor = rope_factor_tensor(f, *longs, c);
    r.original_max_position_embeddings = k.positive("rope.scaling.original_context_length", kMaxPositions);
    // transformers' default when the file has none: sqrt(1 + ln(scale) / ln(original)).
    const double scale = double(c.max_position) / double(r.original_max_position_embeddings);
    const double fallback =
        scale > 1.0 ? std::sqrt(1.0 + std::log(scale) / std::log(double(r.original_max_position_embeddings))) : 1.0;
    r.attention_factor = float(k.positive_number_or("rope.scaling.attn_factor", fallback));
  }
}

void read_special_ids(const GgufFile& f, ModelConfig& c) {
  auto id = [&](const char* key) -> std::optional<int32_t> {
    const std::optional<uint64_t> v = f.opt_uint(key);
    if (v && *v >= uint64_t(c.n_vocab))
      f.fail_key(key, "is {} (expected a token id below the vocabulary size {})", *v, c.n_vocab);
    return v ? std::optional<int32_t>(int32_t(*v)) : std::nullopt;
  };
  if (auto bos = id("tokenizer.ggml.bos_token_id")) c.bos_id = *bos;
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const std::optional<int32_t> e = id(key);
    if (e && std::find(c.eos_ids.begin(), c.eos_ids.end(), *e) == c.eos_ids.end()) c.eos_ids.push_back(*e);
  }
}

// Experts (expert_count > 0): Mixtral (llama) and Qwen3-MoE (qwen3moe), experts in every layer,
// the chosen weights renormalised (llama.cpp's graphs for both).
void read_experts(const ArchKeys& k, ModelConfig& c) {
  c.n_experts = k.positive("expert_count", kMaxExperts);
  c.n_experts_per_tok = k.positive("expert_used_count", kMaxExperts);
  if (c.n_experts_per_tok > c.n_experts)
    k.fail("expert_used_count", "is {} (expected at most {} = {})", c.n_experts_per_tok, k.key("expert_count"),
           c.n_experts);
  c.d_ff_expert = k.positive_or("expert_feed_forward_length", kMaxIntermediate, c.d_ff);
  if (c.d_ff_expert == 0) k.fail("expert_feed_forward_length", "is missing (the experts' width)");
  c.moe_renormalize = true;
  c.moe_layers.assign(size_t(c.n_layers), true);
}

// Gemma 3 as llama.cpp runs it: sliding-window layers with a period (every period-th layer
// full; attention.sliding_window_pattern, default 6) and their own RoPE base
// (rope.freq_base_swa, default 10000) without the scaling of the full layers; the softmax
// scale 1 / sqrt(head size), or 1 / sqrt(hidden / heads) for the 62-layer (27B) model, the
// only Gemma 3 whose query_pre_attn_scalar is not its head size.
void read_gemma3(const GgufFile& f, const ArchKeys& k, ModelConfig& c) {
  if (k.has("final_logit_softcapping") && f.get_float(k.key("final_logit_softcapping")) != 0.0)
    k.fail("final_logit_softcapping", "is set (logit soft-capping is not supported)");
  c.mlp_act = MlpActivation::GeluTanh;
  c.qk_norm = true;
  c.embed_scale = float(std::sqrt(double(c.d_model)));
  c.attn_scale = float(1.0 / std::sqrt(double(c.n_layers == 62 ? c.d_model / c.n_heads : c.head_dim)));
  c.rope_local = RopeParams{.theta = float(k.positive_number_or("rope.freq_base_swa", 10000.0))};
  if (c.sliding_window > 0) {
    const std::string pattern_key = k.key("attention.sliding_window_pattern");
    if (f.has(pattern_key) && !f.opt_uint(pattern_key))
      f.fail_key(pattern_key, "is not an unsigned integer (a per-layer list is not supported)");
    const int64_t period = k.positive_or("attention.sliding_window_pattern", kMaxLayers, 6);
    for (int64_t il = 0; il < c.n_layers; ++il)
      c.layer_types.push_back((il + 1) % period != 0 ? LayerAttention::Sliding : LayerAttention::Full);
  }
}

}  // namespace

ModelConfig gguf_model_config(const GgufFile& f) {
  ModelConfig c;
  const std::string arch(f.get_string("general.architecture"));
  const auto known = std::find_if(std::begin(kArchs), std::end(kArchs), [&](const auto& a) { return a.first == arch; });
  if (known == std::end(kArchs)) {
    f.fail_key("general.architecture", "is \"{}\": this architecture is not supported (supported: llama, which "
               "includes Mistral's and Mixtral's models, qwen2, qwen3, qwen3moe, phi3, gemma3)", arch);
  }
  const ArchKeys k(f, arch);
  const bool experts = arch == "qwen3moe" || (arch == "llama" && k.count_or_zero("expert_count", kMaxExperts) > 0);
  c.model_type = arch == "llama" && experts ? "mixtral" : std::string(known->second);
  c.d_model = k.positive("embedding_length", kMaxHidden);
  c.d_ff = arch == "qwen3moe" ? k.positive_or("feed_forward_length", kMaxIntermediate, 0)
                              : k.positive("feed_forward_length", kMaxIntermediate);
  c.n_layers = k.positive("block_count", kMaxLayers);
  c.max_position = k.positive("context_length", kMaxPositions);
  c.rms_norm_eps = float(k.positive_number("attention.layer_norm_rms_epsilon"));
  read_attention(k, arch, c);
  read_rope(f, k, c);
  c.rope_local = RopeParams{.theta = c.rope_theta, .scaling = c.rope_scaling};
  c.sliding_window = k.count_or_zero("attention.sliding_window", kMaxPositions);  // 0: none
  if (k.has("vocab_size")) {
    c.n_vocab = k.positive("vocab_size", kMaxVocab);
  } else {
    const size_t n = f.get_strings("tokenizer.ggml.tokens").size();
    if (n == 0 || n > size_t(kMaxVocab)) f.fail_key("tokenizer.ggml.tokens", "holds {} tokens (expected 1 to {})", n, kMaxVocab);
    c.n_vocab = int64_t(n);
  }
  c.attention_bias = arch == "qwen2" || f.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = arch == "qwen3" || arch == "qwen3moe";
  if (experts) read_experts(k, c);
  if (arch == "gemma3") read_gemma3(f, k, c);
  c.tie_word_embeddings = f.find_tensor("output.weight") == nullptr;
  read_special_ids(f, c);
  c.torch_dtype = "gguf";
  return c;
}

std::string_view gguf_architecture(const GgufFile& f) { return f.get_string("general.architecture"); }

}  // namespace tf

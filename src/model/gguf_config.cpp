#include "model/gguf_config.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "model/gguf/gguf_file.h"

namespace tf {

namespace {

// The bounds config.json's sizes get (config.h).
constexpr int64_t kMaxLayers = ConfigLimits::kMaxLayers, kMaxHidden = ConfigLimits::kMaxHidden,
                  kMaxIntermediate = ConfigLimits::kMaxIntermediate, kMaxHeads = ConfigLimits::kMaxHeads,
                  kMaxHeadDim = ConfigLimits::kMaxHeadDim, kMaxVocab = ConfigLimits::kMaxVocab,
                  kMaxPositions = ConfigLimits::kMaxPositions;

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

// Heads and head_dim, with the checks parse_model_config makes on a config.json.
void read_attention(const GgufFile& f, const ArchKeys& k, ModelConfig& c) {
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
  if (k.positive_or("rope.dimension_count", kMaxHeadDim, c.head_dim) != c.head_dim)
    k.fail("rope.dimension_count", "is not the head size {}: partial rotary embeddings are not supported", c.head_dim);
  if (c.head_dim % 2 != 0) k.fail("attention.key_length", "is {} (RoPE needs an even head size)", c.head_dim);
}

void read_rope(const GgufFile& f, const ArchKeys& k, ModelConfig& c) {
  c.rope_theta = float(k.positive_number_or("rope.freq_base", 10000.0));
  const std::string scaling(f.opt_string(k.key("rope.scaling.type")).value_or("none"));
  if (scaling != "none")
    k.fail("rope.scaling.type", "is \"{}\": RoPE scaling is not supported for GGUF files (only none)", scaling);
  if (k.has("rope.scaling.factor") && k.positive_number("rope.scaling.factor") != 1.0)
    k.fail("rope.scaling.factor", "is not 1: RoPE scaling is not supported for GGUF files");
  if (f.find_tensor("rope_freqs.weight"))
    fail("{}: tensor 'rope_freqs.weight' (per-frequency RoPE factors, as Llama 3.1 has) is not supported", f.path());
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

}  // namespace

ModelConfig gguf_model_config(const GgufFile& f) {
  ModelConfig c;
  c.model_type = f.get_string("general.architecture");
  if (c.model_type != "llama" && c.model_type != "qwen2") {
    f.fail_key("general.architecture", "is \"{}\": this architecture is not supported (supported: llama, which "
               "includes Mistral's models, and qwen2)", c.model_type);
  }
  const ArchKeys k(f, c.model_type);
  c.d_model = k.positive("embedding_length", kMaxHidden);
  c.d_ff = k.positive("feed_forward_length", kMaxIntermediate);
  c.n_layers = k.positive("block_count", kMaxLayers);
  c.max_position = k.positive("context_length", kMaxPositions);
  c.rms_norm_eps = float(k.positive_number("attention.layer_norm_rms_epsilon"));
  read_attention(f, k, c);
  read_rope(f, k, c);
  c.sliding_window = k.positive_or("attention.sliding_window", kMaxPositions, 0);
  if (k.has("vocab_size")) {
    c.n_vocab = k.positive("vocab_size", kMaxVocab);
  } else {
    const size_t n = f.get_strings("tokenizer.ggml.tokens").size();
    if (n == 0 || n > size_t(kMaxVocab)) f.fail_key("tokenizer.ggml.tokens", "holds {} tokens (expected 1 to {})", n, kMaxVocab);
    c.n_vocab = int64_t(n);
  }
  c.attention_bias = c.model_type == "qwen2" || f.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.tie_word_embeddings = f.find_tensor("output.weight") == nullptr;
  read_special_ids(f, c);
  c.torch_dtype = "gguf";
  return c;
}

}  // namespace tf

#include "model/weights.h"

#include <fmt/format.h>

#include <set>
#include <string_view>

#include "core/error.h"

namespace tf {

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// Checkpoint tensors that carry no weights: older transformers saved each layer's RoPE
// frequency table as a buffer. Anything else the table does not list is refused.
bool is_ignorable(std::string_view name) { return name.ends_with(".rotary_emb.inv_freq"); }

}  // namespace

// The Llama family (llama, mistral, qwen2) in transformers' names. Matrices are stored
// [out_features, in_features]. Global tensors first, then each layer in forward order.
std::vector<WeightSpec> llama_weight_specs(const ModelConfig& cfg) {
  const int64_t d_q = cfg.n_heads * cfg.head_dim;      // query width
  const int64_t d_kv = cfg.n_kv_heads * cfg.head_dim;  // key / value width
  // transformers' Llama biases q, k, v and o when attention_bias is set; Qwen2 biases q, k, v.
  const bool bias_o = cfg.attention_bias && cfg.arch == Arch::Llama;

  std::vector<WeightSpec> specs;
  specs.push_back({"model.embed_tokens.weight", WeightRole::Embedding, -1, {cfg.n_vocab, cfg.d_model}});
  specs.push_back({"model.norm.weight", WeightRole::FinalNorm, -1, {cfg.d_model}});
  specs.push_back({"lm_head.weight", WeightRole::LmHead, -1, {cfg.n_vocab, cfg.d_model},
                   /*optional=*/cfg.tie_word_embeddings});
  for (int il = 0; il < int(cfg.n_layers); ++il) {
    const std::string p = fmt::format("model.layers.{}.", il);
    auto add = [&](const char* suffix, WeightRole role, std::vector<int64_t> shape) {
      specs.push_back({p + suffix, role, il, std::move(shape)});
    };
    add("input_layernorm.weight", WeightRole::AttnNorm, {cfg.d_model});
    add("self_attn.q_proj.weight", WeightRole::Wq, {d_q, cfg.d_model});
    add("self_attn.k_proj.weight", WeightRole::Wk, {d_kv, cfg.d_model});
    add("self_attn.v_proj.weight", WeightRole::Wv, {d_kv, cfg.d_model});
    if (cfg.attention_bias) {
      add("self_attn.q_proj.bias", WeightRole::Bq, {d_q});
      add("self_attn.k_proj.bias", WeightRole::Bk, {d_kv});
      add("self_attn.v_proj.bias", WeightRole::Bv, {d_kv});
    }
    add("self_attn.o_proj.weight", WeightRole::Wo, {cfg.d_model, d_q});
    if (bias_o) add("self_attn.o_proj.bias", WeightRole::Bo, {cfg.d_model});
    add("post_attention_layernorm.weight", WeightRole::MlpNorm, {cfg.d_model});
    add("mlp.gate_proj.weight", WeightRole::Wgate, {cfg.d_ff, cfg.d_model});
    add("mlp.up_proj.weight", WeightRole::Wup, {cfg.d_ff, cfg.d_model});
    add("mlp.down_proj.weight", WeightRole::Wdown, {cfg.d_model, cfg.d_ff});
  }
  return specs;
}

// Every spec must be present (unless optional), with exactly the expected shape and a float
// dtype. A tensor the table does not know is refused too: it means a feature of the model
// (a bias, another block) that the forward pass would silently leave out.
void validate_checkpoint(const ModelConfig& cfg, const Checkpoint& ckpt) {
  const std::vector<WeightSpec> specs = llama_weight_specs(cfg);
  std::set<std::string_view> known;
  for (const WeightSpec& s : specs) {
    known.insert(s.name);
    const TensorInfo* t = ckpt.find(s.name);
    if (!t) {
      if (s.optional) continue;
      fail("{}: tensor '{}' is missing from the checkpoint (expected shape {} for this {} config)",
           ckpt.dir(), s.name, shape_str(s.shape), arch_name(cfg.arch));
    }
    if (t->shape != s.shape)
      fail("{}: tensor '{}' has shape {}, but the config expects {}", t->file, s.name,
           shape_str(t->shape), shape_str(s.shape));
    if (!is_float(t->dtype))
      fail("{}: tensor '{}' has dtype {}, expected a float type (F32, F16 or BF16)", t->file, s.name,
           dtype_name(t->dtype));
  }
  for (const auto& [name, t] : ckpt.all()) {
    if (!known.contains(name) && !is_ignorable(name))
      fail("{}: tensor '{}' is not a weight of the {} architecture with this config (unsupported "
           "feature, or a config that does not match the checkpoint)", t->file, name, arch_name(cfg.arch));
  }
}

}  // namespace tf

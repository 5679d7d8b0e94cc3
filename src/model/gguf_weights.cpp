#include "model/gguf_weights.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>

#include "core/error.h"
#include "core/progress.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf_config.h"
#include "quant/gguf_dequant.h"

namespace tf {

namespace {

constexpr std::pair<std::string_view, std::string_view> kGlobalNames[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};
// Layer tensors every architecture names alike.
constexpr std::pair<std::string_view, std::string_view> kLayerNames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_output.bias", "self_attn.o_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};
// Tensors the config reads (gguf_config.cpp), not weights.
constexpr std::string_view kConfigTensors[] = {"rope_freqs.weight", "rope_factors_short.weight",
                                               "rope_factors_long.weight"};

// The Hugging Face name of a layer tensor `rest` (after "blk.N.") of a model_type, or "".
// Experts' stacked tensors (ffn_*_exps) are not here: gguf_weights splits them.
std::string_view layer_name(std::string_view model_type, std::string_view rest) {
  for (const auto& [g, hf] : kLayerNames)
    if (rest == g) return hf;
  const bool gemma = model_type == "gemma3_text", phi = model_type == "phi3";
  if (rest == "ffn_norm.weight") return gemma ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight";
  if (rest == "ffn_up.weight") return phi ? "mlp.gate_up_proj.weight" : "mlp.up_proj.weight";
  if (phi && rest == "attn_qkv.weight") return "self_attn.qkv_proj.weight";
  if (gemma && rest == "post_attention_norm.weight") return "post_attention_layernorm.weight";
  if (gemma && rest == "post_ffw_norm.weight") return "post_feedforward_layernorm.weight";
  if (rest == "ffn_gate_inp.weight") {
    if (model_type == "mixtral") return "block_sparse_moe.gate.weight";
    if (model_type == "qwen3_moe") return "mlp.gate.weight";
  }
  return "";
}

// The layer of "blk.N.rest" and its rest, or nullopt.
std::optional<std::pair<int, std::string_view>> split_layer(std::string_view name) {
  if (!name.starts_with("blk.")) return std::nullopt;
  const size_t dot = name.find('.', 4);
  const std::string_view layer = name.substr(4, dot == std::string_view::npos ? 0 : dot - 4);
  if (layer.empty() || layer.size() > 9 || layer.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  return std::pair{std::stoi(std::string(layer)), name.substr(dot + 1)};
}

// Expert e's Hugging Face name for part 0, 1, 2 (gate, up, down) of layer il, or "".
std::string expert_part_name(std::string_view model_type, int il, size_t part, int64_t e) {
  if (model_type == "mixtral")
    return fmt::format("model.layers.{}.block_sparse_moe.experts.{}.{}.weight", il, e, std::array{"w1", "w3", "w2"}[part]);
  if (model_type == "qwen3_moe")
    return fmt::format("model.layers.{}.mlp.experts.{}.{}.weight", il, e,
                       std::array{"gate_proj", "up_proj", "down_proj"}[part]);
  return "";
}

// Expert e's Hugging Face name for a stacked expert tensor `rest` (ffn_gate_exps.weight, ...)
// of layer il, or "".
std::string expert_name(std::string_view model_type, int il, std::string_view rest, int64_t e) {
  static constexpr std::string_view kParts[] = {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"};
  const size_t part = size_t(std::find(std::begin(kParts), std::end(kParts), rest) - std::begin(kParts));
  return part == 3 ? "" : expert_part_name(model_type, il, part, e);
}

// The older files' one tensor per expert (ffn_gate.E.weight, ffn_up.E.weight,
// ffn_down.E.weight, as llama.cpp's converter wrote Mixtral before stacking them), or "".
std::string single_expert_name(std::string_view model_type, int il, std::string_view rest) {
  static constexpr std::string_view kParts[] = {"ffn_gate.", "ffn_up.", "ffn_down."};
  for (size_t part = 0; part < 3; ++part) {
    if (!rest.starts_with(kParts[part]) || !rest.ends_with(".weight")) continue;
    const std::string_view e = rest.substr(kParts[part].size(), rest.size() - kParts[part].size() - 7);
    if (e.empty() || e.size() > 4 || e.find_first_not_of("0123456789") != std::string_view::npos) return "";
    return expert_part_name(model_type, il, part, std::stoi(std::string(e)));
  }
  return "";
}

// What a GGUF file holds besides the tensors' own bytes: the mapping and the converted copies.
struct GgufStorage {
  std::shared_ptr<const GgufFile> file;
  std::vector<std::unique_ptr<uint8_t[]>> converted;
};

// Heads whose rows convert_hf_to_gguf.py reordered for ggml's RoPE (llama's q and k), or 0.
int64_t permuted_heads(const ModelConfig& cfg, std::string_view hf_name) {
  // Mixtral is llama's too; the other architectures' converters keep Hugging Face's layout.
  if (cfg.model_type != "llama" && cfg.model_type != "mixtral") return 0;
  if (hf_name.ends_with("self_attn.q_proj.weight") || hf_name.ends_with("self_attn.q_proj.bias")) return cfg.n_heads;
  if (hf_name.ends_with("self_attn.k_proj.weight") || hf_name.ends_with("self_attn.k_proj.bias")) return cfg.n_kv_heads;
  return 0;
}

// Puts the rows of `x` ([n_rows] rows of row_bytes each: F32 values or whole GGUF blocks) back
// in Hugging Face's order: within each head of head_dim = n_rows / n_heads rows, row
// t * head_dim/2 + j comes from row 2j + t.
void unpermute_rows(uint8_t* x, int64_t n_rows, size_t row_bytes, int64_t n_heads) {
  const int64_t hd = n_rows / n_heads, half = hd / 2;
  std::vector<uint8_t> copy(x, x + size_t(n_rows) * row_bytes);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t h = r / hd, t = (r % hd) / half, j = r % half;
    std::memcpy(x + size_t(r) * row_bytes, copy.data() + size_t(h * hd + 2 * j + t) * row_bytes, row_bytes);
  }
}

}  // namespace

std::string gguf_to_hf_name(std::string_view name, std::string_view model_type) {
  for (const auto& [g, hf] : kGlobalNames)
    if (name == g) return std::string(hf);
  const auto layer = split_layer(name);
  if (!layer) return "";
  const std::string_view hf = layer_name(model_type, layer->second);
  if (hf.empty()) return single_expert_name(model_type, layer->first, layer->second);
  return fmt::format("model.layers.{}.{}", layer->first, hf);
}

std::unique_ptr<TensorSource> gguf_weights(std::shared_ptr<const GgufFile> file, const ModelConfig& cfg,
                                           const GgufWeightOptions& opt) {
  auto storage = std::make_shared<GgufStorage>();
  storage->file = file;
  const std::string& path = file->path();
  const bool gemma = cfg.model_type == "gemma3_text";

  // Phase 1: names and types; what can stay in the mapping, what stays in blocks. A stacked
  // expert tensor [experts, rows, k] becomes one [rows, k] tensor per expert, each a
  // contiguous slice of its bytes.
  struct Plan {
    const GgufTensor* t;
    const uint8_t* src;  // the slice's bytes
    DType dtype;
    int64_t heads;
    bool blocks;
    float shift;  // added to every value (Gemma's norms: -1)
  };
  std::vector<TensorInfo> infos;
  std::vector<std::pair<size_t, Plan>> to_convert;  // index into infos
  for (const GgufTensor& t : file->tensors()) {
    if (std::find(std::begin(kConfigTensors), std::end(kConfigTensors), t.name) != std::end(kConfigTensors)) continue;
    std::vector<std::string> names;
    std::vector<int64_t> shape = t.shape();
    const auto layer = split_layer(t.name);
    if (const std::string one = gguf_to_hf_name(t.name, cfg.model_type); !one.empty()) {
      names.push_back(one);
    } else if (layer && !expert_name(cfg.model_type, layer->first, layer->second, 0).empty()) {
      if (shape.size() != 3 || shape[0] != cfg.n_experts)
        fail("{}: tensor '{}' has shape [{}] (expected [{}, rows, columns]: one matrix per expert)", path, t.name,
             fmt::join(shape, ", "), cfg.n_experts);
      for (int64_t e = 0; e < shape[0]; ++e) names.push_back(expert_name(cfg.model_type, layer->first, layer->second, e));
      shape.erase(shape.begin());
    } else {
      fail("{}: tensor '{}' is not a weight of the {} architecture that twofold knows", path, t.name,
           gguf_architecture(*file));
    }
    const std::optional<DType> dt = dtype_of_ggml(t.ggml_type);
    if (!dt || !can_dequantize(*dt))
      fail("{}: tensor '{}' has type {}, which is not supported (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, "
           "Q4_K, Q5_K, Q6_K)", path, t.name, t.type_name());
    const int64_t heads = permuted_heads(cfg, names[0]);
    const bool reorder = heads > 0 && shape[0] > 0 && shape[0] % (2 * heads) == 0;  // otherwise validation names the shape
    // Gemma 3's converter stores its norms as 1 + w; the weight table adds the one itself.
    const float shift = gemma && t.name.ends_with("norm.weight") ? -1.0f : 0.0f;
    const bool blocks = dtype_is_gguf_block(*dt) && shape.size() == 2 &&
                        std::find(opt.keep_blocks.begin(), opt.keep_blocks.end(), *dt) != opt.keep_blocks.end();
    const size_t slice = t.nbytes / names.size();
    const bool in_place = (blocks || !dtype_is_quantized(*dt)) && !reorder && shift == 0.0f &&
                          (blocks || t.offset % dtype_size(*dt) == 0);
    const DType dtype = in_place || blocks ? *dt : DType::F32;
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    for (size_t e = 0; e < names.size(); ++e) {
      const uint8_t* src = t.data + e * slice;
      TensorInfo info{.name = std::move(names[e]), .dtype = dtype, .shape = shape, .data = in_place ? src : nullptr,
                      .nbytes = blocks ? slice : size_t(numel) * dtype_size(dtype), .file = path};
      if (!in_place) to_convert.push_back({infos.size(), Plan{&t, src, *dt, reorder ? heads : 0, blocks, shift}});
      infos.push_back(std::move(info));
    }
  }

  // Phase 2: dequantize into F32 copies, or copy the blocks; reorder; shift.
  ProgressBar bar("dequantizing", int64_t(to_convert.size()));
  for (size_t i = 0; i < to_convert.size(); ++i) {
    const auto& [index, p] = to_convert[i];
    TensorInfo& info = infos[index];
    int64_t numel = 1;
    for (int64_t d : info.shape) numel *= d;
    const int64_t k = p.t->ne[0];
    auto buf = std::make_unique<uint8_t[]>(info.nbytes);
    if (p.blocks)
      std::memcpy(buf.get(), p.src, info.nbytes);
    else
      dequantize_rows(p.dtype, p.src, reinterpret_cast<float*>(buf.get()), k ? numel / k : 0, k);
    if (p.heads > 0) {
      const int64_t n_rows = info.shape[0];
      unpermute_rows(buf.get(), n_rows, info.nbytes / size_t(n_rows), p.heads);
    }
    if (p.shift != 0.0f) {
      float* v = reinterpret_cast<float*>(buf.get());
      for (int64_t j = 0; j < numel; ++j) v[j] += p.shift;
    }
    info.data = buf.get();
    storage->converted.push_back(std::move(buf));
    bar.update(int64_t(i + 1), info.name);
  }
  bar.finish();
  return std::make_unique<PreparedTensors>(path, std::move(infos), std::move(storage));
}

std::unique_ptr<TensorSource> open_gguf_weights(const std::string& path, const GgufWeightOptions& opt) {
  auto file = std::make_shared<const GgufFile>(path);
  return gguf_weights(file, gguf_model_config(*file), opt);
}

}  // namespace tf

#include "model/gguf_weights.h"

#include <algorithm>
#include <cstring>

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
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};

// What a GGUF file holds besides the tensors' own bytes: the mapping and the converted copies.
struct GgufStorage {
  std::shared_ptr<const GgufFile> file;
  std::vector<std::unique_ptr<uint8_t[]>> converted;
};

// Heads whose rows convert_hf_to_gguf.py reordered for ggml's RoPE (llama's q and k), or 0.
int64_t permuted_heads(const ModelConfig& cfg, std::string_view hf_name) {
  if (cfg.model_type != "llama") return 0;  // qwen2's converter keeps Hugging Face's layout
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

std::string gguf_to_hf_name(std::string_view name) {
  for (const auto& [g, hf] : kGlobalNames)
    if (name == g) return std::string(hf);
  if (!name.starts_with("blk.")) return "";
  const size_t dot = name.find('.', 4);
  const std::string_view layer = name.substr(4, dot == std::string_view::npos ? 0 : dot - 4);
  if (layer.empty() || layer.size() > 9 || layer.find_first_not_of("0123456789") != std::string_view::npos) return "";
  const std::string_view rest = name.substr(dot + 1);
  for (const auto& [g, hf] : kLayerNames)
    if (rest == g) return fmt::format("model.layers.{}.{}", std::stoi(std::string(layer)), hf);
  return "";
}

std::unique_ptr<TensorSource> gguf_weights(std::shared_ptr<const GgufFile> file, const ModelConfig& cfg,
                                           const GgufWeightOptions& opt) {
  auto storage = std::make_shared<GgufStorage>();
  storage->file = file;
  const std::string& path = file->path();

  // Phase 1: names and types; what can stay in the mapping, what stays in blocks.
  struct Plan { const GgufTensor* t; DType dtype; int64_t heads; bool blocks; };
  std::vector<TensorInfo> infos;
  std::vector<std::pair<size_t, Plan>> to_convert;  // index into infos
  for (const GgufTensor& t : file->tensors()) {
    std::string name = gguf_to_hf_name(t.name);
    if (name.empty())
      fail("{}: tensor '{}' is not a weight of the {} architecture that twofold knows", path, t.name, cfg.model_type);
    const std::optional<DType> dt = dtype_of_ggml(t.ggml_type);
    if (!dt || !can_dequantize(*dt))
      fail("{}: tensor '{}' has type {}, which is not supported (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, "
           "Q4_K, Q5_K, Q6_K)", path, t.name, t.type_name());
    const int64_t heads = permuted_heads(cfg, name);
    const std::vector<int64_t> shape = t.shape();
    const bool reorder = heads > 0 && shape[0] > 0 && shape[0] % (2 * heads) == 0;  // otherwise validation names the shape
    const bool blocks = dtype_is_gguf_block(*dt) && shape.size() == 2 &&
                        std::find(opt.keep_blocks.begin(), opt.keep_blocks.end(), *dt) != opt.keep_blocks.end();
    const bool in_place = (blocks || !dtype_is_quantized(*dt)) && !reorder && (blocks || t.offset % dtype_size(*dt) == 0);
    const DType dtype = in_place || blocks ? *dt : DType::F32;
    TensorInfo info{.name = std::move(name), .dtype = dtype, .shape = shape, .data = in_place ? t.data : nullptr,
                    .nbytes = blocks ? t.nbytes : size_t(t.numel()) * dtype_size(dtype), .file = path};
    if (!in_place) to_convert.push_back({infos.size(), Plan{&t, *dt, reorder ? heads : 0, blocks}});
    infos.push_back(std::move(info));
  }

  // Phase 2: dequantize into F32 copies, or copy the blocks; reorder.
  ProgressBar bar("dequantizing", int64_t(to_convert.size()));
  for (size_t i = 0; i < to_convert.size(); ++i) {
    const auto& [index, p] = to_convert[i];
    const int64_t numel = p.t->numel(), k = p.t->ne[0];
    auto buf = std::make_unique<uint8_t[]>(infos[index].nbytes);
    if (p.blocks)
      std::memcpy(buf.get(), p.t->data, infos[index].nbytes);
    else
      dequantize_rows(p.dtype, p.t->data, reinterpret_cast<float*>(buf.get()), k ? numel / k : 0, k);
    if (p.heads > 0) {
      const int64_t n_rows = infos[index].shape[0];
      unpermute_rows(buf.get(), n_rows, infos[index].nbytes / size_t(n_rows), p.heads);
    }
    infos[index].data = buf.get();
    storage->converted.push_back(std::move(buf));
    bar.update(int64_t(i + 1), infos[index].name);
  }
  bar.finish();
  return std::make_unique<PreparedTensors>(path, std::move(infos), std::move(storage));
}

std::unique_ptr<TensorSource> open_gguf_weights(const std::string& path, const GgufWeightOptions& opt) {
  auto file = std::make_shared<const GgufFile>(path);
  return gguf_weights(file, gguf_model_config(*file), opt);
}

}  // namespace tf

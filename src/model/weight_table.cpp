#include "model/weight_table.h"

#include <map>
#include <set>
#include <string_view>

#include "core/error.h"

namespace tf {

namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// The stored dtypes a tensor of this format and component may have (quant/formats.h), and
// their names for messages. FP8 values are E4M3 bytes: safetensors' F8_E4M3, or plain U8.
bool dtype_fits(const TensorSpec& s, DType t) {
  switch (s.component) {
    case TensorComponent::Values:
      switch (s.format) {
        case WeightFormat::Dense:  // a GGUF file's matrices may stay in their blocks (gguf_weights.h)
          return is_float(t) || (dtype_is_gguf_block(t) && s.shape.size() == 2 && s.shape[1] % dtype_block_elems(t) == 0);
        case WeightFormat::Int8: return t == DType::I8;
        case WeightFormat::Int4: return t == DType::U8;
        case WeightFormat::Fp8: return t == DType::FP8 || t == DType::U8;
      }
      return false;
    case TensorComponent::Scales: return t == (s.format == WeightFormat::Int4 ? DType::F16 : DType::F32);
    case TensorComponent::Zeros: return t == DType::U8;
  }
  return false;
}
std::string_view expected_dtypes(const TensorSpec& s) {
  switch (s.component) {
    case TensorComponent::Values:
      switch (s.format) {
        case WeightFormat::Dense: return "a float type (F32, F16 or BF16), or for a matrix a GGUF block type";
        case WeightFormat::Int8: return "I8";
        case WeightFormat::Int4: return "U8 (two 4-bit codes per byte)";
        case WeightFormat::Fp8: return "F8_E4M3 or U8";
      }
      return "?";
    case TensorComponent::Scales: return s.format == WeightFormat::Int4 ? "F16" : "F32";
    case TensorComponent::Zeros: return "U8";
  }
  return "?";
}

std::string_view component_name(TensorComponent c) {
  switch (c) {
    case TensorComponent::Values: return "values";
    case TensorComponent::Scales: return "scales";
    case TensorComponent::Zeros: return "zero points";
  }
  return "?";
}

// Why a quantized component has the shape it must have, for the message of a mismatch.
std::string expected_from(const TensorSpec& s) {
  const std::string w = fmt::format("{} weight {}", weight_format_name(s.format), shape_str(s.weight_shape));
  if (s.format != WeightFormat::Int4)
    return s.component == TensorComponent::Values ? fmt::format("the codes of the {}", w)
                                                  : fmt::format("one scale per row of the {}", w);
  if (s.component == TensorComponent::Values)
    return fmt::format("the {}, two 4-bit codes per byte: {} bytes", w, s.shape[0] * s.shape[1]);
  return fmt::format("one per group of {} along the input dimension of the {}", s.group_size, w);
}

// Checkpoint tensors that carry no weights: older transformers saved each layer's RoPE
// frequency table as a buffer. Anything else the table does not list is refused.
bool is_ignorable(std::string_view name) { return name.ends_with(".rotary_emb.inv_freq"); }

// " (layer N)" for a tensor named "model.layers.N. ...", else "": shape errors name the layer,
// whose widths may be its own (config.h layer_n_heads, ...).
std::string layer_of(std::string_view name) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (!name.starts_with(kPrefix)) return "";
  const std::string_view rest = name.substr(kPrefix.size());
  const size_t dot = rest.find('.');
  return dot == std::string_view::npos ? "" : fmt::format(" (layer {})", rest.substr(0, dot));
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The table's tensors by name (asserting that no name is listed twice).
std::map<std::string_view, const TensorSpec*> index_by_name(const WeightTable& t) {
  std::map<std::string_view, const TensorSpec*> m;
  for (const TensorSpec& s : t.tensors) TF_ASSERT(m.emplace(s.name, &s).second, "tensor '{}' listed twice", s.name);
  return m;
}

}  // namespace

std::string_view weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::Dense: return "dense";
    case WeightFormat::Int8: return "int8";
    case WeightFormat::Int4: return "int4";
    case WeightFormat::Fp8: return "fp8";
  }
  return "?";
}

DType weight_format_dtype(WeightFormat f) {
  switch (f) {
    case WeightFormat::Int8: return DType::W8;
    case WeightFormat::Int4: return DType::W4;
    case WeightFormat::Fp8: return DType::FP8;
    case WeightFormat::Dense: break;
  }
  TF_ASSERT(false, "dense weights have no quantized dtype");
  return DType::F32;
}

WeightFormat weight_format_of(DType quantized) {
  switch (quantized) {
    case DType::W8: return WeightFormat::Int8;
    case DType::W4: return WeightFormat::Int4;
    case DType::FP8: return WeightFormat::Fp8;
    default: break;
  }
  TF_ASSERT(false, "{} is not a quantized weight format", dtype_name(quantized));
  return WeightFormat::Dense;
}

bool is_linear_role(WeightRole r) {
  return r == WeightRole::Wqkv || r == WeightRole::Wo || r == WeightRole::WgateUp || r == WeightRole::Wdown ||
         r == WeightRole::LmHead || r == WeightRole::ExpertsGateUp || r == WeightRole::ExpertsDown;
}

std::string_view weight_role_name(WeightRole r) {
  switch (r) {
    case WeightRole::Embedding: return "embedding";
    case WeightRole::FinalNorm: return "final_norm";
    case WeightRole::LmHead: return "lm_head";
    case WeightRole::AttnNorm: return "attn_norm";
    case WeightRole::Wqkv: return "wqkv";
    case WeightRole::Bqkv: return "bqkv";
    case WeightRole::QNorm: return "q_norm";
    case WeightRole::KNorm: return "k_norm";
    case WeightRole::AttnPostNorm: return "attn_post_norm";
    case WeightRole::MlpPostNorm: return "mlp_post_norm";
    case WeightRole::Router: return "router";
    case WeightRole::ExpertsGateUp: return "experts_gate_up";
    case WeightRole::ExpertsDown: return "experts_down";
    case WeightRole::Wo: return "wo";
    case WeightRole::Bo: return "bo";
    case WeightRole::MlpNorm: return "mlp_norm";
    case WeightRole::WgateUp: return "wgate_up";
    case WeightRole::Wdown: return "wdown";
    case WeightRole::Bdown: return "bdown";
  }
  return "?";
}

TpRange tp_groups(int64_t n_groups, int32_t rank, int32_t size) {
  TF_ASSERT(size >= 1 && rank >= 0 && rank < size, "rank {} of {}", rank, size);
  if (n_groups % size == 0) return {.begin = rank * (n_groups / size), .count = n_groups / size};
  if (size % n_groups == 0) return {.begin = int64_t(rank) * n_groups / size, .count = 1};
  fail("tensor parallel size {} neither divides {} groups (heads, columns or vocabulary rows) nor is a multiple of "
       "them", size, n_groups);
}

const TensorSpec* WeightTable::find_tensor(std::string_view name) const {
  for (const TensorSpec& s : tensors)
    if (s.name == name) return &s;
  return nullptr;
}

const WeightSpec* WeightTable::find(WeightKey key) const {
  for (const WeightSpec& w : weights)
    if (w.key == key) return &w;
  return nullptr;
}

int64_t WeightTable::n_params() const {
  int64_t n = 0;
  for (const TensorSpec& s : tensors) {
    if (s.optional || s.component != TensorComponent::Values) continue;
    n += numel(s.format == WeightFormat::Dense ? s.shape : s.weight_shape);
  }
  return n;
}

WeightPart add_dense_tensor(WeightTable& t, TensorSpec spec, TpSlice tp) {
  spec.format = WeightFormat::Dense;
  spec.component = TensorComponent::Values;
  WeightPart part{.tensor = spec.name, .row0 = 0, .shape = spec.shape, .tp = tp};
  t.tensors.push_back(std::move(spec));
  return part;
}

void check_table(const WeightTable& t) {
  const std::map<std::string_view, const TensorSpec*> by_name = index_by_name(t);
  std::set<WeightKey> keys;
  for (const WeightSpec& w : t.weights) {
    const std::string_view role = weight_role_name(w.key.role);
    TF_ASSERT(keys.insert(w.key).second, "weight {} of layer {} listed twice", role, w.key.layer);
    TF_ASSERT(!w.parts.empty(), "weight {} of layer {} has no parts", role, w.key.layer);
    for (const WeightPart& p : w.parts) {
      const auto it = by_name.find(p.tensor);
      const TensorSpec* s = it == by_name.end() ? nullptr : it->second;
      TF_ASSERT(s && s->component == TensorComponent::Values, "weight {} names tensor '{}', not in the table", role,
                p.tensor);
      for (const auto& [name, component] : {std::pair{&p.scales, TensorComponent::Scales},
                                            std::pair{&p.zeros, TensorComponent::Zeros}}) {
        const auto at = by_name.find(*name);
        TF_ASSERT(name->empty() || (at != by_name.end() && at->second->component == component),
                  "weight {} names tensor '{}' for its scales or zeros, not in the table as such", role, *name);
        TF_ASSERT(name->empty() || w.format != WeightFormat::Dense, "weight {}: dense, but names '{}'", role, *name);
      }
      TF_ASSERT(!p.shape.empty() && p.shape.size() == s->shape.size() && p.row0 >= 0 &&  // rows are never packed
                    p.row0 + p.shape[0] <= s->shape[0],
                "weight {}: rows [{}, {}) of '{}' {}", role, p.row0, p.row0 + p.shape[0], p.tensor, shape_str(s->shape));
      for (size_t d = 1; d < p.shape.size(); ++d)  // (a dense part's columns are its tensor's)
        TF_ASSERT((p.shape[d] == s->shape[d] || w.format != WeightFormat::Dense) && p.shape[d] == w.parts[0].shape[d],
                  "weight {}: part '{}' is {}", role, p.tensor, shape_str(p.shape));
      if (p.tp.split == TpSplit::Rows)
        TF_ASSERT(p.tp.n_groups * p.tp.group_size == p.shape[0], "weight {}: {} row groups of {} for {} rows", role,
                  p.tp.n_groups, p.tp.group_size, p.shape[0]);
      if (p.tp.split == TpSplit::Columns)
        TF_ASSERT(p.shape.size() == 2 && p.tp.n_groups * p.tp.group_size == p.shape[1] &&
                      p.tp.n_groups == w.parts[0].tp.n_groups && p.tp.group_size == w.parts[0].tp.group_size,
                  "weight {}: {} column groups of {} for {}", role, p.tp.n_groups, p.tp.group_size,
                  shape_str(p.shape));
      TF_ASSERT((p.tp.split == TpSplit::Columns) == (w.parts[0].tp.split == TpSplit::Columns),
                "weight {}: column-split and other parts mixed", role);
      TF_ASSERT(p.transform == PartTransform::None || w.format == WeightFormat::Dense,
                "weight {}: a transform on a quantized part", role);
    }
  }
}

// Every spec must be present (unless optional), with exactly the expected shape and a dtype of
// its format. A tensor the table does not know is refused too.
void validate_weights(const WeightTable& table, const TensorSource& source) {
  const std::map<std::string_view, const TensorSpec*> known = index_by_name(table);
  for (const TensorSpec& s : table.tensors) {
    const TensorInfo* t = source.find(s.name);
    if (!t) {
      if (s.optional) continue;
      fail("{}: tensor '{}' is missing from the checkpoint (expected shape {} for this {} config)", source.origin(),
           s.name, shape_str(s.shape), table.arch);
    }
    if (t->shape != s.shape && s.format == WeightFormat::Dense)
      fail("{}: tensor '{}'{} has shape {}, but the config expects {}", t->file, s.name, layer_of(s.name),
           shape_str(t->shape), shape_str(s.shape));
    if (t->shape != s.shape)
      fail("{}: tensor '{}'{} ({} {}) has shape {} ({} bytes), expected {} ({})", t->file, s.name, layer_of(s.name),
           weight_format_name(s.format), component_name(s.component), shape_str(t->shape), t->nbytes,
           shape_str(s.shape), expected_from(s));
    if (!dtype_fits(s, t->dtype))
      fail("{}: tensor '{}' has dtype {}, expected {} for {} {}", t->file, s.name, dtype_name(t->dtype),
           expected_dtypes(s), weight_format_name(s.format),
           s.format == WeightFormat::Dense ? "weights" : component_name(s.component));
  }
  for (const auto& [name, t] : source.all()) {
    if (!known.contains(name) && !is_ignorable(name))
      fail("{}: tensor '{}' is not a weight of the {} architecture with this config (unsupported "
           "feature, or a config that does not match the checkpoint)", t->file, name, table.arch);
  }
}

}  // namespace tf

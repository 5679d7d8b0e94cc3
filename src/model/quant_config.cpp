#include "model/quant_config.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "quant/quantized_weight.h"

namespace tf {

namespace {

constexpr const char* kPrefix = "quantization_config.";

int32_t group_size_field(const ConfigFields& q, const char* key, const nlohmann::json& v) {
  if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() % 32 != 0 || v.get<int64_t>() > (1 << 20))
    fail("{}: field '{}{}' is {} (expected a positive multiple of 32)", q.origin(), q.field(key),
         key == std::string_view("group_size_overrides") ? "[...]" : "", v.dump());
  return int32_t(v.get<int64_t>());
}

}  // namespace

QuantConfig parse_quant_config(const ConfigFields& f) {
  QuantConfig c;
  c.origin = f.origin();
  if (!f.has("quantization_config")) return c;
  if (!f.at("quantization_config").is_object()) f.bad("quantization_config", "an object or null");
  const ConfigFields q(f.at("quantization_config"), f.origin(), kPrefix);
  const std::string method = q.string_or("quant_method", "");
  if (method != "twofold")
    fail("{}: field '{}quant_method' is \"{}\": only \"twofold\" checkpoints are read (the layout `twofold "
         "quantize` writes, docs/QUANT.md); convert other quantized checkpoints from their 16-bit original",
         f.origin(), kPrefix, method);
  const std::string format = q.string("format");
  if (format != "int8" && format != "int4" && format != "fp8") q.bad("format", "\"int8\", \"int4\" or \"fp8\"");
  c.format = parse_quant_format(format, f.origin());
  if (c.format == DType::W4) {
    if (!q.has("group_size")) q.missing("group_size", "the int4 group size, a positive multiple of 32");
    c.group_size = group_size_field(q, "group_size", q.at("group_size"));
    c.symmetric = q.boolean_or("symmetric", false);
  } else {
    for (const char* key : {"group_size", "group_size_overrides"})
      if (q.has(key)) q.bad(key, fmt::format("absent: {} has one scale per output row", format));
  }
  c.method = q.string_or("method", "");
  if (q.has("modules_to_not_convert")) {
    const nlohmann::json& m = q.at("modules_to_not_convert");
    if (!m.is_array()) q.bad("modules_to_not_convert", "a list of module names");
    for (const nlohmann::json& e : m) {
      if (!e.is_string()) q.bad("modules_to_not_convert", "a list of module names");
      c.modules_to_not_convert.push_back(e.get<std::string>());
    }
  }
  if (q.has("group_size_overrides")) {
    const nlohmann::json& o = q.at("group_size_overrides");
    if (!o.is_object()) q.bad("group_size_overrides", "an object {module: group size}");
    for (const auto& [module, g] : o.items())
      c.group_size_overrides.emplace_back(module, group_size_field(q, "group_size_overrides", g));
  }
  return c;
}

std::string module_of(std::string_view dense_tensor) {
  constexpr std::string_view kSuffix = ".weight";
  if (!dense_tensor.ends_with(kSuffix)) return "";
  return std::string(dense_tensor.substr(0, dense_tensor.size() - kSuffix.size()));
}

std::string quantized_tensor_name(std::string_view module, TensorComponent c) {
  switch (c) {
    case TensorComponent::Values: return std::string(module) + ".qweight";
    case TensorComponent::Scales: return std::string(module) + ".scales";
    case TensorComponent::Zeros: return std::string(module) + ".zeros";
  }
  return "";
}

TensorSpec quantized_tensor_spec(std::string_view module, WeightFormat format, TensorComponent c,
                                 const std::vector<int64_t>& weight_shape, int32_t group_size) {
  TF_ASSERT(weight_shape.size() == 2 && format != WeightFormat::Dense, "{}: {}", module, shape_str(weight_shape));
  const int64_t m = weight_shape[0], k = weight_shape[1];
  const bool w4 = format == WeightFormat::Int4;
  TF_ASSERT(!w4 || (group_size > 0 && k % group_size == 0), "{}: group size {} for k {}", module, group_size, k);
  std::vector<int64_t> shape;
  switch (c) {
    case TensorComponent::Values: shape = {m, w4 ? k / 2 : k}; break;
    case TensorComponent::Scales: shape = w4 ? std::vector<int64_t>{m, k / group_size} : std::vector<int64_t>{m}; break;
    case TensorComponent::Zeros: shape = {m, k / group_size}; break;
  }
  return TensorSpec{.name = quantized_tensor_name(module, c), .shape = std::move(shape), .format = format,
                    .component = c, .weight_shape = weight_shape, .group_size = w4 ? group_size : 0};
}

// Phases: (1) which tensors are linear modules (named by linear weights only: a tied LM head
// shares the embedding's tensor and stays dense) and check the config's module names against
// them; (2) per linear weight, whether it is converted and with which group size; (3) the
// converted modules' dense specs replaced, in place, by their components.
void apply_quant_config(WeightTable& t, const QuantConfig& q) {
  if (!q.quantized()) return;
  const WeightFormat format = weight_format_of(q.format);
  std::set<std::string> linear, other;  // tensors named by linear / other weights
  for (const WeightSpec& w : t.weights)
    for (const WeightPart& p : w.parts) (is_linear_role(w.key.role) ? linear : other).insert(p.tensor);
  std::set<std::string> modules;
  for (const std::string& name : linear)
    if (!other.contains(name) && !module_of(name).empty()) modules.insert(module_of(name));
  const std::set<std::string> keep(q.modules_to_not_convert.begin(), q.modules_to_not_convert.end());
  const std::map<std::string, int32_t> overrides(q.group_size_overrides.begin(), q.group_size_overrides.end());
  for (const std::string& m : keep)
    if (!modules.contains(m))
      fail("{}: quantization_config.modules_to_not_convert names '{}', which is no linear module of this {} model",
           q.origin, m, t.arch);
  for (const auto& [m, g] : overrides)
    if (!modules.contains(m))
      fail("{}: quantization_config.group_size_overrides names '{}', which is no linear module of this {} model",
           q.origin, m, t.arch);

  std::map<std::string, std::pair<std::vector<int64_t>, int32_t>> converted;  // dense tensor -> shape, group
  for (WeightSpec& w : t.weights) {
    if (!is_linear_role(w.key.role)) continue;
    std::vector<std::string> names;
    int n_converted = 0;
    for (const WeightPart& p : w.parts) {
      names.push_back(module_of(p.tensor));
      n_converted += modules.contains(names.back()) && !keep.contains(names.back());
    }
    if (n_converted == 0) continue;
    if (n_converted != int(w.parts.size()))
      fail("{}: quantization_config.modules_to_not_convert must list all or none of {} (one fused matrix of the "
           "forward)", q.origin, fmt::join(names, ", "));
    int32_t group = 0;
    for (size_t i = 0; i < w.parts.size(); ++i) {
      const std::string& m = names[i];
      const int64_t k = w.parts[i].shape.back();
      const int32_t g = format != WeightFormat::Int4 ? 0 : overrides.contains(m) ? overrides.at(m) : q.group_size;
      if (g && k % g != 0)
        fail("{}: quantization_config group size {} does not divide the input dimension {} of {} (int4 groups run "
             "along the input dimension; give it a group_size_overrides entry)", q.origin, g, k, m);
      if (i > 0 && g != group)
        fail("{}: {} and {} have group sizes {} and {}, but the forward fuses them into one matrix", q.origin,
             names[0], m, group, g);
      group = g;
    }
    w.format = format;
    w.group_size = group;
    for (WeightPart& p : w.parts) {
      const TensorSpec* dense = t.find_tensor(p.tensor);
      TF_ASSERT(dense && dense->shape.size() == 2, "linear tensor {}", p.tensor);
      converted[p.tensor] = {dense->shape, group};
      const std::string m = module_of(p.tensor);
      p.tensor = quantized_tensor_name(m, TensorComponent::Values);
      p.scales = quantized_tensor_name(m, TensorComponent::Scales);
      if (format == WeightFormat::Int4) p.zeros = quantized_tensor_name(m, TensorComponent::Zeros);
    }
  }
  std::vector<TensorSpec> tensors;
  for (TensorSpec& s : t.tensors) {
    auto it = converted.find(s.name);
    if (it == converted.end()) {
      tensors.push_back(std::move(s));
      continue;
    }
    const std::string m = module_of(s.name);
    const auto& [shape, group] = it->second;
    for (TensorComponent c : {TensorComponent::Values, TensorComponent::Scales, TensorComponent::Zeros}) {
      if (c == TensorComponent::Zeros && format != WeightFormat::Int4) continue;
      TensorSpec spec = quantized_tensor_spec(m, format, c, shape, group);
      spec.optional = s.optional;
      tensors.push_back(std::move(spec));
    }
  }
  t.tensors = std::move(tensors);
}

}  // namespace tf

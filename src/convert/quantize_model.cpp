#include "convert/quantize_model.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <span>

#include "backend/backend.h"
#include "backend/host_backend.h"
#include "core/error.h"
#include "model/arch/model.h"
#include "model/arch/registry.h"
#include "model/quant_config.h"
#include "model/write_safetensors.h"
#include "model/tensor_source.h"
#include "convert/calibration.h"
#include "convert/model_folder.h"
#include "quant/capture_backend.h"
#include "quant/quantizer.h"

namespace tf {

namespace {

namespace fs = std::filesystem;
using R = WeightRole;

// Architectures whose RMSNorm multiplies by its weight as stored (so 1 / s folds into it) and
// whose dense MLP is down(silu(gate) * up) (so 1 / s folds into up's rows; Phi-3's up rows are
// the second half of gate_up_proj). A mixture-of-experts layer's norm also feeds the router
// and every expert, so only q|k|v folds there.
bool awq_folds(const std::string& model_type) {
  return model_type == "llama" || model_type == "mistral" || model_type == "qwen2" || model_type == "qwen3" ||
         model_type == "phi3" || model_type == "mixtral" || model_type == "qwen3_moe";
}

std::string weight_name(const WeightKey& key) {
  if (key.layer < 0) return std::string(weight_role_name(key.role));
  return fmt::format("layer {} {}", key.layer, weight_role_name(key.role));
}

// What the quantizer takes in one go: a linear weight, or one expert's rows of a layer's
// stacked expert weights (parts [part0, part0 + n_parts): gate and up, or down).
struct Unit {
  const WeightSpec* w = nullptr;
  int part0 = 0, n_parts = 0;
  int expert = -1;
  std::string name;  // in the report: "layer 3 wqkv", "layer 1 expert 2 wgate_up", "lm_head"
};

// The units of the table in quantization order: layer by layer, down before gate|up (AWQ folds
// down's scales into up's rows before up is quantized), the LM head last (when quantized).
std::vector<Unit> units_of(const WeightTable& table, bool tied, bool quantize_lm_head, int64_t n_experts) {
  std::vector<Unit> out;
  for (const WeightSpec& w : table.weights) {
    if (!is_linear_role(w.key.role) || (w.key.role == R::LmHead && (tied || !quantize_lm_head))) continue;
    if (w.key.role == R::ExpertsGateUp || w.key.role == R::ExpertsDown) {
      const int per = int(int64_t(w.parts.size()) / n_experts);  // 2 (gate, up) or 1 (down)
      for (int e = 0; e < int(n_experts); ++e)
        out.push_back({.w = &w, .part0 = e * per, .n_parts = per, .expert = e,
                       .name = fmt::format("layer {} expert {} {}", w.key.layer, e,
                                           w.key.role == R::ExpertsGateUp ? "wgate_up" : "wdown")});
    } else {
      out.push_back({.w = &w, .part0 = 0, .n_parts = int(w.parts.size()), .name = weight_name(w.key)});
    }
  }
  auto rank = [](R r) {
    return r == R::Wdown ? 0 : r == R::WgateUp ? 1 : r == R::Wqkv ? 2 : r == R::Wo ? 3 : r == R::ExpertsGateUp ? 4 : 5;
  };
  std::stable_sort(out.begin(), out.end(), [&](const Unit& a, const Unit& b) {
    const int la = a.w->key.layer < 0 ? 1 << 30 : a.w->key.layer, lb = b.w->key.layer < 0 ? 1 << 30 : b.w->key.layer;
    return la != lb ? la < lb : rank(a.w->key.role) < rank(b.w->key.role);
  });
  return out;
}

// The modules (stored tensors) of a unit's parts: consecutive parts of one tensor are one
// module (Phi-3's qkv_proj holds q, k and v), rows [r0, r0 + n) of the stacked matrix, of a
// tensor of tensor_rows rows.
struct ModuleRows {
  std::string module;
  int64_t r0 = 0, n = 0, tensor_rows = 0;
};
std::vector<ModuleRows> module_rows(std::span<const WeightPart> parts, const std::vector<std::string>& modules,
                                    const WeightTable& table) {
  std::vector<ModuleRows> out;
  int64_t r0 = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const WeightPart& part = parts[i];
    if (!out.empty() && out.back().module == modules[i] && out.back().n == part.row0) {
      out.back().n += part.shape[0];
    } else {
      out.push_back({.module = modules[i], .r0 = r0, .n = part.row0 + part.shape[0],
                     .tensor_rows = table.find_tensor(part.tensor)->shape[0]});
      if (part.row0 != 0) out.back().n = -1;  // starts inside its tensor: reported below
    }
    r0 += part.shape[0];
  }
  return out;
}

// The model being written: every tensor's bytes, the dense ones from the source or changed
// (folded) copies, the quantized modules' components.
struct Store {
  std::shared_ptr<TensorSource> source;
  std::map<std::string, std::vector<float>> changed;     // dense tensors rewritten as F32
  std::map<std::string, QuantizedWeight> quantized;       // module -> its weight
  // AWQ-quantized modules as 16-bit, w * s (their input arrives divided by s): what a module
  // kept 16-bit stores.
  std::map<std::string, std::vector<float>> dense_if_kept;
};

struct Quantized {
  QuantizedWeight q;
  std::vector<float> input_scales;  // AWQ's s [k]; empty otherwise
  std::string how;
};

Quantized quantize_one(const std::vector<float>& w, int64_t m, int64_t k, const QuantSpec& spec,
                       const std::string& method, const CaptureBackend::Record* calib, const std::string& name,
                       const QuantizeParams& p) {
  const CalibRows rows{calib ? calib->rows.data() : nullptr, calib ? calib->n_rows : 0};
  const GptqParams gptq{.damp = p.gptq_damp, .act_order = p.act_order, .static_groups = p.static_groups,
                        .n_clip = p.gptq_clip, .refit_rounds = p.gptq_refit, .cd_rounds = p.gptq_cd,
                        .cd_damp = p.gptq_cd_damp};
  if (method == "gptq" && rows.n > 0) return {quantize_gptq(w.data(), m, k, rows, spec, name, gptq), {}, "gptq"};
  if (method == "awq" && rows.n > 0) {
    AwqResult a = quantize_awq(w.data(), m, k, rows, spec, name);
    return {std::move(a.weight), std::move(a.input_scales), "awq"};
  }
  if (method == "awq-gptq" && rows.n > 0) {
    // AWQ's per-channel scales s (its clip search skipped), then GPTQ on w * s with inputs x / s.
    AwqResult a = quantize_awq(w.data(), m, k, rows, spec, name, AwqParams{.n_clip = 1});
    std::vector<float> ws = w, xs = calib->rows;
    for (size_t e = 0; e < ws.size(); ++e) ws[e] *= a.input_scales[e % size_t(k)];
    for (size_t e = 0; e < xs.size(); ++e) xs[e] /= a.input_scales[e % size_t(k)];
    QuantizedWeight q = quantize_gptq(ws.data(), m, k, CalibRows{xs.data(), rows.n}, spec, name, gptq);
    return {std::move(q), std::move(a.input_scales), "awq-gptq"};
  }
  return {quantize_rtn(w.data(), m, k, spec, name), {}, "rtn"};
}

std::string format_label(const QuantSpec& s) {
  return s.format == DType::W4 ? fmt::format("int4 g{}", s.group_size) : std::string(quant_format_name(s.format));
}

// Rows [r0, r0 + n) of q as their own weight (rows carry their own scales and zero points).
QuantizedWeight row_slice(const QuantizedWeight& q, int64_t r0, int64_t n) {
  QuantizedWeight out = QuantizedWeight::zeros_like(q.dtype, n, q.k, q.group_size);
  const size_t d = out.data.size() / size_t(n), s = out.scales.size() / size_t(n);
  std::copy_n(q.data.begin() + long(size_t(r0) * d), out.data.size(), out.data.begin());
  std::copy_n(q.scales.begin() + long(size_t(r0) * s), out.scales.size(), out.scales.begin());
  if (!q.zeros.empty()) {
    const size_t z = out.zeros.size() / size_t(n);
    std::copy_n(q.zeros.begin() + long(size_t(r0) * z), out.zeros.size(), out.zeros.begin());
  }
  return out;
}

// The quantization_config of the written model.
QuantConfig quant_config_of(const QuantizeParams& p, const WeightTable& table, const Store& st,
                            const std::set<std::string>& keep) {
  QuantConfig c{.format = p.format, .group_size = p.format == DType::W4 ? p.group_size : 0, .method = p.method};
  c.symmetric = p.format == DType::W4 && p.symmetric;
  std::set<std::string> modules;  // linear modules with tensors of their own
  for (const WeightSpec& w : table.weights)
    if (is_linear_role(w.key.role))
      for (const WeightPart& part : w.parts)
        if (const TensorSpec* s = table.find_tensor(part.tensor); s && !s->optional) modules.insert(module_of(part.tensor));
  for (const WeightSpec& w : table.weights)
    if (!is_linear_role(w.key.role))
      for (const WeightPart& part : w.parts) modules.erase(module_of(part.tensor));  // a tied head is the embedding
  if (const TensorSpec* head = table.find_tensor("lm_head.weight"); head && head->optional) modules.erase("lm_head");
  for (const std::string& m : modules) {
    auto it = st.quantized.find(m);
    if (it == st.quantized.end() || keep.contains(m)) c.modules_to_not_convert.push_back(m);
    else if (p.format == DType::W4 && it->second.group_size != p.group_size)
      c.group_size_overrides.emplace_back(m, it->second.group_size);
  }
  return c;
}

nlohmann::json quant_config_json(const QuantConfig& c) {
  nlohmann::json j = {{"quant_method", "twofold"}, {"format", quant_format_name(c.format)}, {"method", c.method}};
  if (c.format == DType::W4) {
    j["group_size"] = c.group_size;
    j["symmetric"] = c.symmetric;
    nlohmann::json o = nlohmann::json::object();
    for (const auto& [m, g] : c.group_size_overrides) o[m] = g;
    if (!o.empty()) j["group_size_overrides"] = o;
  }
  j["modules_to_not_convert"] = c.modules_to_not_convert;
  return j;
}

// The stored tensors of the quantized table `qt` from the store, in the table's order.
struct Assembled {
  std::vector<TensorInfo> infos;
  std::vector<TensorToWrite> writes;
};
Assembled assemble(const WeightTable& qt, const Store& st, const std::set<std::string>& keep) {
  Assembled a;
  for (const TensorSpec& s : qt.tensors) {
    TensorInfo t{.name = s.name, .shape = s.shape};
    if (s.format == WeightFormat::Dense) {
      const TensorInfo* src = st.source->find(s.name);
      if (!src) continue;  // an optional tensor the checkpoint does not have
      const std::string m = module_of(s.name);
      auto kept = keep.contains(m) ? st.dense_if_kept.find(m) : st.dense_if_kept.end();
      auto it = kept != st.dense_if_kept.end() ? kept : st.changed.find(s.name);
      if (it != st.changed.end() && it != st.dense_if_kept.end()) {
        t.dtype = DType::F32;
        t.data = reinterpret_cast<const uint8_t*>(it->second.data());
        t.nbytes = it->second.size() * 4;
      } else {
        t.dtype = src->dtype;
        t.data = src->data;
        t.nbytes = src->nbytes;
      }
    } else {
      const std::string m = s.name.substr(0, s.name.rfind('.'));  // M.qweight, M.scales, M.zeros
      const QuantizedWeight& q = st.quantized.at(m);
      const std::vector<uint8_t>& bytes =
          s.component == TensorComponent::Values ? q.data : s.component == TensorComponent::Scales ? q.scales : q.zeros;
      t.dtype = s.component == TensorComponent::Values
                    ? (q.dtype == DType::W8 ? DType::I8 : q.dtype == DType::FP8 ? DType::FP8 : DType::U8)
                    : s.component == TensorComponent::Scales ? (q.dtype == DType::W4 ? DType::F16 : DType::F32)
                                                             : DType::U8;
      t.data = bytes.data();
      t.nbytes = bytes.size();
    }
    t.file = "(in memory)";
    a.writes.push_back({.name = t.name, .dtype = t.dtype, .shape = t.shape, .data = t.data, .nbytes = t.nbytes});
    a.infos.push_back(std::move(t));
  }
  return a;
}

// The model of cfg stored as `st` holds it with `keep` modules left 16-bit (and modules not
// yet quantized 16-bit as the source holds them), loaded onto `be`.
std::unique_ptr<Model> candidate_model(const ModelConfig& dense_cfg, const WeightTable& dense_table,
                                       const QuantizeParams& p, const Store& st, const std::set<std::string>& keep,
                                       Backend& be) {
  ModelConfig cfg = dense_cfg;
  cfg.quant = quant_config_of(p, dense_table, st, keep);
  cfg.quant.origin = "(quantize candidate)";
  if (std::all_of(st.quantized.begin(), st.quantized.end(), [&](const auto& q) { return keep.contains(q.first); }))
    cfg.quant = QuantConfig{};  // every module 16-bit: the dense table
  WeightTable qt = weight_table(cfg);
  Assembled a = assemble(qt, st, keep);
  // The bytes live in `st` and its source, which outlive the model.
  auto src = std::make_unique<PreparedTensors>("(quantize candidate)", std::move(a.infos), std::shared_ptr<const void>());
  return load_model(std::move(cfg), std::move(src), be, LoadOptions{});
}

// That model's perplexity on the calibration tokens, on a CPU backend.
double candidate_ppl(const ModelConfig& dense_cfg, const WeightTable& dense_table, const QuantizeParams& p,
                     const Store& st, const std::set<std::string>& keep) {
  auto cpu = make_backend(BackendKind::Cpu);
  auto model = candidate_model(dense_cfg, dense_table, p, st, keep, *cpu);
  return model_perplexity(*model, *cpu, p.calib_ids, p.eval_window);
}


}  // namespace

QuantizeReport quantize_model(const QuantizeParams& p) {
  if (p.method != "rtn" && p.method != "awq" && p.method != "gptq" && p.method != "awq-gptq")
    fail("--method: unknown method '{}' (expected rtn, awq, gptq or awq-gptq)", p.method);
  if (p.format != DType::W8 && p.format != DType::W4 && p.format != DType::FP8)
    fail("--format: {} is not int8, int4 or fp8", dtype_name(p.format));
  if (p.format == DType::W4 && (p.group_size <= 0 || p.group_size % 32 != 0))
    fail("--group-size {} is not a positive multiple of 32", p.group_size);
  if (p.method != "rtn" && p.calib_ids.empty()) fail("--method {} needs calibration text (--calib FILE)", p.method);
  if (p.keep_16bit_auto && p.calib_ids.empty()) fail("--keep-16bit auto needs calibration text (--calib FILE)");
  const ModelConfig cfg = load_model_config(p.in_dir);
  if (cfg.quant.quantized())
    fail("{}: the model is already quantized ({}); quantize its 16-bit original", p.in_dir,
         quant_format_name(cfg.quant.format));
  const WeightTable table = dense_weight_table(cfg);
  Store st{.source = open_tensor_source(p.in_dir)};
  validate_weights(table, *st.source);
  const auto tick = [&](const std::string& what, int64_t done, int64_t total) {
    if (p.progress) p.progress(what, done, total);
  };

  const CaptureOptions capture{.max_rows = p.calib_rows, .skip_first = p.calib_skip_first};
  Calibration calib;
  if (!p.calib_ids.empty()) {
    tick("calibration forward", 0, 1);
    calib = capture_calibration(p.in_dir, table, p.calib_ids, p.eval_window, capture);
    tick("calibration forward", 1, 1);
  }
  const bool tied = table.find_tensor("lm_head.weight") == nullptr || table.find_tensor("lm_head.weight")->optional;
  const std::set<std::string> keep(p.keep_16bit.begin(), p.keep_16bit.end());
  const std::vector<Unit> todo = units_of(table, tied, p.quantize_lm_head, cfg.n_experts);

  QuantizeReport report;
  std::map<std::string, std::vector<std::string>> modules_of_weight;  // report name -> modules
  const auto dense_values = [&](const std::string& tensor) {
    auto it = st.changed.find(tensor);
    return it != st.changed.end() ? it->second : tensor_f32(st.source->get(tensor));
  };
  for (size_t i = 0; i < todo.size(); ++i) {
    const Unit& u = todo[i];
    const WeightSpec& w = *u.w;
    tick("quantizing " + u.name, int64_t(i), int64_t(todo.size()));
    if (p.sequential && !calib.empty() && i > 0 && w.key.layer != todo[i - 1].w->key.layer) {
      // this layer's inputs as the model quantized so far produces them
      Calibration now = capture_calibration(p.in_dir, table, p.calib_ids, p.eval_window, capture, [&](Backend& be) {
        return candidate_model(cfg, table, p, st, keep, be);
      });
      for (auto& [key, rec] : now.linear)
        if (key.layer == w.key.layer || key.layer < 0) calib.linear[key] = std::move(rec);
      for (auto& [key, recs] : now.experts)
        if (key.layer == w.key.layer) calib.experts[key] = std::move(recs);
    }
    const std::span<const WeightPart> parts(w.parts.data() + u.part0, size_t(u.n_parts));
    std::vector<std::string> modules;
    std::vector<float> fused;  // the parts stacked: [m, k]
    int64_t m = 0;
    const int64_t k = parts[0].shape.back();
    for (const WeightPart& part : parts) {
      modules.push_back(module_of(part.tensor));
      const std::vector<float> t = dense_values(part.tensor);
      fused.insert(fused.end(), t.begin() + long(part.row0 * k), t.begin() + long((part.row0 + part.shape[0]) * k));
      m += part.shape[0];
    }
    WeightReport wr{.name = u.name};
    if (std::any_of(modules.begin(), modules.end(), [&](const std::string& mod) { return keep.contains(mod); })) {
      wr.how = "16-bit (--keep-16bit)";
      wr.kept_16bit = true;
      report.weights.push_back(wr);
      continue;
    }
    QuantSpec spec{.format = p.format, .group_size = p.format == DType::W4 ? fitting_group_size(p.group_size, k) : 0,
                   .symmetric = p.format == DType::W4 && p.symmetric};
    if (p.format == DType::W4 && spec.group_size == 0)
      fail("{}: no int4 group size (a multiple of 32) divides the input dimension {} of {}", p.in_dir, k, u.name);
    // Where AWQ's scales cannot be folded (experts share their input with the router and
    // the other experts), the weight is rounded to nearest (awq) or gets GPTQ alone (awq-gptq).
    const WeightSpec* norm = w.key.role == R::Wqkv    ? table.find({R::AttnNorm, w.key.layer})
                             : w.key.role == R::WgateUp ? table.find({R::MlpNorm, w.key.layer})
                                                        : nullptr;
    const WeightSpec* up = w.key.role == R::Wdown ? table.find({R::WgateUp, w.key.layer}) : nullptr;
    const bool foldable = awq_folds(cfg.model_type) && (norm || (up && up->parts.size() == 2 && up->parts[1].shape[0] == k));
    const std::string method = !foldable && p.method == "awq"        ? "rtn"
                               : !foldable && p.method == "awq-gptq" ? "gptq"
                                                                     : p.method;
    const CaptureBackend::Record* rec = calib.find(w.key, u.expert);
    if (rec && rec->n_rows == 0) rec = nullptr;  // an expert no calibration token was routed to
    Quantized q = quantize_one(fused, m, k, spec, method, rec, u.name, p);
    if (!q.input_scales.empty()) {  // fold 1 / s into what produces the input
      const WeightPart& target = norm ? norm->parts[0] : up->parts[1];
      std::vector<float> v = dense_values(target.tensor);
      const int64_t cols = table.find_tensor(target.tensor)->shape.back();
      for (int64_t j = 0; j < k; ++j) {
        const float inv = 1.0f / q.input_scales[size_t(j)];
        if (norm) v[size_t(j)] *= inv;
        else
          for (int64_t c = 0; c < cols; ++c) v[size_t((target.row0 + j) * cols + c)] *= inv;
      }
      st.changed[target.tensor] = std::move(v);
      for (const ModuleRows& mr : module_rows(parts, modules, table)) {
        std::vector<float> ws(fused.begin() + long(mr.r0 * k), fused.begin() + long((mr.r0 + mr.n) * k));
        for (size_t e = 0; e < ws.size(); ++e) ws[e] *= q.input_scales[e % size_t(k)];
        st.dense_if_kept[mr.module] = std::move(ws);
      }
    }
    wr.how = fmt::format("{} {}", format_label(spec), q.how);
    if (u.expert >= 0 && !rec && !calib.empty()) wr.how += " (no tokens routed: rtn)";
    if (rec) {
      std::vector<float> eff = dequantize(q.q.view());
      for (int64_t r = 0; r < m && !q.input_scales.empty(); ++r)
        for (int64_t j = 0; j < k; ++j) eff[size_t(r * k + j)] /= q.input_scales[size_t(j)];
      wr.output_error = relative_output_error(fused.data(), eff.data(), m, k, CalibRows{rec->rows.data(), rec->n_rows});
    }
    for (const ModuleRows& mr : module_rows(parts, modules, table)) {
      if (mr.tensor_rows != mr.n)
        fail("{}: {} has {} rows, but the {} weights take {} of them (quantize writes whole tensors)", p.in_dir,
             mr.module, mr.tensor_rows, u.name, mr.n);
      st.quantized.emplace(mr.module, row_slice(q.q, mr.r0, mr.n));
    }
    std::vector<std::string> distinct;
    for (const ModuleRows& mr : module_rows(parts, modules, table)) distinct.push_back(mr.module);
    modules_of_weight[u.name] = distinct;
    report.weights.push_back(wr);
  }
  tick("quantizing", int64_t(todo.size()), int64_t(todo.size()));

  // Sensitivity: the calibration perplexity with one weight quantized at a time.
  std::set<std::string> all_modules;
  for (const auto& [n, mods] : modules_of_weight) all_modules.insert(mods.begin(), mods.end());
  if (!p.calib_ids.empty()) report.ppl_16bit = candidate_ppl(cfg, table, p, st, all_modules);
  if (!p.calib_ids.empty() && (p.sensitivity || p.keep_16bit_auto)) {
    int64_t done = 0;
    for (WeightReport& wr : report.weights) {
      tick("sensitivity " + wr.name, done++, int64_t(report.weights.size()));
      auto mods = modules_of_weight.find(wr.name);
      if (mods == modules_of_weight.end()) continue;
      std::set<std::string> others = all_modules;
      for (const std::string& mod : mods->second) others.erase(mod);
      wr.ppl_alone = candidate_ppl(cfg, table, p, st, others);
    }
    tick("sensitivity", done, int64_t(report.weights.size()));
  }
  std::set<std::string> kept;
  if (!p.calib_ids.empty()) report.ppl_quantized = candidate_ppl(cfg, table, p, st, kept);
  if (p.keep_16bit_auto) {
    std::vector<WeightReport*> order;
    for (WeightReport& wr : report.weights)
      if (!wr.kept_16bit) order.push_back(&wr);
    std::stable_sort(order.begin(), order.end(),
                     [](const WeightReport* a, const WeightReport* b) { return a->ppl_alone > b->ppl_alone; });
    for (WeightReport* wr : order) {
      if (report.ppl_quantized <= report.ppl_16bit * (1 + p.max_ppl_increase / 100)) break;
      for (const std::string& mod : modules_of_weight[wr->name]) kept.insert(mod);
      wr->kept_16bit = true;
      wr->how = "16-bit (--keep-16bit auto)";
      report.ppl_quantized = candidate_ppl(cfg, table, p, st, kept);
    }
  }

  // Write the folder.
  fs::create_directories(p.out_dir);
  ModelConfig out_cfg = cfg;
  out_cfg.quant = quant_config_of(p, table, st, kept);
  out_cfg.quant.origin = p.out_dir + "/config.json";
  if (kept.size() == st.quantized.size()) fail("{}: every linear weight was kept 16-bit; nothing to write", p.out_dir);
  const WeightTable qt = weight_table(out_cfg);
  const Assembled a = assemble(qt, st, kept);
  for (const TensorToWrite& t : a.writes) report.bytes_out += int64_t(t.nbytes);
  for (const auto& [n, t] : st.source->all()) report.bytes_in += int64_t(t->nbytes);
  write_safetensors(p.out_dir + "/model.safetensors", a.writes);
  std::ifstream in(p.in_dir + "/config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["quantization_config"] = quant_config_json(out_cfg.quant);
  std::ofstream(p.out_dir + "/config.json") << config.dump(2) << "\n";
  copy_model_side_files(p.in_dir, p.out_dir);
  return report;
}

std::vector<std::string> format_report(const QuantizeReport& r) {
  std::vector<std::string> out;
  out.push_back(fmt::format("{:<22} {:<28} {:>12} {:>14}", "weight", "stored as", "output err", "ppl alone"));
  for (const WeightReport& w : r.weights)
    out.push_back(fmt::format("{:<22} {:<28} {:>12} {:>14}", w.name, w.how,
                              w.output_error < 0 ? "-" : fmt::format("{:.4f}", w.output_error),
                              w.ppl_alone > 0 ? fmt::format("{:.4f} ({:+.2f}%)", w.ppl_alone,
                                                            100 * (w.ppl_alone / r.ppl_16bit - 1))
                                              : "-"));
  if (r.ppl_16bit > 0)
    out.push_back(fmt::format("calibration perplexity: 16-bit {:.4f}, quantized {:.4f} ({:+.2f}%)", r.ppl_16bit,
                              r.ppl_quantized, 100 * (r.ppl_quantized / r.ppl_16bit - 1)));
  out.push_back(fmt::format("weights: {:.1f} MB in, {:.1f} MB out", double(r.bytes_in) / 1e6, double(r.bytes_out) / 1e6));
  return out;
}

}  // namespace tf

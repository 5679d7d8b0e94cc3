#include "prune/prune_model.h"

#include <fmt/format.h>

#include <Eigen/Core>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "backend/host_backend.h"
#include "convert/calibration.h"
#include "convert/model_folder.h"
#include "core/error.h"
#include "model/arch/registry.h"
#include "model/write_safetensors.h"

namespace tf {

namespace {

namespace fs = std::filesystem;
using R = WeightRole;

// The architectures whose layers are the standard decoder's separate q/k/v/o and gate/up/down
// tensors (block_weights.h), which the per-layer config arrays describe.
bool prunable(const std::string& model_type) {
  return model_type == "llama" || model_type == "mistral" || model_type == "qwen2" || model_type == "qwen3";
}

std::string layer_tensor(int64_t il, const char* rest) { return fmt::format("model.layers.{}.{}", il, rest); }

std::vector<uint8_t> from_f32(const std::vector<float>& v, DType dt) {
  std::vector<uint8_t> out(v.size() * dtype_size(dt));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::F32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h = dt == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

// Rows `rows` (or all) and columns `cols` (or all) of a 1-d or 2-d tensor, bytes copied as
// stored. For a 1-d tensor `rows` picks elements.
OwnedTensor select(const TensorInfo& t, const std::vector<int32_t>* rows, const std::vector<int32_t>* cols) {
  const size_t es = dtype_size(t.dtype);
  const int64_t n_rows = t.shape[0], n_cols = t.shape.size() > 1 ? t.shape[1] : 1;
  OwnedTensor out{.name = t.name, .dtype = t.dtype, .shape = t.shape};
  const int64_t r_out = rows ? int64_t(rows->size()) : n_rows, c_out = cols ? int64_t(cols->size()) : n_cols;
  out.shape[0] = r_out;
  if (t.shape.size() > 1) out.shape[1] = c_out;
  out.bytes.resize(size_t(r_out * c_out) * es);
  uint8_t* dst = out.bytes.data();
  for (int64_t r = 0; r < r_out; ++r) {
    const int64_t sr = rows ? (*rows)[size_t(r)] : r;
    const uint8_t* src = t.data + size_t(sr * n_cols) * es;
    if (!cols) {
      std::memcpy(dst, src, size_t(n_cols) * es);
      dst += size_t(n_cols) * es;
    } else {
      for (int32_t c : *cols) {
        std::memcpy(dst, src + size_t(c) * es, es);
        dst += es;
      }
    }
  }
  return out;
}

OwnedTensor copy_of(const TensorInfo& t) {
  return OwnedTensor{.name = t.name, .dtype = t.dtype, .shape = t.shape, .bytes = {t.data, t.data + t.nbytes}};
}

// Rows of the heads `heads` of head_dim rows each.
std::vector<int32_t> head_rows(const std::vector<int32_t>& heads, int64_t head_dim) {
  std::vector<int32_t> out;
  for (int32_t h : heads)
    for (int64_t d = 0; d < head_dim; ++d) out.push_back(int32_t(h * head_dim + d));
  return out;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}


using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// rows [n, k] times w^T ([m, k]) plus bias [m] or nothing: [n, m].
MatF project(const std::vector<float>& rows, int64_t n, const TensorInfo& w, const TensorInfo* bias) {
  const std::vector<float> wf = tensor_f32(w);
  const Eigen::Map<const MatF> x(rows.data(), n, w.shape[1]);
  const Eigen::Map<const MatF> wm(wf.data(), w.shape[0], w.shape[1]);
  MatF y = x * wm.transpose();
  if (bias) {
    const std::vector<float> b = tensor_f32(*bias);
    y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(b.data(), w.shape[0]);
  }
  return y;
}

// Each row of rows [n, k] divided by rms[row].
std::vector<float> divided(const std::vector<float>& rows, int64_t n, const std::vector<float>& rms) {
  std::vector<float> out(rows.size());
  const size_t k = rows.size() / size_t(n);
  for (size_t r = 0; r < size_t(n); ++r)
    for (size_t j = 0; j < k; ++j) out[r * k + j] = rows[r * k + j] / rms[r];
  return out;
}

std::vector<float> row_rms(const MatF& x) {
  std::vector<float> out(size_t(x.rows()));
  for (Eigen::Index r = 0; r < x.rows(); ++r) out[size_t(r)] = std::sqrt(x.row(r).squaredNorm() / float(x.cols()) + 1e-12f);
  return out;
}

}  // namespace

Pruner::Pruner(PruneParams p) : p_(std::move(p)) {
  cfg_ = load_model_config(p_.in_dir);
  if (cfg_.quant.quantized())
    fail("{}: the model is quantized; prune its 16-bit original (and quantize the pruned folder)", p_.in_dir);
  if (!prunable(cfg_.model_type))
    fail("{}: pruning handles llama, mistral, qwen2 and qwen3 models, not {}", p_.in_dir, cfg_.model_type);
  if (p_.calib_ids.size() < 2) fail("{}: pruning needs calibration tokens (--calib FILE)", p_.in_dir);
  table_ = dense_weight_table(cfg_);
  source_ = open_tensor_source(p_.in_dir);
  validate_weights(table_, *source_);
  for (const auto& [name, t] : source_->all()) n_params_ += numel(t->shape);

  // Per-layer shapes as stored (a pruned folder may be pruned again).
  shapes_ = PruneShapes{.d_model = cfg_.d_model, .head_dim = cfg_.head_dim};
  for (int64_t il = 0; il < cfg_.n_layers; ++il) {
    const int64_t q = source_->get(layer_tensor(il, "self_attn.q_proj.weight")).shape[0];
    const int64_t k = source_->get(layer_tensor(il, "self_attn.k_proj.weight")).shape[0];
    const int64_t f = source_->get(layer_tensor(il, "mlp.gate_proj.weight")).shape[0];
    shapes_.layers.push_back({.n_heads = q / cfg_.head_dim, .n_kv_heads = k / cfg_.head_dim, .d_ff = f});
  }
  for (const auto& [name, t] : source_->all())
    if (name.starts_with("model.layers.")) shapes_.n_layer_params += numel(t->shape);

  tick("calibration forward", 0, 1);
  auto rows = capture_calibration(p_.in_dir, table_, p_.calib_ids, p_.window, CaptureOptions{.max_rows = p_.calib_rows}).linear;
  tick("calibration forward", 1, 1);
  for (int64_t il = 0; il < cfg_.n_layers; ++il) {
    CaptureBackend::Record& o = rows.at({R::Wo, int32_t(il)});
    CaptureBackend::Record& d = rows.at({R::Wdown, int32_t(il)});
    n_rows_ = std::min(o.n_rows, d.n_rows);
    o_rows_.push_back(std::move(o.rows));
    down_rows_.push_back(std::move(d.rows));
  }
  // The residual stream on the calibration rows (the embedding of their tokens plus every
  // earlier sublayer's output, rebuilt from the captured o_proj and down_proj inputs): each
  // sublayer's rows are scored divided by the rms of the residual its output joins, since
  // the next RMSNorm divides by it. A contribution counts relative to the stream it joins,
  // so an early layer's small outputs are not taken for unimportant ones.
  const TensorInfo& embed = source_->get("model.embed_tokens.weight");
  MatF resid(n_rows_, cfg_.d_model);
  for (int64_t t = 0; t < n_rows_; ++t) {
    load_row_f32(embed.data, embed.dtype, int64_t(p_.calib_ids[size_t(t)]) * cfg_.d_model, cfg_.d_model, resid.row(t).data());
    resid.row(t) *= cfg_.embed_scale;
  }
  std::vector<std::vector<float>> o_scaled, down_scaled;
  for (int64_t il = 0; il < cfg_.n_layers; ++il) {
    resid += project(o_rows_[size_t(il)], n_rows_, source_->get(layer_tensor(il, "self_attn.o_proj.weight")),
                     source_->find(layer_tensor(il, "self_attn.o_proj.bias")));
    o_scaled.push_back(divided(o_rows_[size_t(il)], n_rows_, row_rms(resid)));
    resid += project(down_rows_[size_t(il)], n_rows_, source_->get(layer_tensor(il, "mlp.down_proj.weight")),
                     source_->find(layer_tensor(il, "mlp.down_proj.bias")));
    down_scaled.push_back(divided(down_rows_[size_t(il)], n_rows_, row_rms(resid)));
  }
  for (int64_t il = 0; il < cfg_.n_layers; ++il) {
    const LayerShape& l = shapes_.layers[size_t(il)];
    o_stats_.push_back(input_stats(o_rows_[size_t(il)].data(), n_rows_, l.n_heads * cfg_.head_dim));
    down_stats_.push_back(input_stats(down_rows_[size_t(il)].data(), n_rows_, l.d_ff));
  }
  for (PruneScore s : {PruneScore::Wanda, PruneScore::Flap}) {
    std::vector<LayerScores>& out = s == PruneScore::Wanda ? wanda_ : flap_;
    for (int64_t il = 0; il < cfg_.n_layers; ++il) {
      const LayerShape& l = shapes_.layers[size_t(il)];
      const std::vector<float> wo = tensor_f32(source_->get(layer_tensor(il, "self_attn.o_proj.weight")));
      const std::vector<float> wd = tensor_f32(source_->get(layer_tensor(il, "mlp.down_proj.weight")));
      const int64_t k_o = l.n_heads * cfg_.head_dim;
      out.push_back(LayerScores{
          .heads = group_sums(column_scores(s, wo.data(), cfg_.d_model, k_o, o_scaled[size_t(il)].data(), n_rows_),
                              cfg_.head_dim),
          .channels = column_scores(s, wd.data(), cfg_.d_model, l.d_ff, down_scaled[size_t(il)].data(), n_rows_)});
    }
  }
}

const std::vector<LayerScores>& Pruner::scores(PruneScore s) const { return s == PruneScore::Wanda ? wanda_ : flap_; }

PrunedModel Pruner::build(const std::vector<LayerKeep>& keep, Recovery r) const {
  TF_ASSERT(keep.size() == shapes_.layers.size(), "build: {} layers kept of {}", keep.size(), shapes_.layers.size());
  PrunedModel m{.keep = keep, .n_layer_params_removed = removed_params(shapes_, keep)};
  const int64_t hd = cfg_.head_dim;
  // Layer tensors by name: how each is cut. Others are copied.
  for (const TensorSpec& spec : table_.tensors) {
    const TensorInfo* t = source_->find(spec.name);
    if (!t) continue;
    int64_t il = -1;
    std::string rest;
    if (spec.name.starts_with("model.layers.")) {
      const size_t a = std::strlen("model.layers."), b = spec.name.find('.', a);
      il = std::stoll(spec.name.substr(a, b - a));
      rest = spec.name.substr(b + 1);
    }
    if (il < 0) {
      m.tensors.push_back(copy_of(*t));
      continue;
    }
    const LayerShape& l = shapes_.layers[size_t(il)];
    const LayerKeep& k = keep[size_t(il)];
    const std::vector<int32_t> q_rows = head_rows(k.heads, hd), kv_rows = head_rows(k.kv_heads, hd);
    const bool heads_cut = int64_t(k.heads.size()) != l.n_heads, kv_cut = int64_t(k.kv_heads.size()) != l.n_kv_heads;
    const bool ffn_cut = int64_t(k.channels.size()) != l.d_ff;
    if (rest.starts_with("self_attn.q_proj.")) {
      m.tensors.push_back(heads_cut ? select(*t, &q_rows, nullptr) : copy_of(*t));
    } else if (rest.starts_with("self_attn.k_proj.") || rest.starts_with("self_attn.v_proj.")) {
      m.tensors.push_back(kv_cut ? select(*t, &kv_rows, nullptr) : copy_of(*t));
    } else if (rest.starts_with("mlp.gate_proj.") || rest.starts_with("mlp.up_proj.")) {
      m.tensors.push_back(ffn_cut ? select(*t, &k.channels, nullptr) : copy_of(*t));
    } else if (rest == "self_attn.o_proj.weight" || rest == "mlp.down_proj.weight") {
      const bool o = rest == "self_attn.o_proj.weight";
      const bool cut = o ? heads_cut : ffn_cut;
      const std::string bias_name = layer_tensor(il, o ? "self_attn.o_proj.bias" : "mlp.down_proj.bias");
      const TensorInfo* bias = source_->find(bias_name);
      if (!cut) {
        m.tensors.push_back(copy_of(*t));
        if (bias) m.tensors.push_back(copy_of(*bias));
        continue;
      }
      const std::vector<int32_t>& cols = o ? q_rows : k.channels;
      if (r == Recovery::None) {
        m.tensors.push_back(select(*t, nullptr, &cols));
        if (bias) m.tensors.push_back(copy_of(*bias));
        continue;
      }
      const std::vector<float> w = tensor_f32(*t);
      const std::vector<float> b = bias ? tensor_f32(*bias) : std::vector<float>{};
      const ShrunkProjection s = shrink_projection(
          ProjectionRows{.w = w.data(), .m = t->shape[0], .k = t->shape[1], .bias = bias ? b.data() : nullptr,
                         .x = (o ? o_rows_ : down_rows_)[size_t(il)].data(), .n = n_rows_},
          cols, r, p_.damp, &(o ? o_stats_ : down_stats_)[size_t(il)]);
      m.tensors.push_back(OwnedTensor{.name = t->name, .dtype = t->dtype, .shape = {t->shape[0], int64_t(cols.size())},
                                      .bytes = from_f32(s.w, t->dtype)});
      m.tensors.push_back(OwnedTensor{.name = bias_name, .dtype = bias ? bias->dtype : t->dtype, .shape = {t->shape[0]},
                                      .bytes = from_f32(s.bias, bias ? bias->dtype : t->dtype)});
    } else if (rest == "self_attn.o_proj.bias" || rest == "mlp.down_proj.bias") {
      continue;  // written after its weight
    } else {
      m.tensors.push_back(copy_of(*t));  // norms (q_norm / k_norm are per head_dim, shared by heads)
    }
  }
  // Tensors of the source the table does not list (a bias it marks optional is listed).
  for (const OwnedTensor& t : m.tensors) m.n_params += numel(t.shape);

  // config.json: the per-layer arrays where a layer differs from the scalar keys.
  std::ifstream in(p_.in_dir + "/config.json");
  m.config = nlohmann::json::parse(in);
  bool differ = false;
  nlohmann::json heads = nlohmann::json::array(), kv = nlohmann::json::array(), ff = nlohmann::json::array();
  for (const LayerKeep& k : keep) {
    heads.push_back(k.heads.size());
    kv.push_back(k.kv_heads.size());
    ff.push_back(k.channels.size());
    differ |= int64_t(k.heads.size()) != cfg_.n_heads || int64_t(k.kv_heads.size()) != cfg_.n_kv_heads ||
              int64_t(k.channels.size()) != cfg_.d_ff;
  }
  if (differ) {
    m.config["layer_num_attention_heads"] = heads;
    m.config["layer_num_key_value_heads"] = kv;
    m.config["layer_intermediate_size"] = ff;
    m.config["head_dim"] = cfg_.head_dim;  // without it, hidden_size / num_attention_heads
  }
  return m;
}

double Pruner::perplexity(const PrunedModel& m, const std::vector<int32_t>& ids, const std::string& what) const {
  std::vector<TensorInfo> infos;
  for (const OwnedTensor& t : m.tensors)
    infos.push_back(TensorInfo{.name = t.name, .dtype = t.dtype, .shape = t.shape, .data = t.bytes.data(),
                               .nbytes = t.bytes.size(), .file = "(prune candidate)"});
  ModelConfig cfg = parse_model_config(m.config.dump(), "(prune candidate) config.json");
  auto src = std::make_unique<PreparedTensors>("(prune candidate)", std::move(infos), std::shared_ptr<const void>());
  auto cpu = make_backend(BackendKind::Cpu);
  auto model = load_model(std::move(cfg), std::move(src), *cpu, LoadOptions{});
  return model_perplexity(*model, *cpu, ids, p_.window,
                          [&](int64_t done, int64_t total) { tick(what, done, total); });
}

void Pruner::write(const PrunedModel& m, const std::string& out_dir) const {
  fs::create_directories(out_dir);
  std::vector<TensorToWrite> w;
  for (const OwnedTensor& t : m.tensors)
    w.push_back({.name = t.name, .dtype = t.dtype, .shape = t.shape, .data = t.bytes.data(), .nbytes = t.bytes.size()});
  write_safetensors(out_dir + "/model.safetensors", w);
  std::ofstream(out_dir + "/config.json") << m.config.dump(2) << "\n";
  copy_model_side_files(p_.in_dir, out_dir);
}

std::vector<std::string> format_prune_report(const PruneShapes& s, const PrunedModel& m, int64_t n_params_before) {
  std::vector<std::string> out;
  out.push_back(fmt::format("{:>5}  {:>13}  {:>10}  {:>15}", "layer", "query heads", "KV heads", "FFN channels"));
  for (size_t il = 0; il < s.layers.size(); ++il) {
    const LayerShape& l = s.layers[il];
    const LayerKeep& k = m.keep[il];
    out.push_back(fmt::format("{:>5}  {:>13}  {:>10}  {:>15}", il, fmt::format("{} / {}", k.heads.size(), l.n_heads),
                              fmt::format("{} / {}", k.kv_heads.size(), l.n_kv_heads),
                              fmt::format("{} / {}", k.channels.size(), l.d_ff)));
  }
  out.push_back(fmt::format("removed {:.2f}% of the layers' parameters ({} of {}), {:.2f}% of the model's ({} -> {})",
                            100.0 * double(m.n_layer_params_removed) / double(s.n_layer_params),
                            m.n_layer_params_removed, s.n_layer_params,
                            100.0 * (1 - double(m.n_params) / double(n_params_before)), n_params_before, m.n_params));
  return out;
}

}  // namespace tf

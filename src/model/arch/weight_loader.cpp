#include "model/arch/weight_loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/progress.h"
#include "model/arch/quantized_parts.h"
#include "model/arch/tp_shard.h"

namespace tf {

namespace {

// Bytes of a weight as resident: its values and, quantized, its scales and zero points.
int64_t resident_bytes(const TensorView& v) {
  int64_t b = int64_t(v.nbytes());
  if (v.dtype == DType::W4) b += v.shape[0] * (v.shape[1] / v.group_size) * 3;  // F16 scale + U8 zero per group
  if (v.dtype == DType::W8 || v.dtype == DType::FP8) b += v.shape[0] * 4;        // F32 scale per row
  return b;
}

// What this rank holds of w's parts, as a key: "tensor[r0:r1],...,cols[c0:c1]".
std::string slice_key(const WeightSpec& w, const LoadOptions& opt) {
  std::string what;
  for (const WeightPart& p : w.parts) {
    const PartSlice s = part_slice(p, opt.tp_rank, opt.tp_size);
    what += fmt::format("{}[{}:{}]{},", p.tensor, p.row0 + s.row0, p.row0 + s.row0 + s.n_rows,
                        p.transform == PartTransform::AddOne ? "+1" : "");
    if (p.tp.split == TpSplit::Columns) what += fmt::format("cols[{}:{}]", s.col0, s.col0 + s.n_cols);
  }
  return what;
}

// A dense LM head stays dense in quantized copies unless asked (the embedding's tensor when tied).
bool quantize_in_copy(const WeightSpec& w, const LoadOptions& opt) {
  return w.key.role != WeightRole::LmHead || w.format != WeightFormat::Dense || opt.quantize_lm_head;
}

// A weight made of an optional tensor the checkpoint does not have (a pruned model's
// projection biases: the forward then adds none).
bool absent_optional(const WeightTable& table, const WeightSpec& w, const TensorSource& source) {
  for (const WeightPart& p : w.parts) {
    const TensorSpec* s = table.find_tensor(p.tensor);
    if (s && s->optional && !source.find(p.tensor)) return true;
  }
  return false;
}

// Whether a quantized checkpoint stores its expert weights quantized.
bool table_quantizes_experts(const WeightTable& t) {
  return std::any_of(t.weights.begin(), t.weights.end(), [](const WeightSpec& w) {
    return (w.key.role == WeightRole::ExpertsGateUp || w.key.role == WeightRole::ExpertsDown) &&
           w.format != WeightFormat::Dense;
  });
}

}  // namespace

std::string LoadedWeights::copy_name(const WeightCopy& c) {
  switch (c.kind) {
    case WeightCopy::Kind::Stored: return "as stored";
    case WeightCopy::Kind::Dense16: return "bf16";
    case WeightCopy::Kind::Quantized:
      return c.format == DType::W4 ? fmt::format("int4 g{}", c.group_size) : std::string(quant_format_name(c.format));
  }
  return "?";
}

LoadedWeights::LoadedWeights(const WeightTable& table, const TensorSource& source, Backend& backend,
                             const LoadOptions& opt)
    : be_(backend), copies_(opt.weight_copies) {
  if (copies_.empty()) copies_.push_back(WeightCopy{});
  // Mixture-of-experts weights are linear weights (each expert's rows quantized alone) on the
  // host backends, whose moe_experts takes them quantized; the CUDA MoE kernels read BF16, so
  // there every copy shares one 16-bit upload (dequantized when the checkpoint stores them
  // quantized).
  const bool quantizes = std::any_of(copies_.begin(), copies_.end(),
                                     [](const WeightCopy& c) { return c.kind == WeightCopy::Kind::Quantized; });
  const bool has_experts = std::any_of(table.weights.begin(), table.weights.end(),
                                       [](const WeightSpec& w) { return w.key.role == WeightRole::ExpertsGateUp; });
  const bool dense_experts = has_experts && backend.device() != Device::Host;
  if ((quantizes || table_quantizes_experts(table)) && dense_experts && opt.tp_rank == 0)
    std::fprintf(stderr, "note: %s: the %s backend runs 16-bit experts only; the expert weights are held 16-bit "
                         "(docs/QUANT.md)\n", table.arch.c_str(), backend.name().c_str());
  ProgressBar bar("loading weights", int64_t(table.weights.size()));
  for (size_t i = 0; i < table.weights.size(); ++i) {
    const WeightSpec& w = table.weights[i];
    if (absent_optional(table, w, source)) {
      bar.update(int64_t(i) + 1);
      continue;
    }
    std::vector<TensorView>& views = weights_[w.key];
    const bool expert = w.key.role == WeightRole::ExpertsGateUp || w.key.role == WeightRole::ExpertsDown;
    if (!is_linear_role(w.key.role) || (expert && dense_experts)) {
      const std::string key = slice_key(w, opt);
      views.push_back(w.format == WeightFormat::Dense
                          ? shared_upload("dense:" + key, -1, w.key.role, [&] { return load_dense(w, source, opt); })
                          : shared_upload("dequantized:" + key, -1, w.key.role, [&] { return load_dequantized(w, source, opt); }));
    } else {
      for (int c = 0; c < n_copies(); ++c) views.push_back(load(w, source, opt, c));
    }
    if (!views[0].data) weights_.erase(w.key);  // FirstRank on ranks > 0
    bar.update(int64_t(i) + 1);
  }
  bar.finish();
  copy_bytes_.assign(size_t(n_copies()), 0);
  for (const auto& [key, u] : by_slice_) {
    if (!u.read_whole) continue;
    bool all = true;
    for (bool b : u.used_by) all = all && b;
    if (all) shared_bytes_ += u.bytes;
    for (int c = 0; c < n_copies(); ++c)
      if (!all && u.used_by[size_t(c)]) copy_bytes_[size_t(c)] += u.bytes;
  }
}

TensorView LoadedWeights::find(WeightKey key, int copy) const {
  auto it = weights_.find(key);
  if (it == weights_.end()) return TensorView{};
  return it->second[std::min(size_t(copy), it->second.size() - 1)];
}

TensorView LoadedWeights::get(WeightKey key, int copy) const {
  const TensorView v = find(key, copy);
  TF_ASSERT(v.data, "no weight {} for layer {}", weight_role_name(key.role), key.layer);
  return v;
}

template <typename F>
TensorView LoadedWeights::shared_upload(const std::string& key, int copy, WeightRole role, F&& make) {
  auto it = by_slice_.find(key);
  if (it == by_slice_.end()) {
    const int64_t before = bytes_;
    Upload u{.view = make(), .used_by = std::vector<bool>(size_t(n_copies()), false)};
    u.bytes = bytes_ - before;
    it = by_slice_.emplace(key, std::move(u)).first;
  }
  for (int c = 0; c < n_copies(); ++c)
    if (copy < 0 || c == copy) it->second.used_by[size_t(c)] = true;
  if (role != WeightRole::Embedding) it->second.read_whole = true;
  return it->second.view;
}

// Linear weight w in copy `copy`: as stored, as 16-bit values, or in a quantized layout.
TensorView LoadedWeights::load(const WeightSpec& w, const TensorSource& source, const LoadOptions& opt, int copy) {
  const WeightCopy& c = copies_[size_t(copy)];
  const bool dense = w.format == WeightFormat::Dense;
  const std::string slices = slice_key(w, opt);
  if (dense && (c.kind != WeightCopy::Kind::Quantized || !quantize_in_copy(w, opt)))
    return shared_upload("dense:" + slices, copy, w.key.role, [&] { return load_dense(w, source, opt); });
  if (c.kind == WeightCopy::Kind::Dense16)
    return shared_upload("dequantized:" + slices, copy, w.key.role, [&] { return load_dequantized(w, source, opt); });
  const QuantSpec target = c.kind == WeightCopy::Kind::Stored
                               ? stored_spec(w)
                               : QuantSpec{.format = c.format, .group_size = c.group_size};
  const std::string key = fmt::format("{}:{}:{}", dtype_name(target.format), target.group_size, slices);
  return shared_upload(key, copy, w.key.role, [&] { return load_quantized(w, source, opt, target); });
}

// One dense weight: each part's rows of its checkpoint tensor, then this rank's slice of them
// (rows: a view; columns: a copy), then its transform (a copy in F32), concatenated when
// there are several parts. Parts that are consecutive rows of one tensor (Phi-3's fused
// qkv_proj and gate_up_proj, unsharded) stay one view of it, so a zero-copy backend reads
// the fused tensor in place.
TensorView LoadedWeights::load_dense(const WeightSpec& w, const TensorSource& source, const LoadOptions& opt) {
  struct Piece {
    TensorView view;
    std::string tensor;
    int64_t row0 = 0;
  };
  std::vector<Piece> pieces;
  std::vector<std::unique_ptr<uint8_t[]>> scratch;  // cut or transformed parts
  int64_t col0 = 0, n_cols = -1;
  for (const WeightPart& p : w.parts) {
    if (p.tp.split == TpSplit::FirstRank && opt.tp_rank != 0) return {};
    const PartSlice s = part_slice(p, opt.tp_rank, opt.tp_size);
    if (p.tp.split == TpSplit::Columns) col0 = s.col0, n_cols = s.n_cols;
    const TensorView t = source.get(p.tensor).view();
    const int64_t row0 = p.row0 + s.row0, n_rows = s.n_rows;
    TensorView v = row0 == 0 && n_rows == t.shape[0] ? t : slice_rows(t, row0, n_rows);
    if (n_cols >= 0 && (col0 != 0 || n_cols != v.shape[1])) v = copy_cols(v, col0, n_cols, scratch.emplace_back());
    if (p.transform == PartTransform::AddOne) v = add_one(v, scratch.emplace_back());
    const bool joins = !pieces.empty() && p.transform == PartTransform::None && n_cols < 0 &&
                       pieces.back().tensor == p.tensor && pieces.back().row0 + pieces.back().view.shape[0] == row0;
    if (joins) {
      pieces.back().view.shape[0] += n_rows;  // the next rows of the same tensor: the view grows
    } else {
      pieces.push_back(Piece{.view = v, .tensor = p.transform == PartTransform::None ? p.tensor : "", .row0 = row0});
    }
  }
  std::vector<TensorView> views;
  for (const Piece& p : pieces) views.push_back(p.view);
  const TensorView v = views.size() > 1 ? upload_concat(views, opt) : upload(views[0], opt);
  for (auto& buf : scratch)
    if (v.data == buf.get()) host_tmp_.push_back(std::move(buf));  // the backend kept our buffer
  return v;
}

TensorView LoadedWeights::load_quantized(const WeightSpec& w, const TensorSource& source, const LoadOptions& opt,
                                         const QuantSpec& target) {
  HostQuantized h = quantized_weight_for_rank(w, source, target, opt.tp_rank, opt.tp_size);
  TensorView v = be_.upload(h.view, h.view.dtype);
  if (h.owned && v.data == h.view.data) host_quant_.push_back(std::move(h.owned));  // backend kept our buffer
  bytes_ += resident_bytes(v);
  n_params_ += v.numel();
  return v;
}

// A quantized checkpoint's weight as BF16 values (the dequantized codes rounded to BF16).
TensorView LoadedWeights::load_dequantized(const WeightSpec& w, const TensorSource& source, const LoadOptions& opt) {
  int64_t rows = 0, cols = 0;
  std::vector<float> f = dequantized_weight_for_rank(w, source, opt.tp_rank, opt.tp_size, &rows, &cols);
  const TensorView v = be_.upload(make_view(f.data(), DType::F32, {rows, cols}), DType::BF16);
  TF_ASSERT(v.data != f.data(), "a converting upload copies");
  bytes_ += resident_bytes(v);
  n_params_ += v.numel();
  return v;
}

// 1 + w in F32 (Gemma's norms), in `buf`.
TensorView LoadedWeights::add_one(const TensorView& v, std::unique_ptr<uint8_t[]>& buf) {
  buf = std::make_unique<uint8_t[]>(size_t(v.numel()) * sizeof(float));
  float* out = reinterpret_cast<float*>(buf.get());
  for (int64_t i = 0; i < v.numel(); ++i) {
    const float w = v.dtype == DType::BF16 ? bf16_to_f32(v.as<uint16_t>()[i])
                    : v.dtype == DType::F16 ? f16_to_f32(v.as<uint16_t>()[i])
                                            : v.as<float>()[i];
    out[i] = 1.0f + w;
  }
  TensorView r = v;
  r.data = buf.get();
  r.dtype = DType::F32;
  return r;
}

// A part that went through a transform is F32 on the host and stays F32 where the stored
// dtype is kept (its rounding to a 16-bit dtype would undo the precision of 1 + w). GGUF
// blocks are always uploaded as stored (the source holds them only for a backend that reads
// them: Backend::reads_gguf_block).
TensorView LoadedWeights::upload(const TensorView& host, const LoadOptions& opt) {
  const DType dt = opt.keep_stored_dtype || dtype_is_gguf_block(host.dtype) ? host.dtype : opt.weight_dtype;
  TensorView v = be_.upload(host, dt);
  bytes_ += resident_bytes(v);
  n_params_ += v.numel();
  return v;
}

// Concatenates tensors along dim 0 in host memory (converting to F32 if their dtypes differ:
// GGUF blocks dequantized, as a file mixing block types in q|k|v has them), then uploads the
// result.
TensorView LoadedWeights::upload_concat(const std::vector<TensorView>& parts, const LoadOptions& opt) {
  DType dt = parts[0].dtype;
  for (const TensorView& p : parts) if (p.dtype != dt) dt = DType::F32;
  int64_t rows = 0;
  const int64_t cols = parts[0].n_dims > 1 ? parts[0].shape[1] : 1;
  for (const TensorView& p : parts) rows += p.shape[0];
  const size_t row_bytes = dtype_row_bytes(dt, cols);
  auto buf = std::make_unique<uint8_t[]>(size_t(rows) * row_bytes);
  int64_t at = 0;  // rows written
  for (const TensorView& src : parts) {
    uint8_t* dst_row = buf.get() + size_t(at) * row_bytes;
    if (src.dtype == dt) {
      std::memcpy(dst_row, src.data, src.nbytes());
    } else if (dtype_is_gguf_block(src.dtype)) {
      for (int64_t r = 0; r < src.shape[0]; ++r) dequantize_row(src, r, reinterpret_cast<float*>(dst_row) + r * cols);
    } else {
      float* dst = reinterpret_cast<float*>(dst_row);
      for (int64_t i = 0; i < src.shape[0] * cols; ++i) {
        dst[i] = src.dtype == DType::BF16 ? bf16_to_f32(src.as<uint16_t>()[i])
               : src.dtype == DType::F16  ? f16_to_f32(src.as<uint16_t>()[i])
                                          : src.as<float>()[i];
      }
    }
    at += src.shape[0];
  }
  TensorView host = parts[0].n_dims > 1 ? make_view(buf.get(), dt, {rows, cols}) : make_view(buf.get(), dt, {rows});
  TensorView v = upload(host, opt);
  if (v.data == buf.get()) host_tmp_.push_back(std::move(buf));  // backend kept our buffer
  return v;
}

}  // namespace tf

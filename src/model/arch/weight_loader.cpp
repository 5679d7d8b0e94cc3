#include "model/arch/weight_loader.h"

#include <fmt/format.h>

#include <cstring>

#include "core/error.h"
#include "core/progress.h"
#include "model/arch/tp_shard.h"

namespace tf {

LoadedWeights::LoadedWeights(const WeightTable& table, const TensorSource& source, Backend& backend,
                             const LoadOptions& opt)
    : be_(backend) {
  ProgressBar bar("loading weights", int64_t(table.weights.size()));
  for (size_t i = 0; i < table.weights.size(); ++i) {
    const WeightSpec& w = table.weights[i];
    TF_ASSERT(w.format == WeightFormat::Dense, "weight {} of layer {}: {} weights are not loadable",
              weight_role_name(w.key.role), w.key.layer, weight_format_name(w.format));
    const TensorView v = load(w, source, opt);
    if (v.data) weights_[w.key] = v;
    bar.update(int64_t(i) + 1);
  }
  bar.finish();
}

TensorView LoadedWeights::find(WeightKey key) const {
  auto it = weights_.find(key);
  return it == weights_.end() ? TensorView{} : it->second;
}

TensorView LoadedWeights::get(WeightKey key) const {
  auto it = weights_.find(key);
  TF_ASSERT(it != weights_.end(), "no weight {} for layer {}", weight_role_name(key.role), key.layer);
  return it->second;
}

// One weight: each part's rows of its checkpoint tensor, then this rank's slice of them
// (rows: a view; columns: a copy), concatenated when there are several parts. A weight whose
// slices equal an earlier upload's (a tied LM head, unsharded) is that upload again.
TensorView LoadedWeights::load(const WeightSpec& w, const TensorSource& source, const LoadOptions& opt) {
  std::vector<TensorView> views;
  std::string what;  // the slices, as a key for sharing
  int64_t col0 = 0, n_cols = -1;
  for (const WeightPart& p : w.parts) {
    const TpSlice& tp = p.tp;
    if (tp.split == TpSplit::FirstRank && opt.tp_rank != 0) return {};
    int64_t row0 = p.row0, n_rows = p.shape[0];
    if (tp.split == TpSplit::Rows) {
      const TpRange g = tp_groups(tp.n_groups, opt.tp_rank, opt.tp_size);
      row0 += g.begin * tp.group_size;
      n_rows = g.count * tp.group_size;
    } else if (tp.split == TpSplit::Columns) {
      const TpRange g = tp_groups(tp.n_groups, opt.tp_rank, opt.tp_size);
      col0 = g.begin * tp.group_size;
      n_cols = g.count * tp.group_size;
    }
    const TensorView t = source.get(p.tensor).view();
    views.push_back(row0 == 0 && n_rows == t.shape[0] ? t : slice_rows(t, row0, n_rows));
    what += fmt::format("{}[{}:{}],", p.tensor, row0, row0 + n_rows);
  }
  if (n_cols >= 0) what += fmt::format("cols[{}:{}]", col0, col0 + n_cols);
  if (auto it = by_slice_.find(what); it != by_slice_.end()) return it->second;

  TensorView v;
  if (views.size() > 1) {
    TF_ASSERT(n_cols < 0, "column-split weights have one part");
    v = upload_concat(views, opt);
  } else if (n_cols >= 0) {
    v = upload_cols(views[0], col0, n_cols, opt);
  } else {
    v = upload(views[0], opt);
  }
  by_slice_[what] = v;
  return v;
}

TensorView LoadedWeights::upload(const TensorView& host, const LoadOptions& opt) {
  const DType dt = opt.keep_stored_dtype ? host.dtype : opt.weight_dtype;
  TensorView v = be_.upload(host, dt);
  bytes_ += int64_t(v.nbytes());
  n_params_ += v.numel();
  return v;
}

// Concatenates tensors along dim 0 in host memory (converting to F32 if their dtypes differ),
// then uploads the result.
TensorView LoadedWeights::upload_concat(const std::vector<TensorView>& parts, const LoadOptions& opt) {
  DType dt = parts[0].dtype;
  for (const TensorView& p : parts) if (p.dtype != dt) dt = DType::F32;
  int64_t rows = 0;
  const int64_t cols = parts[0].n_dims > 1 ? parts[0].shape[1] : 1;
  for (const TensorView& p : parts) rows += p.shape[0];
  auto buf = std::make_unique<uint8_t[]>(size_t(rows * cols) * dtype_size(dt));
  int64_t at = 0;
  for (const TensorView& src : parts) {
    const int64_t n = src.shape[0] * cols;
    if (src.dtype == dt) {
      std::memcpy(buf.get() + size_t(at) * dtype_size(dt), src.data, src.nbytes());
    } else {
      float* dst = reinterpret_cast<float*>(buf.get()) + at;
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = src.dtype == DType::BF16 ? bf16_to_f32(src.as<uint16_t>()[i])
               : src.dtype == DType::F16  ? f16_to_f32(src.as<uint16_t>()[i])
                                          : src.as<float>()[i];
      }
    }
    at += n;
  }
  TensorView host = parts[0].n_dims > 1 ? make_view(buf.get(), dt, {rows, cols}) : make_view(buf.get(), dt, {rows});
  TensorView v = upload(host, opt);
  if (v.data == buf.get()) host_tmp_.push_back(std::move(buf));  // backend kept our buffer
  return v;
}

// Columns [col0, col0 + n) of a row-parallel weight (the whole tensor, uncopied, when that is all of it).
TensorView LoadedWeights::upload_cols(const TensorView& host, int64_t col0, int64_t n, const LoadOptions& opt) {
  if (col0 == 0 && n == host.shape[1]) return upload(host, opt);
  std::unique_ptr<uint8_t[]> buf;
  TensorView v = upload(copy_cols(host, col0, n, buf), opt);
  if (v.data == buf.get()) host_tmp_.push_back(std::move(buf));  // backend kept our buffer
  return v;
}

}  // namespace tf

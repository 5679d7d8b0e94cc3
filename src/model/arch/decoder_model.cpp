#include "model/arch/decoder_model.h"

#include <algorithm>

#include "core/error.h"
#include "dist/communicator.h"
#include "model/arch/rope.h"

namespace tf {

namespace {

// The first n rows of a scratch buffer.
TensorView rows(const TensorView& t, int64_t n) {
  if (!t.data) return t;
  TensorView v = t;
  v.shape[0] = n;
  return v;
}

// The rows of t as [rows, cols] (cols at most t's columns) over the same memory, packed:
// a layer narrower than the widest one uses the start of each scratch buffer.
TensorView with_cols(const TensorView& t, int64_t cols) {
  if (!t.data || cols == t.shape[1]) return t;
  TF_ASSERT(cols > 0 && cols < t.shape[1], "{} columns of {}", cols, t.shape_str());
  TensorView v = t;
  v.shape[1] = cols;
  return v;
}

// This rank's shard of the model, checked against the communicator before any weight is read.
TpShard checked_shard(const ModelConfig& cfg, const LoadOptions& opt) {
  const TpShard s = tp_shard(cfg, opt.tp_rank, opt.tp_size);
  const Communicator* comm = opt.comm;
  if (s.size > 1 && (!comm || comm->size() != s.size || comm->rank() != s.rank))
    fail("tensor parallel rank {} of {} needs a communicator of that rank and size", s.rank, s.size);
  return s;
}

}  // namespace

DecoderModel::DecoderModel(ModelBuild b)
    : cfg_(std::move(b.cfg)),
      source_(std::move(b.weights)),
      be_(*b.backend),
      shard_(checked_shard(cfg_, b.opt)),
      comm_(b.opt.comm),
      weights_(b.table, *source_, be_, b.opt) {
  std::vector<CopyRange> ranges;
  for (int c = 0; c < weights_.n_copies(); ++c)
    if (weights_.copies()[size_t(c)].min_tokens > 0) ranges.push_back({weights_.copies()[size_t(c)].min_tokens, c});
  set_copy_ranges(ranges);
}

int DecoderModel::copy_for(int64_t n_tokens) const {
  size_t r = 0;
  while (r + 1 < ranges_.size() && ranges_[r + 1].min_tokens <= n_tokens) ++r;
  return ranges_[r].copy;
}

int64_t DecoderModel::step_weight_bytes(int64_t n_tokens) const {
  return weights_.shared_bytes() + weights_.copy_bytes(copy_for(n_tokens));
}

std::vector<WeightCopyInfo> DecoderModel::weight_copies() const {
  std::vector<WeightCopyInfo> out;
  for (int c = 0; c < weights_.n_copies(); ++c)
    out.push_back({.name = LoadedWeights::copy_name(weights_.copies()[size_t(c)]), .bytes = weights_.copy_bytes(c)});
  return out;
}

void DecoderModel::set_copy_ranges(const std::vector<CopyRange>& ranges) {
  TF_ASSERT(!ranges.empty() && ranges[0].min_tokens == 1, "a copy policy starts at 1 token");
  for (size_t r = 0; r < ranges.size(); ++r) {
    TF_ASSERT(ranges[r].copy >= 0 && ranges[r].copy < weights_.n_copies(), "copy {} of {}", ranges[r].copy,
              weights_.n_copies());
    TF_ASSERT(r == 0 || ranges[r].min_tokens > ranges[r - 1].min_tokens, "copy ranges ascend: {} after {}",
              ranges[r].min_tokens, ranges[r - 1].min_tokens);
  }
  ranges_ = ranges;
}

TensorView DecoderModel::upload_f32(const std::vector<float>& v) {
  TensorView t = be_.alloc(DType::F32, {int64_t(v.size())});
  be_.copy_from_host(v.data(), t);
  rope_tables_.push_back(t);
  return t;
}

QkRope DecoderModel::upload_rope(LayerAttention kind) {
  const RopeFrequencies f = rope_frequencies(cfg_, kind);
  return QkRope{.inv_freq = upload_f32(f.inv_freq),
                .inv_freq_long = f.inv_freq_long.empty() ? TensorView{} : upload_f32(f.inv_freq_long),
                .long_from = f.long_from,
                .mscale = f.mscale};
}

Activations DecoderModel::layer_activations(const Activations& a, int64_t il) const {
  const TpLayer& l = shard_.layer(il);
  const int64_t hd = cfg_.head_dim;
  Activations v = a;
  v.qkv = with_cols(a.qkv, (l.n_heads + 2 * l.n_kv_heads) * hd);
  v.attn = with_cols(a.attn, l.n_heads * hd);
  if (l.d_ff > 0) {  // a dense MLP layer
    v.gate_up = with_cols(a.gate_up, 2 * l.d_ff);
    v.act = with_cols(a.act, l.d_ff);
  }
  return v;
}

// Buffers sized for this rank's shard (its widest layer); those of a kind of MLP the model does not have (the
// dense MLP of an all-experts model, the router of a dense one) stay empty.
bool DecoderModel::reserve(int64_t n_tokens, int64_t n_out) {
  if (n_tokens <= cap_tokens_ && n_out <= cap_out_) return false;
  Activations& s = scratch_;
  for (TensorView* t : {&s.x, &s.h, &s.qkv, &s.attn, &s.delta, &s.gate_up, &s.act, &s.router, &s.moe_ids, &s.moe_w,
                        &s.out_rows, &s.logits})
    if (t->data) be_.release(*t);
  const int64_t n = std::max(n_tokens, cap_tokens_), o = std::max(n_out, cap_out_);
  const DType a = be_.act_dtype();
  const int64_t hd = cfg_.head_dim;
  bool dense = false, moe = false;
  for (int64_t il = 0; il < cfg_.n_layers; ++il) (cfg_.layer_is_moe(il) ? moe : dense) = true;
  s.x = be_.alloc(a, {n, cfg_.d_model});
  s.h = be_.alloc(a, {n, cfg_.d_model});
  s.qkv = be_.alloc(a, {n, shard_.max_qkv_heads() * hd});
  s.attn = be_.alloc(a, {n, shard_.max_heads() * hd});
  s.delta = be_.alloc(a, {n, cfg_.d_model});
  s.gate_up = dense ? be_.alloc(a, {n, 2 * shard_.max_d_ff()}) : TensorView{};
  s.act = dense ? be_.alloc(a, {n, shard_.max_d_ff()}) : TensorView{};
  s.router = moe ? be_.alloc(DType::F32, {n, cfg_.n_experts}) : TensorView{};
  s.moe_ids = moe ? be_.alloc(DType::I32, {n, cfg_.n_experts_per_tok}) : TensorView{};
  s.moe_w = moe ? be_.alloc(DType::F32, {n, cfg_.n_experts_per_tok}) : TensorView{};
  s.out_rows = be_.alloc(a, {o, cfg_.d_model});
  s.logits = be_.alloc(DType::F32, {o, shard_.n_vocab});
  cap_tokens_ = n;
  cap_out_ = o;
  return true;
}

PreparedStep DecoderModel::prepare(const Batch& batch) {
  n_tokens_ = batch.n_tokens();
  n_out_ = batch.n_out();
  TF_ASSERT(n_tokens_ > 0, "empty batch");
  const bool moved = reserve(n_tokens_, std::max<int64_t>(n_out_, 1));
  be_.set_batch(batch);
  copy_ = copy_for(n_tokens_);
  return PreparedStep{.logits = rows(scratch_.logits, n_out_), .buffers_moved = moved, .weight_copy = copy_};
}

void DecoderModel::run() {
  const Activations& s = scratch_;
  const int64_t n = n_tokens_, o = n_out_;
  forward(Activations{.x = rows(s.x, n), .h = rows(s.h, n), .qkv = rows(s.qkv, n), .attn = rows(s.attn, n),
                      .delta = rows(s.delta, n), .gate_up = rows(s.gate_up, n), .act = rows(s.act, n),
                      .router = rows(s.router, n), .moe_ids = rows(s.moe_ids, n), .moe_w = rows(s.moe_w, n),
                      .out_rows = rows(s.out_rows, o), .logits = rows(s.logits, o)},
          o);
}

}  // namespace tf

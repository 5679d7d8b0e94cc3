// Tensor-parallel shard ranges and the slicing of mapped weights; see tp_shard.h.
#include "model/arch/tp_shard.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "model/weight_table.h"

namespace tf {

TpShard tp_shard(const ModelConfig& cfg, int32_t rank, int32_t size) {
  if (size < 1) fail("tensor parallel size must be at least 1, got {}", size);
  TF_ASSERT(rank >= 0 && rank < size, "rank {} outside {} ranks", rank, size);
  // "num_attention_heads = 32", or "layer 3's num_attention_heads (layer_num_attention_heads) = 24".
  const bool per_layer = cfg.non_uniform();
  auto what = [&](int64_t il, const char* name, const char* array) {
    return per_layer ? fmt::format("layer {}'s {} ({})", il, name, array) : std::string(name);
  };
  auto need = [&](int64_t dim, const std::string& name) {
    if (dim % size != 0) fail("tensor parallel size {} does not divide {} = {}", size, name, dim);
  };
  TpShard s{.rank = rank, .size = size};
  for (int64_t il = 0; il < cfg.n_layers; ++il) {
    const int64_t heads = cfg.heads_of(il), kv = cfg.kv_heads_of(il), ff = cfg.d_ff_of(il);
    need(heads, what(il, "num_attention_heads", "layer_num_attention_heads"));
    if (!cfg.layer_is_moe(il)) need(ff, what(il, "intermediate_size", "layer_intermediate_size"));
    if (kv % size != 0 && size % kv != 0)
      fail("tensor parallel size {} neither divides {} = {} nor is a multiple of it", size,
           what(il, "num_key_value_heads", "layer_num_key_value_heads"), kv);
    const TpRange h = tp_groups(heads, rank, size), k = tp_groups(kv, rank, size);
    const TpRange f = cfg.layer_is_moe(il) ? TpRange{} : tp_groups(ff, rank, size);
    s.layers.push_back(TpLayer{.head0 = h.begin, .n_heads = h.count, .kv_head0 = k.begin, .n_kv_heads = k.count,
                               .ff0 = f.begin, .d_ff = f.count});
  }
  need(cfg.n_vocab, "vocab_size");
  if (cfg.n_experts > 0) need(cfg.d_ff_expert, "the experts' intermediate size");
  const TpRange vocab = tp_groups(cfg.n_vocab, rank, size);
  s.vocab0 = vocab.begin;
  s.n_vocab = vocab.count;
  return s;
}

namespace {

// The largest `f(layer)` over the layers.
template <typename F>
int64_t widest(const std::vector<TpLayer>& layers, F&& f) {
  int64_t m = 0;
  for (const TpLayer& l : layers) m = std::max(m, f(l));
  return m;
}

}  // namespace

int64_t TpShard::max_heads() const { return widest(layers, [](const TpLayer& l) { return l.n_heads; }); }
int64_t TpShard::max_qkv_heads() const {
  return widest(layers, [](const TpLayer& l) { return l.n_heads + 2 * l.n_kv_heads; });
}
int64_t TpShard::max_d_ff() const { return widest(layers, [](const TpLayer& l) { return l.d_ff; }); }
int64_t TpShard::max_kv_heads() const { return widest(layers, [](const TpLayer& l) { return l.n_kv_heads; }); }

std::vector<int64_t> TpShard::kv_heads_per_layer() const {
  std::vector<int64_t> h;
  for (const TpLayer& l : layers) h.push_back(l.n_kv_heads);
  if (std::all_of(h.begin(), h.end(), [&](int64_t v) { return v == h[0]; })) h.clear();
  return h;
}

TensorView slice_rows(const TensorView& t, int64_t row0, int64_t n) {
  TF_ASSERT(t.n_dims >= 1 && row0 >= 0 && n >= 0 && row0 + n <= t.shape[0], "rows [{}, {}) of {}", row0,
            row0 + n, t.shape_str());
  TensorView v = t;
  v.shape[0] = n;
  v.data = static_cast<uint8_t*>(t.data) + size_t(row0) * (t.nbytes() / size_t(t.shape[0]));
  return v;
}

TensorView copy_cols(const TensorView& t, int64_t col0, int64_t n, std::unique_ptr<uint8_t[]>& buf) {
  TF_ASSERT(t.n_dims == 2 && col0 >= 0 && n >= 0 && col0 + n <= t.shape[1], "columns [{}, {}) of {}", col0,
            col0 + n, t.shape_str());
  const int64_t rows = t.shape[0], cols = t.shape[1];
  const size_t es = dtype_size(t.dtype);
  buf = std::make_unique<uint8_t[]>(size_t(rows * n) * es);
  const uint8_t* src = static_cast<const uint8_t*>(t.data);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(buf.get() + size_t(r * n) * es, src + size_t(r * cols + col0) * es, size_t(n) * es);
  return make_view(buf.get(), t.dtype, {rows, n}, t.device);
}

}  // namespace tf

// Tensor-parallel shard ranges and the slicing of mapped weights; see tp_shard.h.
#include "model/arch/tp_shard.h"

#include <cstring>

#include "core/error.h"
#include "model/weight_table.h"

namespace tf {

TpShard tp_shard(const ModelConfig& cfg, int32_t rank, int32_t size) {
  if (size < 1) fail("tensor parallel size must be at least 1, got {}", size);
  TF_ASSERT(rank >= 0 && rank < size, "rank {} outside {} ranks", rank, size);
  auto need = [&](int64_t dim, const char* name) {
    if (dim % size != 0) fail("tensor parallel size {} does not divide {} = {}", size, name, dim);
  };
  need(cfg.n_heads, "num_attention_heads");
  need(cfg.d_ff, "intermediate_size");
  need(cfg.n_vocab, "vocab_size");
  if (cfg.n_kv_heads % size != 0 && size % cfg.n_kv_heads != 0)
    fail("tensor parallel size {} neither divides num_key_value_heads = {} nor is a multiple of it", size,
         cfg.n_kv_heads);
  const TpRange heads = tp_groups(cfg.n_heads, rank, size), kv = tp_groups(cfg.n_kv_heads, rank, size),
                ff = tp_groups(cfg.d_ff, rank, size), vocab = tp_groups(cfg.n_vocab, rank, size);
  return TpShard{.rank = rank, .size = size, .head0 = heads.begin, .n_heads = heads.count, .kv_head0 = kv.begin,
                 .n_kv_heads = kv.count, .ff0 = ff.begin, .d_ff = ff.count, .vocab0 = vocab.begin,
                 .n_vocab = vocab.count};
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

// Fuzz harness: the input is a config.json. parse_model_config must either refuse it with
// tf::Error or give a config whose sizes, and everything the loader derives from them before
// reading the weights (the architecture's weight table, tensor element counts, KV bytes per token, RoPE
// frequencies), are small enough to compute without overflow or a runaway allocation.
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "model/arch/rope.h"
#include "model/arch/registry.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tf::ModelConfig c;
  try {
    c = tf::parse_model_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
  } catch (const tf::Error&) {
    return 0;
  }
  TF_ASSERT(c.n_layers > 0 && c.d_model > 0 && c.d_ff > 0 && c.n_heads > 0 && c.n_kv_heads > 0 &&
            c.head_dim > 0 && c.n_vocab > 0 && c.max_position > 0);
  TF_ASSERT(c.n_heads % c.n_kv_heads == 0 && c.head_dim % 2 == 0);
  using L = tf::ConfigLimits;
  TF_ASSERT(c.n_layers <= L::kMaxLayers && c.d_model <= L::kMaxHidden && c.d_ff <= L::kMaxIntermediate &&
                c.n_heads <= L::kMaxHeads && c.head_dim <= L::kMaxHeadDim && c.n_vocab <= L::kMaxVocab &&
                c.max_position <= L::kMaxPositions && c.sliding_window <= L::kMaxPositions,
            "a size passed its bound");
  for (int32_t id : c.eos_ids) TF_ASSERT(id >= 0 && id < c.n_vocab);
  TF_ASSERT(c.bos_id >= -1 && c.bos_id < c.n_vocab);

  const tf::WeightTable table = tf::weight_table(c);
  for (const tf::TensorSpec& s : table.tensors) {
    int64_t n = 1;
    for (int64_t d : s.shape) TF_ASSERT(!__builtin_mul_overflow(n, d, &n), "{}: element count overflows", s.name);
    int64_t bytes = 0;
    TF_ASSERT(!__builtin_mul_overflow(n, int64_t(4), &bytes), "{}: byte count overflows", s.name);
  }
  int64_t kv = c.n_layers;
  for (int64_t f : {c.n_kv_heads, c.head_dim, int64_t(2), int64_t(4)})
    TF_ASSERT(!__builtin_mul_overflow(kv, f, &kv), "KV bytes per token overflow");
  TF_ASSERT(c.kv_bytes_per_token(4) == kv);
  TF_ASSERT(tf::rope_inv_freq(c).size() == size_t(c.head_dim / 2));
  return 0;
}

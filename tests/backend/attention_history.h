// The pieces of a paged-attention test history shared by the CPU op tests
// (test_ops_attention.cpp) and the CUDA op tests (cuda/test_cuda_ops.cpp): chunks of
// sequences per batch, the long history, shuffled block tables with spare blocks, NaN pool
// contents, and Llama's RoPE frequencies. Each test keeps its own short history (kSteps).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "op_test_util.h"

namespace tf::test {

struct Chunk {
  int seq;    // sequence id
  int32_t n;  // tokens of that sequence in this batch
};
using Steps = std::vector<std::vector<Chunk>>;

// Long contexts: a 150-token prefill beside a 40-token one, chunks of 100 and 70 after them
// (320 and 110 tokens of context), then decodes: many key tiles of every kernel.
inline const Steps kLongSteps = {
    {{0, 150}, {1, 40}},
    {{1, 70}, {0, 100}},
    {{0, 1}, {1, 1}},
    {{1, 1}, {0, 1}},
};

inline int num_seqs(const Steps& steps) {
  int n = 0;
  for (const auto& step : steps)
    for (const Chunk& c : step) n = std::max(n, c.seq + 1);
  return n;
}

inline std::vector<int32_t> seq_lengths(const Steps& steps) {
  std::vector<int32_t> len(size_t(num_seqs(steps)), 0);
  for (const auto& step : steps)
    for (const Chunk& c : step) len[size_t(c.seq)] += c.n;
  return len;
}

inline int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }

// Block tables: sequence s gets ceil(len_s / block_size) blocks, consecutive entries of a
// shuffled permutation of [0, n_blocks) that includes `spare` blocks nobody owns.
struct Tables {
  int64_t n_blocks = 0;
  int32_t max_blocks = 0;
  std::vector<std::vector<int32_t>> blocks;  // [n_seqs][blocks of that sequence]
};

inline Tables make_tables(Rng& rng, int32_t block_size, const std::vector<int32_t>& lens, int32_t spare) {
  Tables t;
  for (int32_t len : lens) t.n_blocks += ceil_div(len, block_size);
  t.n_blocks += spare;
  std::vector<int32_t> perm(size_t(t.n_blocks));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = int32_t(i);
  rng.shuffle(perm);
  size_t next = 0;
  for (int32_t len : lens) {
    const int32_t nb = ceil_div(len, block_size);
    t.blocks.emplace_back(perm.begin() + int64_t(next), perm.begin() + int64_t(next + size_t(nb)));
    next += size_t(nb);
    t.max_blocks = std::max(t.max_blocks, nb);
  }
  return t;
}

// A quiet NaN with a payload, in each KV dtype; for I8 (no NaN) -128, which quantization
// never writes.
inline std::vector<uint8_t> nan_bytes(DType dtype, int64_t n) {
  std::vector<uint8_t> out(size_t(n) * dtype_size(dtype));
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::I8) {
      out[size_t(i)] = 0x80;  // -128, which quantization never produces
    } else if (dtype == DType::FP8) {
      out[size_t(i)] = 0x7f;  // E4M3 NaN, which quantization never produces
    } else if (dtype == DType::F32) {
      const uint32_t bits = 0x7fc0beefu;
      std::memcpy(out.data() + i * 4, &bits, 4);
    } else {
      const uint16_t bits = dtype == DType::BF16 ? 0x7fc1 : 0x7e01;
      std::memcpy(out.data() + i * 2, &bits, 2);
    }
  }
  return out;
}

// A stored I8 / FP8 KV code as an ordinal in which neighbouring values differ by one: I8 the
// integer; FP8 the E4M3 magnitude bits with the sign (+0 and -0 both 0). nan_bytes' poison
// maps to -128 (I8) and 127 (FP8).
inline int kv_code_ordinal(DType dtype, uint8_t b) {
  if (dtype == DType::I8) return int8_t(b);
  return (b & 0x80) ? -int(b & 0x7f) : int(b & 0x7f);
}

// inv_freq[i] = theta^(-2i / head_dim), theta = 10000 (Llama), as F32.
inline std::vector<float> make_inv_freq(int64_t head_dim) {
  std::vector<float> f(size_t(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i)
    f[size_t(i)] = float(std::pow(10000.0, -2.0 * double(i) / double(head_dim)));
  return f;
}

}  // namespace tf::test

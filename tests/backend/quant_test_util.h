// Quantized weights for the backend op tests (CPU in test_ops_matmul_quant.cpp, CUDA in
// cuda/test_cuda_quant.cpp): the formats every kernel is swept over, and a random weight of
// one of them quantized by RTN.
#pragma once

#include <cmath>
#include <cstring>

#include "op_test_util.h"
#include "quant/quantized_weight.h"
#include "quant/quantizer.h"

namespace tf::test {

struct QuantFormat {
  const char* name;
  QuantSpec spec;
};
// W8, W4 asymmetric at group sizes 32 and 128, W4 symmetric, FP8.
inline constexpr QuantFormat kQuantFormats[] = {
    {"W8", QuantSpec{.format = DType::W8}},
    {"W4g32", QuantSpec{.format = DType::W4, .group_size = 32}},
    {"W4g128", QuantSpec{.format = DType::W4, .group_size = 128}},
    {"W4g128sym", QuantSpec{.format = DType::W4, .group_size = 128, .symmetric = true}},
    {"FP8", QuantSpec{.format = DType::FP8}},
};

// w ~ N(0, 1 / k) [m, k], quantized by RTN.
inline QuantizedWeight random_quantized(Rng& rng, int64_t m, int64_t k, const QuantSpec& spec) {
  const std::vector<float> w = randn(rng, m * k, 1.0 / std::sqrt(double(k)));
  return quantize_rtn(w.data(), m, k, spec, "w");
}

// A GGUF Q4_0 matrix [m, k] (k a multiple of 32) of random bytes: every nibble value, F16
// block scales d uniform in [-0.05, 0.05] (ggml's d may be negative).
inline std::vector<uint8_t> random_q4_0(Rng& rng, int64_t m, int64_t k) {
  std::vector<uint8_t> q(size_t(m * (k / 32) * 18));
  for (size_t b = 0; b < q.size() / 18; ++b) {
    const uint16_t d = f32_to_f16(float(-0.05 + 0.1 * rng.uniform()));
    std::memcpy(q.data() + 18 * b, &d, 2);
    for (int i = 2; i < 18; ++i) q[18 * b + size_t(i)] = uint8_t(rng.uniform_int(0, 255));
  }
  return q;
}

}  // namespace tf::test

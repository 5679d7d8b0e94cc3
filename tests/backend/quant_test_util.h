// Quantized weights for the backend op tests (CPU in test_ops_matmul_quant.cpp, CUDA in
// cuda/test_cuda_quant.cpp): the formats every kernel is swept over, and a random weight of
// one of them quantized by RTN.
#pragma once

#include <cmath>

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

}  // namespace tf::test

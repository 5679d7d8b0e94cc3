// RoPE inverse frequencies against values computed independently (Python, float64) from
// transformers' _compute_default_rope_parameters and _compute_llama3_parameters for a
// Llama-3.1-8B-like config: theta 500000, head_dim 128, factor 8, low_freq_factor 1,
// high_freq_factor 4, original_max_position_embeddings 8192. Indices cover the three bands:
// high frequency (kept), medium (smoothly interpolated) and low (divided by the factor).
#include <gtest/gtest.h>

#include <cmath>

#include "model/arch/rope.h"

namespace tf {
namespace {

ModelConfig llama31_like() {
  ModelConfig c;
  c.head_dim = 128;
  c.rotary_dim = 128;
  c.rope_theta = 500000.0f;
  return c;
}

TEST(Rope, DefaultInvFreq) {
  const std::vector<float> inv = rope_frequencies(llama31_like()).inv_freq;
  ASSERT_EQ(inv.size(), 64u);
  const std::pair<int, double> expect[] = {{0, 1.0}, {1, 0.8146172338565447}, {20, 0.016560440080994446},
                                           {40, 0.0002742481756762073}, {63, 2.455140791131609e-06}};
  for (auto [i, v] : expect) EXPECT_NEAR(inv[size_t(i)], v, 1e-6 * v) << i;
}

TEST(Rope, Llama3ScaledInvFreq) {
  ModelConfig c = llama31_like();
  c.rope_scaling = RopeScaling{.type = RopeScaling::Type::Llama3, .factor = 8.0f, .low_freq_factor = 1.0f,
                               .high_freq_factor = 4.0f, .original_max_position_embeddings = 8192};
  const std::vector<float> inv = rope_frequencies(c).inv_freq;
  const std::pair<int, double> expect[] = {
      {0, 1.0}, {20, 0.016560440080994446},                                 // high frequency: kept
      {31, 0.0008567514129196321}, {32, 0.0005248461609929547},             // medium band
      {33, 0.00031269375038406517}, {34, 0.00017850781276799638},
      {35, 9.556212353964683e-05}, {40, 3.428102195952591e-05},             // low frequency: / 8
      {50, 4.411534674558404e-06}, {63, 3.068925988914511e-07}};
  for (auto [i, v] : expect) EXPECT_NEAR(inv[size_t(i)], v, 1e-5 * v) << i;
}

}  // namespace
}  // namespace tf

#include "model/arch/rope.h"

#include <cmath>
#include <numbers>

namespace tf {

namespace {

// theta^(-2i / dim) for i < dim / 2, divided by factors[i] when given (LongRoPE, Factors).
std::vector<float> plain_inv_freq(float theta, int64_t dim, const std::vector<float>* factors = nullptr) {
  std::vector<float> inv(size_t(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double f = 1.0 / std::pow(double(theta), double(2 * i) / double(dim));
    inv[size_t(i)] = float(factors ? f / double((*factors)[size_t(i)]) : f);
  }
  return inv;
}

// Llama 3 scaling ("llama3" rope_type, transformers' _compute_llama3_parameters): wavelengths
// longer than original_max / low_freq_factor are divided by `factor`, shorter than
// original_max / high_freq_factor kept, and the band between interpolated smoothly.
void llama3_scale(std::vector<float>& inv, const RopeScaling& rs) {
  const float old_ctx = float(rs.original_max_position_embeddings);
  const float low_wavelen = old_ctx / rs.low_freq_factor;
  const float high_wavelen = old_ctx / rs.high_freq_factor;
  for (float& f : inv) {
    const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
    if (wavelen > low_wavelen) {
      f = f / rs.factor;
    } else if (wavelen >= high_wavelen) {
      const float smooth = (old_ctx / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
      f = (1.0f - smooth) * f / rs.factor + smooth * f;
    }
  }
}

}  // namespace

// LongRoPE (transformers' _compute_longrope_parameters and its dynamic update): the short
// factors while the sequence is within original_max_position_embeddings, the long ones
// beyond. transformers picks one table per forward by the longest position in it; here the
// choice is per token by its own position, which is what transformers does when a sequence
// is generated token by token, and keeps a token's rotation independent of its batch.
RopeFrequencies rope_frequencies(const ModelConfig& cfg, LayerAttention kind) {
  const RopeParams rope = cfg.rope(kind);
  const RopeScaling& rs = rope.scaling;
  RopeFrequencies out;
  switch (rs.type) {
    case RopeScaling::Type::None: out.inv_freq = plain_inv_freq(rope.theta, cfg.rotary_dim); break;
    case RopeScaling::Type::Linear:
      out.inv_freq = plain_inv_freq(rope.theta, cfg.rotary_dim);
      for (float& f : out.inv_freq) f /= rs.factor;
      break;
    case RopeScaling::Type::Llama3:
      out.inv_freq = plain_inv_freq(rope.theta, cfg.rotary_dim);
      llama3_scale(out.inv_freq, rs);
      break;
    case RopeScaling::Type::Factors: out.inv_freq = plain_inv_freq(rope.theta, cfg.rotary_dim, &rs.factors); break;
    case RopeScaling::Type::LongRope:
      out.inv_freq = plain_inv_freq(rope.theta, cfg.rotary_dim, &rs.short_factor);
      out.inv_freq_long = plain_inv_freq(rope.theta, cfg.rotary_dim, &rs.long_factor);
      out.long_from = int32_t(rs.original_max_position_embeddings);
      out.mscale = rs.attention_factor;
      break;
  }
  return out;
}

}  // namespace tf

#include "model/arch/rope.h"

#include <cmath>

namespace tf {

// Llama 3 scaling ("llama3" rope_type, transformers' _compute_llama3_parameters): wavelengths
// longer than original_max / low_freq_factor are divided by `factor`, shorter than
// original_max / high_freq_factor kept, and the band between interpolated smoothly.
std::vector<float> rope_inv_freq(const ModelConfig& cfg) {
  const int64_t half = cfg.head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv[size_t(i)] = float(1.0 / std::pow(double(cfg.rope_theta), double(2 * i) / double(cfg.head_dim)));
  if (cfg.rope_scaling.type != RopeScaling::Type::Llama3) return inv;

  const RopeScaling& rs = cfg.rope_scaling;
  const float old_ctx = float(rs.original_max_position_embeddings);
  const float low_wavelen = old_ctx / rs.low_freq_factor;
  const float high_wavelen = old_ctx / rs.high_freq_factor;
  for (float& f : inv) {
    const float wavelen = 2.0f * float(M_PI) / f;
    if (wavelen > low_wavelen) {
      f = f / rs.factor;
    } else if (wavelen >= high_wavelen) {
      const float smooth = (old_ctx / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
      f = (1.0f - smooth) * f / rs.factor + smooth * f;
    }
  }
  return inv;
}

}  // namespace tf

// Checkpoint::random: a model's weights from its config alone, for speed work on real shapes.
#include <omp.h>

#include <cmath>

#include "model/safetensors.h"
#include "model/weights.h"

namespace tf {

Checkpoint Checkpoint::random(const std::vector<WeightSpec>& specs, uint64_t seed) {
  Checkpoint c;
  c.dir_ = "<random weights>";
  for (size_t ispec = 0; ispec < specs.size(); ++ispec) {
    const WeightSpec& w = specs[ispec];
    if (w.optional) continue;
    int64_t n = 1;
    for (int64_t d : w.shape) n *= d;
    auto data = std::make_unique<uint16_t[]>(size_t(n));
    const bool is_norm = w.shape.size() == 1 && (w.role == WeightRole::AttnNorm || w.role == WeightRole::MlpNorm ||
                                                  w.role == WeightRole::FinalNorm);
    const int64_t fan_in = w.shape.size() > 1 ? w.shape[1] : 1;
    const float a = is_norm ? 0.0f : float(std::sqrt(3.0 / double(fan_in)));  // uniform(-a, a): variance 1/fan_in
    uint16_t* p = data.get();
    // A counter-based generator (SplitMix64 of seed, tensor and index), so threads need no
    // shared state and the values do not depend on the thread count.
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      uint64_t z = seed + 0x9e3779b97f4a7c15ull * (uint64_t(ispec) * 0x100000000ull + uint64_t(i) + 1);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      const float u = float(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
      p[i] = f32_to_bf16(is_norm ? 1.0f : (2.0f * u - 1.0f) * a);
    }
    TensorInfo info{.name = w.name, .dtype = DType::BF16, .shape = w.shape,
                    .data = reinterpret_cast<const uint8_t*>(p), .nbytes = size_t(n) * 2, .file = c.dir_};
    c.owned_data_.push_back(std::move(data));
    c.owned_infos_[w.name] = std::move(info);
  }
  for (const auto& [name, info] : c.owned_infos_) c.index_[name] = &info;
  return c;
}

}  // namespace tf

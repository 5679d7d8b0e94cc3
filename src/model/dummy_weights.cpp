// RandomWeights: a model's weights from its config alone, for speed work on real shapes.
#include "model/dummy_weights.h"

#include <omp.h>

#include <cmath>

namespace tf {

RandomWeights::RandomWeights(const WeightTable& table, uint64_t seed) {
  for (size_t ispec = 0; ispec < table.tensors.size(); ++ispec) {
    const TensorSpec& w = table.tensors[ispec];
    if (w.optional) continue;
    TF_ASSERT(w.format == WeightFormat::Dense, "random weights are dense; tensor '{}' is {}", w.name,
              weight_format_name(w.format));
    int64_t n = 1;
    for (int64_t d : w.shape) n *= d;
    auto data = std::make_unique<uint16_t[]>(size_t(n));
    const bool ones = w.init == DummyInit::Ones;
    const int64_t fan_in = w.shape.size() > 1 ? w.shape[1] : 1;
    const float a = ones ? 0.0f : float(std::sqrt(3.0 / double(fan_in)));  // uniform(-a, a): variance 1/fan_in
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
      p[i] = f32_to_bf16(ones ? 1.0f : (2.0f * u - 1.0f) * a);
    }
    infos_[w.name] = TensorInfo{.name = w.name, .dtype = DType::BF16, .shape = w.shape,
                                .data = reinterpret_cast<const uint8_t*>(p), .nbytes = size_t(n) * 2, .file = origin_};
    data_.push_back(std::move(data));
  }
  for (const auto& [name, info] : infos_) index_[name] = &info;
}

}  // namespace tf

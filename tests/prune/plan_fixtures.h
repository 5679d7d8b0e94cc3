// Hand-built pruning inputs shared by the plan and greedy-allocation tests.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "prune/plan.h"

namespace tf::prune_test {

// Shapes of the given layers (d_model, head_dim) with their parameter count filled in.
inline PruneShapes shapes(std::vector<LayerShape> layers, int64_t d_model = 16, int64_t head_dim = 4) {
  PruneShapes s{.d_model = d_model, .head_dim = head_dim, .layers = std::move(layers)};
  for (const LayerShape& l : s.layers)
    s.n_layer_params += (2 * l.n_heads + 2 * l.n_kv_heads) * head_dim * d_model + 3 * l.d_ff * d_model;
  return s;
}

// base, base + 1, ..., base + n - 1: distinct scores in a known order.
inline std::vector<double> ramp(int64_t n, double base) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = base + double(i);
  return v;
}

}  // namespace tf::prune_test

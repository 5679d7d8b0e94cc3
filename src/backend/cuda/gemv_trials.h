// Which other kernels a recorded step is recorded again with, one quantized GEMV shape at a
// time, once it has been replayed often (CudaBackend::graph_begin, BackendOptions::gemv_timed):
// the cold timing of a shape (launch_quant_gemv: each candidate alone, a few launches) ranks
// kernels whose times lie within a few percent of each other in an order that a step does not
// keep, where they follow other kernels, some under PDL (docs/PERF.md, 2026-12-06: on the
// Llama-3-8B shape a kernel 2% slower alone made the step 4% slower, one 1% slower alone made it
// 1.3% faster, and INT4 batch-1 decode moved by 4% between processes with the cold picks alone).
// Plain C++ (no CUDA headers), so the host tests check it on any machine. Internal to
// src/backend/cuda.
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

namespace tf::cuda {

// Candidates within this share of the fastest cold time are tried in the step, at most
// kGemvTrialsPerShape of them a shape.
constexpr double kGemvTrialMargin = 0.10;
constexpr int kGemvTrialsPerShape = 3;

// The kernels (ids as in `times`: (kernel, us) of every candidate timed) to record a step with
// instead of `current`: those whose time is within `margin` of the fastest, `current` left out,
// fastest first (ties in the order of `times`), at most `max_n`.
inline std::vector<int> gemv_trial_kernels(const std::vector<std::pair<int, double>>& times, int current,
                                           double margin = kGemvTrialMargin, int max_n = kGemvTrialsPerShape) {
  double best = -1;
  for (const auto& [kernel, us] : times)
    if (us >= 0 && (best < 0 || us < best)) best = us;
  std::vector<std::pair<int, double>> near;
  for (const auto& [kernel, us] : times)
    if (kernel != current && us >= 0 && us <= best * (1 + margin)) near.emplace_back(kernel, us);
  std::stable_sort(near.begin(), near.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  std::vector<int> out;
  for (const auto& [kernel, us] : near) {
    if (int(out.size()) == max_n) break;
    if (std::find(out.begin(), out.end(), kernel) == out.end()) out.push_back(kernel);
  }
  return out;
}

}  // namespace tf::cuda

// Which kernels of a step launch with programmatic dependent launch (launch.cuh), from the
// backend's options and the step's kind. Plain C++ (no CUDA headers), so the host tests check
// it on any machine. Internal to src/backend/cuda.
#pragma once

#include <optional>

#include "backend/backend.h"

namespace tf::cuda {

struct PdlSwitches {
  bool plain = false;     // kernels launched with launch_pdl / launch_pdl_cluster
  bool resident = false;  // kernels whose grid is what fits at once (launch_resident)
  bool operator==(const PdlSwitches&) const = default;
};

// A decode step (every sequence one new token) keeps plain stream order unless
// BackendOptions::pdl_decode; its grid-sized kernels use PDL with ::pdl_decode_resident, or
// with ::pdl_decode and ::pdl_resident together. Prefill and mixed steps use PDL, their
// grid-sized kernels only with ::pdl_resident. ::pdl off turns it off everywhere.
inline PdlSwitches pdl_switches(const BackendOptions& o, bool decode) {
  if (!o.pdl) return {};
  if (!decode) return {.plain = true, .resident = o.pdl_resident};
  return {.plain = o.pdl_decode, .resident = o.pdl_decode_resident || (o.pdl_decode && o.pdl_resident)};
}

// The second way a recorded step is recorded once it has been replayed often, to be timed
// against the first (recorded with `step`, the step's pdl_switches; CudaBackend::graph_end
// keeps the faster): PDL for every kernel. None with BackendOptions::pdl or ::pdl_timed off,
// or where `step` is that already.
inline std::optional<PdlSwitches> pdl_trial(const BackendOptions& o, const PdlSwitches& step) {
  const PdlSwitches all{.plain = true, .resident = true};
  if (!o.pdl || !o.pdl_timed || step == all) return std::nullopt;
  return all;
}

}  // namespace tf::cuda

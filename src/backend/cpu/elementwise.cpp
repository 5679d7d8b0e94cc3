// Row-wise CPU ops: embedding lookup, RMSNorm (plain and fused with the residual add),
// SwiGLU, and the row gather before the LM head. Rows are independent: threads split rows,
// the inner loops over d vectorise.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/shape_checks.h"

namespace tf {
namespace {

void norm_row(const float* x, const float* w, int64_t d, float eps, float* out) {
  float ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < d; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / float(d) + eps);
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) out[i] = x[i] * inv * w[i];
}

std::vector<float> weight_f32(const TensorView& w) {
  std::vector<float> v(size_t(w.numel()));
  load_row_f32(w.data, w.dtype, 0, w.numel(), v.data());
  return v;
}

}  // namespace

void CpuBackend::embedding(const TensorView& table, const TensorView& out) {
  const auto& ids = batch().token_ids;
  const int64_t d = table.shape[1], n = int64_t(ids.size());
  check_2d(out, n, d, "embedding out");
  for (int64_t t = 0; t < n; ++t) {
    TF_ASSERT(ids[size_t(t)] >= 0 && ids[size_t(t)] < table.shape[0], "token id {} out of range", ids[size_t(t)]);
    load_row_f32(table.data, table.dtype, int64_t(ids[size_t(t)]) * d, d, out.as<float>() + t * d);
  }
}

void CpuBackend::rms_norm(const TensorView& x, const TensorView& w, float eps,
                          const TensorView& out) {
  const int64_t d = x.row_size(), rows = x.n_rows();
  const std::vector<float> wf = weight_f32(w);
#pragma omp parallel for schedule(static) if (rows > 8)
  for (int64_t r = 0; r < rows; ++r) norm_row(x.as<float>() + r * d, wf.data(), d, eps, out.as<float>() + r * d);
}

void CpuBackend::swiglu(const TensorView& gate_up, const TensorView& out) {
  const int64_t d_ff = out.shape[1], rows = out.shape[0];
  check_2d(gate_up, rows, 2 * d_ff, "swiglu gate_up");
#pragma omp parallel for schedule(static) if (rows > 8)
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate_up.as<float>() + r * 2 * d_ff;
    const float* u = g + d_ff;
    float* o = out.as<float>() + r * d_ff;
    for (int64_t i = 0; i < d_ff; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

void CpuBackend::gather_logit_rows(const TensorView& x, const TensorView& out) {
  const int64_t d = x.shape[1];
  check_2d(out, batch().n_out(), d, "gather_logit_rows out");
  for (int32_t i = 0; i < batch().n_out(); ++i)
    std::copy_n(x.as<float>() + int64_t(batch().logits_rows[size_t(i)]) * d, d, out.as<float>() + i * d);
}

}  // namespace tf

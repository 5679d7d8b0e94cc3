// The W4 scale and zero-point refit (see quantizer.h). Per row i, with the codes c fixed, the
// dequantized row is linear in each group's (scale, -scale * zero): w'_j = a_g c_j + b_g for j
// in group g. Minimising (w_i - w'_i)^T H (w_i - w'_i) over all groups of the row at once is a
// least-squares problem in 2G unknowns (the groups are coupled through H's off-diagonal
// blocks). The stored form needs an integer zero in 0..15, so zero = round(-b / a), and then
// the scales alone are refitted with those zeros (G unknowns), and rounded to F16 as stored.
#include <Eigen/Dense>

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/quantizer.h"

namespace tf {
namespace {

using MatD = Eigen::MatrixXd;
using VecD = Eigen::VectorXd;

// Solves M x = r for a symmetric positive semi-definite M, with a ridge of 1e-9 of its mean
// diagonal so that a group whose codes are all equal (a zero column) still has a solution.
VecD solve_psd(MatD M, const VecD& r) {
  const double ridge = 1e-9 * std::max(M.diagonal().mean(), 1e-300);
  M.diagonal().array() += ridge;
  return M.ldlt().solve(r);
}

// (w - w')^T H (w - w') for row i of q's codes under the parameters p (one per group).
double row_error(const double* w, const MatD& H, const QuantizedWeight& q, int64_t i,
                 const std::vector<GroupParams>& p) {
  const int64_t k = q.k, len = q.group_len();
  VecD e(k);
  for (int64_t j = 0; j < k; ++j) e(j) = w[j] - double(dequantize_value(q.dtype, q.code(i, j), p[size_t(j / len)]));
  return e.dot(H * e);
}

std::vector<GroupParams> row_params(const QuantizedWeight& q, int64_t i) {
  std::vector<GroupParams> p(static_cast<size_t>(q.n_groups()));
  for (int64_t g = 0; g < q.n_groups(); ++g) p[size_t(g)] = q.params(i, g);
  return p;
}

}  // namespace

double h_weighted_row_error(const float* w, const float* h, const QuantizedWeight& q, int64_t row) {
  const int64_t k = q.k;
  const MatD H = Eigen::Map<const Eigen::MatrixXf>(h, k, k).cast<double>();
  const std::vector<double> wd(w, w + k);
  return row_error(wd.data(), H, q, row, row_params(q, row));
}

std::vector<double> refit_w4_params(const float* w, const float* h, QuantizedWeight& q, bool symmetric) {
  TF_ASSERT(q.dtype == DType::W4, "refit_w4_params: {} is not W4", dtype_name(q.dtype));
  const int64_t m = q.m, k = q.k, len = q.group_len(), G = q.n_groups();
  const MatD H = Eigen::Map<const Eigen::MatrixXf>(h, k, k).cast<double>();
  std::vector<double> out(static_cast<size_t>(m));
  MatD A(k, 2 * G), B(k, G);
  VecD wi(k);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < k; ++j) wi(j) = w[i * k + j];
    const std::vector<GroupParams> old = row_params(q, i);
    const double before = row_error(wi.data(), H, q, i, old);
    std::vector<GroupParams> p = old;
    if (!symmetric) {  // (scale, offset) jointly, then the zero point rounded
      A.setZero();
      for (int64_t j = 0; j < k; ++j) {
        A(j, 2 * (j / len)) = q.code(i, j);
        A(j, 2 * (j / len) + 1) = 1.0;
      }
      const MatD HA = H * A;
      const VecD t = solve_psd(A.transpose() * HA, HA.transpose() * wi);
      for (int64_t g = 0; g < G; ++g) {
        const double a = t(2 * g), b = t(2 * g + 1);
        if (a > 0 && std::isfinite(a) && std::isfinite(b))
          p[size_t(g)].zero = uint8_t(std::clamp(std::nearbyint(-b / a), 0.0, 15.0));
      }
    }
    B.setZero();  // the scales with the zero points fixed
    for (int64_t j = 0; j < k; ++j) B(j, j / len) = double(int(q.code(i, j)) - int(p[size_t(j / len)].zero));
    const MatD HB = H * B;
    const VecD s = solve_psd(B.transpose() * HB, HB.transpose() * wi);
    bool ok = true;
    for (int64_t g = 0; g < G; ++g) {
      // a positive scale within F16's range, rounded as stored
      ok = ok && std::isfinite(s(g)) && s(g) > 0 && s(g) < 65504.0;
      if (ok) p[size_t(g)].scale = f16_to_f32(f32_to_f16(float(s(g))));
    }
    const double after = ok ? row_error(wi.data(), H, q, i, p) : before;
    if (ok && after < before) {
      for (int64_t g = 0; g < G; ++g) q.set_params(i, g, p[size_t(g)]);
      out[size_t(i)] = after;
    } else {
      out[size_t(i)] = before;
    }
  }
  return out;
}

int64_t descend_w4_codes(const float* w, const float* h, QuantizedWeight& q, int max_passes) {
  TF_ASSERT(q.dtype == DType::W4, "descend_w4_codes: {} is not W4", dtype_name(q.dtype));
  const int64_t m = q.m, k = q.k, len = q.group_len();
  const MatD H = Eigen::Map<const Eigen::MatrixXf>(h, k, k).cast<double>();
  int64_t changed = 0;
  VecD e(k), g(k);
  for (int64_t i = 0; i < m; ++i) {
    const std::vector<GroupParams> p = row_params(q, i);
    for (int64_t j = 0; j < k; ++j)
      e(j) = double(w[i * k + j]) - double(dequantize_value(q.dtype, q.code(i, j), p[size_t(j / len)]));
    g.noalias() = H * e;  // the objective e^T H e has gradient -2 g in the dequantized row
    for (int pass = 0; pass < max_passes; ++pass) {
      int64_t moved = 0;
      for (int64_t j = 0; j < k; ++j) {
        const double hjj = H(j, j);
        const GroupParams& pj = p[size_t(j / len)];
        if (!(hjj > 0) || !(pj.scale > 0)) continue;  // a dead input, or a group of zeros
        // Raising the dequantized value by d changes the objective by -2 d g_j + d^2 H_jj:
        // least at d = g_j / H_jj; the nearest code to that value is the best code (the
        // objective is a parabola in d), clamped to the range.
        const uint8_t old = q.code(i, j);
        const double cur = dequantize_value(q.dtype, old, pj);
        const uint8_t c = quantize_value(q.dtype, float(cur + g(j) / hjj), pj);
        if (c == old) continue;
        const double d = double(dequantize_value(q.dtype, c, pj)) - cur;
        if (-2.0 * d * g(j) + d * d * hjj >= 0) continue;  // a tie, or float rounding: keep the code
        q.set_code(i, j, c);
        e(j) -= d;
        g.noalias() -= d * H.col(j);
        ++moved;
      }
      changed += moved;
      if (moved == 0) break;
    }
  }
  return changed;
}

}  // namespace tf

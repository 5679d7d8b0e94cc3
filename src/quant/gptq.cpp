// GPTQ-style error compensation (see quantizer.h), after the reference implementation's
// algorithm: H = 2 x^T x / n + damp * mean(diag H) * I; U = the upper Cholesky factor of
// H^-1; then column by column, q_j = Q(w_j), e_j = (w_j - q_j) / U_jj and the columns after j
// get w_l -= e_j * U_jl. Updates inside a block of columns are applied at once; the rest of
// the matrix gets the block's errors in one product (the "lazy batch" update), which is the
// same arithmetic reordered. W4 groups take their parameters when their first column comes
// up, from the columns as updated by then; W8/FP8 rows take theirs from the original row.
#include <Eigen/Dense>

#include <algorithm>

#include "core/error.h"
#include "quant/quantizer.h"

namespace tf {
namespace {

using ColMat = Eigen::MatrixXf;  // column-major: a column of w is contiguous
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The upper Cholesky factor of the inverse of H = 2 x^T x / n (damped); columns whose input
// is always zero ("dead": H_jj = 0) get H_jj = 1, and `dead` marks them.
ColMat inverse_hessian_factor(CalibRows calib, int64_t k, double damp, std::vector<bool>& dead,
                              std::string_view name) {
  const Eigen::Map<const RowMat> X(calib.x, calib.n, k);
  ColMat H = (2.0f / float(calib.n)) * (X.transpose() * X);
  dead.assign(size_t(k), false);
  double mean_diag = 0;
  for (int64_t j = 0; j < k; ++j) {
    if (H(j, j) == 0.0f) {
      dead[size_t(j)] = true;
      H(j, j) = 1.0f;
    }
    mean_diag += H(j, j);
  }
  H.diagonal().array() += float(damp * mean_diag / double(k));
  Eigen::LLT<ColMat> llt(H);
  if (llt.info() != Eigen::Success) fail("{}: GPTQ's Hessian is not positive definite (raise the damping)", name);
  const ColMat Hinv = llt.solve(ColMat::Identity(k, k));
  Eigen::LLT<ColMat> llt_inv(Hinv);
  if (llt_inv.info() != Eigen::Success) fail("{}: GPTQ's inverse Hessian is not positive definite", name);
  return llt_inv.matrixU();
}

}  // namespace

QuantizedWeight quantize_gptq(const float* w, int64_t m, int64_t k, CalibRows calib, const QuantSpec& spec,
                              std::string_view name, const GptqParams& params) {
  check_quantizer_inputs(w, m, k, &calib, spec, name);
  std::vector<bool> dead;
  const ColMat U = inverse_hessian_factor(calib, k, params.damp, dead, name);
  ColMat W = Eigen::Map<const RowMat>(w, m, k);
  for (int64_t j = 0; j < k; ++j)
    if (dead[size_t(j)]) W.col(j).setZero();

  QuantizedWeight q = QuantizedWeight::zeros_like(spec.format, m, k, spec.group_size);
  const int64_t len = group_len(spec, k);
  const bool per_row = spec.format != DType::W4;
  std::vector<GroupParams> p(static_cast<size_t>(m));  // the current group's parameters, per row
  std::vector<float> row(static_cast<size_t>(len));
  auto take_params = [&](const ColMat& src, int64_t col0, int64_t group) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < len; ++j) row[size_t(j)] = src(i, col0 + j);
      p[size_t(i)] = checked_group_params(spec, row.data(), len, 1.0f, name, i, group);
      q.set_params(i, group, p[size_t(i)]);
    }
  };
  if (per_row) take_params(Eigen::Map<const RowMat>(w, m, k), 0, 0);

  // A block holds whole groups, so a group's columns are all current when it starts.
  const int64_t block = per_row ? std::max<int64_t>(1, params.block)
                                : std::max<int64_t>(params.block / len, 1) * len;
  Eigen::VectorXf err(m);
  for (int64_t b0 = 0; b0 < k; b0 += block) {
    const int64_t b1 = std::min(k, b0 + block), nb = b1 - b0;
    ColMat Err(m, nb);
    for (int64_t j = b0; j < b1; ++j) {
      if (!per_row && j % len == 0) take_params(W, j, j / len);
      const float d = U(j, j);
      for (int64_t i = 0; i < m; ++i) {
        const uint8_t c = quantize_value(spec.format, W(i, j), p[size_t(i)]);
        q.set_code(i, j, c);
        err(i) = (W(i, j) - dequantize_value(spec.format, c, p[size_t(i)])) / d;
      }
      // the rest of the block, at once
      W.middleCols(j + 1, b1 - j - 1).noalias() -= err * U.row(j).segment(j + 1, b1 - j - 1);
      Err.col(j - b0) = err;
    }
    // the columns after the block: the lazy batch update
    if (b1 < k) W.rightCols(k - b1).noalias() -= Err * U.block(b0, b1, nb, k - b1);
  }
  return q;
}

}  // namespace tf

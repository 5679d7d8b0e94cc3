// GPTQ-style error compensation (see quantizer.h), after the reference implementation's
// algorithm: H = 2 x^T x / n + damp * mean(diag H) * I; U = the upper Cholesky factor of
// H^-1; then column by column, q_j = Q(w_j), e_j = (w_j - q_j) / U_jj and the columns after j
// get w_l -= e_j * U_jl. Updates inside a block of columns are applied at once; the rest of
// the matrix gets the block's errors in one product (the "lazy batch" update), which is the
// same arithmetic reordered. W4 groups take their parameters when their first column comes
// up, from the columns as updated by then; W8/FP8 rows take theirs from the original row.
#include <Eigen/Dense>

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "quant/quantizer.h"

namespace tf {
namespace {

using ColMat = Eigen::MatrixXf;  // column-major: a column of w is contiguous
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The upper Cholesky factor of the inverse of H (damped by damp times its mean diagonal);
// columns whose input is always zero ("dead": H_jj = 0) get H_jj = 1, and `dead` marks them.
ColMat inverse_hessian_factor(ColMat H, double damp, std::vector<bool>& dead, std::string_view name) {
  const int64_t k = H.rows();
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


// Each group's parameters chosen once, before any column moves (GPTQ's "static groups"),
// from the original weights: with clip search, the ratio in {1, 0.95, ...} that least
// rounds the group's weights, each squared error weighted by its column's H_jj (the output
// error that column causes alone).
void static_group_params(const ColMat& W, const ColMat& H, const QuantSpec& spec, int64_t len, int n_clip,
                         QuantizedWeight& q, std::vector<std::vector<GroupParams>>& params, std::string_view name) {
  const int64_t m = W.rows(), k = W.cols();
  params.assign(size_t(k / len), std::vector<GroupParams>(size_t(m)));
  std::vector<float> row(static_cast<size_t>(len));
  for (int64_t g = 0; g < k / len; ++g)
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < len; ++j) row[size_t(j)] = W(i, g * len + j);
      double best = std::numeric_limits<double>::infinity();
      for (int c = 0; c < std::max(1, n_clip); ++c) {
        const GroupParams p = checked_group_params(spec, row.data(), len, 1.0f - 0.05f * float(c), name, i, g);
        double err = 0;
        for (int64_t j = 0; j < len; ++j) {
          const float d = row[size_t(j)] - dequantize_value(spec.format, quantize_value(spec.format, row[size_t(j)], p), p);
          err += double(H(g * len + j, g * len + j)) * d * d;
        }
        if (err < best) {
          best = err;
          params[size_t(g)][size_t(i)] = p;
        }
      }
      q.set_params(i, g, params[size_t(g)][size_t(i)]);
      params[size_t(g)][size_t(i)] = q.params(i, g);  // as stored (W4: the F16 scale)
    }
}

// The problem as GPTQ walks it: the columns in their order of quantization.
struct Walk {
  std::vector<int64_t> perm;  // column j of the walk is column perm[j] of the weight
  ColMat W;                   // W P (after dead columns were zeroed)
  ColMat U;                   // the upper Cholesky factor of (P^T H P)^-1, damped
};

// One GPTQ pass: codes of every column in the walk's order, each column's rounding error
// spread onto the columns after it. With `fixed` ([group][row]) the groups' parameters are
// those; otherwise (dynamic groups) each group takes its parameters when its first column
// comes up, from the columns as updated by then.
QuantizedWeight gptq_pass(const Walk& walk, const QuantSpec& spec, int64_t block_cols,
                          const std::vector<std::vector<GroupParams>>* fixed, std::string_view name) {
  const int64_t m = walk.W.rows(), k = walk.W.cols();
  ColMat W = walk.W;
  const ColMat& U = walk.U;
  const std::vector<int64_t>& perm = walk.perm;
  QuantizedWeight q = QuantizedWeight::zeros_like(spec.format, m, k, spec.group_size);
  const int64_t len = group_len(spec, k);
  if (fixed)
    for (int64_t g = 0; g < k / len; ++g)
      for (int64_t i = 0; i < m; ++i) q.set_params(i, g, (*fixed)[size_t(g)][size_t(i)]);

  std::vector<GroupParams> p(static_cast<size_t>(m));  // the current group's parameters, per row
  std::vector<float> row(static_cast<size_t>(len));
  auto take_params = [&](int64_t col0, int64_t group) {  // dynamic groups (in order, no act-order)
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < len; ++j) row[size_t(j)] = W(i, col0 + j);
      p[size_t(i)] = checked_group_params(spec, row.data(), len, 1.0f, name, i, group);
      q.set_params(i, group, p[size_t(i)]);
      p[size_t(i)] = q.params(i, group);
    }
  };

  // Without static groups a block holds whole groups, so a group's columns are all current
  // when it starts.
  const int64_t block = fixed ? std::max<int64_t>(1, block_cols) : std::max<int64_t>(block_cols / len, 1) * len;
  Eigen::VectorXf err(m);
  for (int64_t b0 = 0; b0 < k; b0 += block) {
    const int64_t b1 = std::min(k, b0 + block), nb = b1 - b0;
    ColMat Err(m, nb);
    for (int64_t j = b0; j < b1; ++j) {
      const int64_t col = perm[size_t(j)], group = col / len;
      if (!fixed && j % len == 0) take_params(j, group);
      const std::vector<GroupParams>& gp = fixed ? (*fixed)[size_t(group)] : p;
      const float d = U(j, j);
      for (int64_t i = 0; i < m; ++i) {
        const uint8_t c = quantize_value(spec.format, W(i, j), gp[size_t(i)]);
        q.set_code(i, col, c);
        err(i) = (W(i, j) - dequantize_value(spec.format, c, gp[size_t(i)])) / d;
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

std::vector<std::vector<GroupParams>> params_of(const QuantizedWeight& q) {
  std::vector<std::vector<GroupParams>> out(size_t(q.n_groups()), std::vector<GroupParams>(size_t(q.m)));
  for (int64_t g = 0; g < q.n_groups(); ++g)
    for (int64_t i = 0; i < q.m; ++i) out[size_t(g)][size_t(i)] = q.params(i, g);
  return out;
}

// Row i of `from` (codes and parameters) into `to`.
void copy_row(const QuantizedWeight& from, int64_t i, QuantizedWeight& to) {
  for (int64_t j = 0; j < from.k; ++j) to.set_code(i, j, from.code(i, j));
  for (int64_t g = 0; g < from.n_groups(); ++g) to.set_params(i, g, from.params(i, g));
}

// Refit rounds (GptqParams::refit_rounds): the refit of q's parameters, then GPTQ rerun on
// the refitted groups and refitted again, each row keeping its best round.
void run_refit_rounds(const Walk& walk, const RowMat& Wr, const ColMat& H, const QuantSpec& spec,
                      const GptqParams& params, QuantizedWeight& q, std::string_view name) {
  const int64_t m = q.m;
  std::vector<double> best = refit_w4_params(Wr.data(), H.data(), q, spec.symmetric);
  for (int r = 1; r < params.refit_rounds; ++r) {
    const std::vector<std::vector<GroupParams>> refitted = params_of(q);
    QuantizedWeight next = gptq_pass(walk, spec, params.block, &refitted, name);
    const std::vector<double> err = refit_w4_params(Wr.data(), H.data(), next, spec.symmetric);
    for (int64_t i = 0; i < m; ++i)
      if (err[size_t(i)] < best[size_t(i)]) {
        best[size_t(i)] = err[size_t(i)];
        copy_row(next, i, q);
      }
  }
}

}  // namespace

QuantizedWeight quantize_gptq(const float* w, int64_t m, int64_t k, CalibRows calib, const QuantSpec& spec,
                              std::string_view name, const GptqParams& params) {
  check_quantizer_inputs(w, m, k, &calib, spec, name);
  const Eigen::Map<const RowMat> X(calib.x, calib.n, k);
  const ColMat H = (2.0f / float(calib.n)) * (X.transpose() * X);
  ColMat W = Eigen::Map<const RowMat>(w, m, k);
  for (int64_t j = 0; j < k; ++j)
    if (H(j, j) == 0.0f) W.col(j).setZero();  // a dead input: its weights do nothing

  const int64_t len = group_len(spec, k);
  const bool static_groups = params.static_groups || params.act_order || spec.format != DType::W4;
  std::vector<std::vector<GroupParams>> fixed;  // [group][row], static groups
  if (static_groups) {
    QuantizedWeight scratch = QuantizedWeight::zeros_like(spec.format, m, k, spec.group_size);
    static_group_params(W, H, spec, len, params.n_clip, scratch, fixed, name);
  }

  // Act-order: columns by decreasing H_jj, so the inputs of the largest energy are rounded
  // first, while the most columns remain to absorb their error. The layout keeps groups
  // contiguous in the original order, so the groups' parameters are the static ones.
  Walk walk;
  walk.perm.resize(size_t(k));
  for (int64_t j = 0; j < k; ++j) walk.perm[size_t(j)] = j;
  if (params.act_order)
    std::stable_sort(walk.perm.begin(), walk.perm.end(), [&](int64_t a, int64_t b) { return H(a, a) > H(b, b); });
  const Eigen::PermutationMatrix<Eigen::Dynamic, Eigen::Dynamic, int64_t> P(
      Eigen::Map<const Eigen::Matrix<int64_t, Eigen::Dynamic, 1>>(walk.perm.data(), k));
  // W P and P^T H P: column j of the permuted problem is column perm[j] of the original.
  walk.W = W * P;
  std::vector<bool> dead;
  walk.U = inverse_hessian_factor(P.transpose() * H * P, params.damp, dead, name);

  QuantizedWeight q = gptq_pass(walk, spec, params.block, static_groups ? &fixed : nullptr, name);
  if (spec.format != DType::W4) return q;
  // The refit's target: the weights as given (dead columns zeroed), row-major.
  const RowMat Wr = W;
  if (params.refit_rounds > 0) run_refit_rounds(walk, Wr, H, spec, params, q, name);
  if (params.cd_rounds > 0) {
    ColMat Hc = H;
    Hc.diagonal().array() += float(params.cd_damp * double(H.diagonal().mean()));
    for (int r = 0; r < params.cd_rounds; ++r) {
      descend_w4_codes(Wr.data(), Hc.data(), q, 8);
      refit_w4_params(Wr.data(), Hc.data(), q, spec.symmetric);
    }
  }
  return q;
}

}  // namespace tf

// AWQ-style activation-aware quantization (see quantizer.h): a grid search over the exponent
// of per-input-channel scales, then a per-group search over clipping ratios.
#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "quant/quantizer.h"

namespace tf {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// RTN of ws [m, k] dequantized, with the columns divided by s again: the weight the layer
// effectively applies to x.
RowMat rtn_effective(const RowMat& ws, const std::vector<float>& s, const QuantSpec& spec, std::string_view name) {
  const int64_t m = ws.rows(), k = ws.cols();
  const QuantizedWeight q = quantize_rtn(ws.data(), m, k, spec, name);
  RowMat out(m, k);
  for (int64_t i = 0; i < m; ++i) {
    dequantize_row(q.view(), i, out.data() + i * k);
    for (int64_t j = 0; j < k; ++j) out(i, j) /= s[size_t(j)];
  }
  return out;
}

// Per-channel scales for exponent alpha: mean|x|^alpha, normalised so that max * min = 1
// (AWQ's normalisation: the scales straddle 1).
std::vector<float> scales_for(const std::vector<float>& x_mean, float alpha) {
  std::vector<float> s(x_mean.size());
  float lo = std::numeric_limits<float>::max(), hi = 0.0f;
  for (size_t j = 0; j < s.size(); ++j) {
    s[j] = std::pow(std::max(x_mean[j], 1e-4f), alpha);
    lo = std::min(lo, s[j]);
    hi = std::max(hi, s[j]);
  }
  const float norm = std::sqrt(hi * lo);
  for (float& v : s) v /= norm;
  return s;
}

}  // namespace

AwqResult quantize_awq(const float* w, int64_t m, int64_t k, CalibRows calib, const QuantSpec& spec,
                       std::string_view name, const AwqParams& params) {
  check_quantizer_inputs(w, m, k, &calib, spec, name);
  const Eigen::Map<const RowMat> W(w, m, k), X(calib.x, calib.n, k);
  const RowMat Y = X * W.transpose();  // [n, m], the layer's output to preserve
  std::vector<float> x_mean(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) x_mean[size_t(j)] = X.col(j).cwiseAbs().mean();

  // 1. the exponent: least ||Y - X W_eff^T|| over the grid (alpha = 0 is plain RTN).
  AwqResult r;
  double best = std::numeric_limits<double>::infinity();
  for (int g = 0; g < params.n_grid; ++g) {
    const float alpha = float(g) / float(params.n_grid);
    const std::vector<float> s = scales_for(x_mean, alpha);
    RowMat ws = W;
    for (int64_t j = 0; j < k; ++j) ws.col(j) *= s[size_t(j)];
    const double err = (Y - X * rtn_effective(ws, s, spec, name).transpose()).cast<double>().squaredNorm();
    if (err < best) {
      best = err;
      r.alpha = alpha;
      r.input_scales = s;
    }
  }

  // 2. each group's clipping ratio: least error of the group's share of the product,
  // ||X_g (w_g - Q_c(w_g))^T|| over the first clip_rows calibration rows (of x / s).
  const std::vector<float>& s = r.input_scales;
  RowMat ws = W, xs = X.topRows(std::min(calib.n, params.clip_rows));
  for (int64_t j = 0; j < k; ++j) {
    ws.col(j) *= s[size_t(j)];
    xs.col(j) /= s[size_t(j)];
  }
  r.weight = QuantizedWeight::zeros_like(spec.format, m, k, spec.group_size);
  const int64_t len = group_len(spec, k);
  for (int64_t g = 0; g < k / len; ++g) {
    const auto xg = xs.middleCols(g * len, len);
    std::vector<double> best_err(size_t(m), std::numeric_limits<double>::infinity());
    std::vector<float> best_clip(size_t(m), 1.0f);
    RowMat diff(m, len);
    for (int c = 0; c < std::max(1, params.n_clip); ++c) {
      const float clip = 1.0f - 0.05f * float(c);
      for (int64_t i = 0; i < m; ++i) {
        const float* v = ws.data() + i * k + g * len;
        const GroupParams p = checked_group_params(spec, v, len, clip, name, i, g);
        for (int64_t j = 0; j < len; ++j)
          diff(i, j) = v[j] - dequantize_value(spec.format, quantize_value(spec.format, v[j], p), p);
      }
      const Eigen::VectorXf err = (xg * diff.transpose()).colwise().squaredNorm();  // [m]
      for (int64_t i = 0; i < m; ++i)
        if (err(i) < best_err[size_t(i)]) {
          best_err[size_t(i)] = err(i);
          best_clip[size_t(i)] = clip;
        }
    }
    for (int64_t i = 0; i < m; ++i) {
      const float* v = ws.data() + i * k + g * len;
      const GroupParams p = checked_group_params(spec, v, len, best_clip[size_t(i)], name, i, g);
      r.weight.set_params(i, g, p);
      for (int64_t j = 0; j < len; ++j) r.weight.set_code(i, g * len + j, quantize_value(spec.format, v[j], p));
    }
  }
  return r;
}

}  // namespace tf

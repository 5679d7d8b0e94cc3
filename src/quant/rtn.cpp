// Round to nearest (the baseline quantizer) and the output-error measure every quantizer is
// judged by.
#include <Eigen/Dense>

#include "core/error.h"
#include "quant/quantizer.h"

namespace tf {

void check_quantizer_inputs(const float* w, int64_t m, int64_t k, const CalibRows* calib, const QuantSpec& spec,
                            std::string_view name) {
  check_quant_spec(spec, k, name);
  check_finite(w, m, k, name);
  if (!calib) return;
  if (calib->n <= 0 || !calib->x) fail("{}: no calibration rows", name);
  check_finite(calib->x, calib->n, k, name);
}

QuantizedWeight quantize_rtn(const float* w, int64_t m, int64_t k, const QuantSpec& spec, std::string_view name) {
  check_quantizer_inputs(w, m, k, nullptr, spec, name);
  QuantizedWeight q = QuantizedWeight::zeros_like(spec.format, m, k, spec.group_size);
  const int64_t len = group_len(spec, k);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t g = 0; g < k / len; ++g) {
      const float* v = w + i * k + g * len;
      const GroupParams p = checked_group_params(spec, v, len, 1.0f, name, i, g);
      q.set_params(i, g, p);
      for (int64_t j = 0; j < len; ++j) q.set_code(i, g * len + j, quantize_value(spec.format, v[j], p));
    }
  }
  return q;
}

double relative_output_error(const float* a, const float* b, int64_t m, int64_t k, CalibRows calib) {
  using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const RowMat> A(a, m, k), B(b, m, k), X(calib.x, calib.n, k);
  const RowMat D = A - B;
  const double num = (X * D.transpose()).cast<double>().squaredNorm();
  const double den = (X * A.transpose()).cast<double>().squaredNorm();
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace tf

// The output-error measure every quantizer is judged by (quantizer.h).
#include <Eigen/Dense>

#include <cmath>

#include "quant/quantizer.h"

namespace tf {

double relative_output_error(const float* a, const float* b, int64_t m, int64_t k, CalibRows calib) {
  using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const RowMat> A(a, m, k), B(b, m, k), X(calib.x, calib.n, k);
  const RowMat D = A - B;
  const double num = (X * D.transpose()).cast<double>().squaredNorm();
  const double den = (X * A.transpose()).cast<double>().squaredNorm();
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace tf

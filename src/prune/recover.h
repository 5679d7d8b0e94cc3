// A projection (o_proj or down_proj, y = x W^T + b) with some of its input columns removed,
// and how its output is recovered without retraining, from its input rows X [n, k] on
// calibration text. With K the kept columns and R the removed ones:
//
//   None: W[:, K], b as it was.
//   Bias: W[:, K] and b + W[:, R] mean(X[:, R]): the removed columns' mean contribution
//         (FLAP's bias compensation); exact where those inputs were constant.
//   Lsq:  W' and b' minimising ||X W^T + b - (X[:, K] W'^T + b')||^2 over the rows, plus
//         lambda ||W' - W[:, K]||^2 (a ridge toward the original columns, lambda = damp times
//         the mean diagonal of the kept inputs' covariance, so few rows cannot run away). With
//         centred inputs Xc and their covariance C = Xc^T Xc:
//           (C[K, K] + lambda I) W'^T = C[K, :] W^T + lambda W[:, K]^T
//           b' = b + W mean(X) - W' mean(X[:, K])
//         so the intercept absorbs the mean as Bias does, and W' the rest of what the
//         removed columns carried that the kept ones can predict.
// With nothing removed, every recovery returns W and b unchanged, bit for bit.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace tf {

enum class Recovery : uint8_t { None, Bias, Lsq };
std::string_view recovery_name(Recovery r);                           // "none", "bias", "lsq"
Recovery parse_recovery(std::string_view name, std::string_view flag);  // throws tf::Error naming flag

struct ProjectionRows {
  const float* w = nullptr;     // [m, k]
  int64_t m = 0, k = 0;
  const float* bias = nullptr;  // [m], or nullptr for none
  const float* x = nullptr;     // [n, k] calibration input rows
  int64_t n = 0;
};

struct ShrunkProjection {
  std::vector<float> w;     // [m, keep.size()]
  std::vector<float> bias;  // [m]; empty when there was none and the recovery adds none
};

// The input rows' column means and centred covariance, what Bias and Lsq read of X: one
// pass over the rows, then any number of refits of the same projection for the cost of a
// k x k solve each.
struct InputStats {
  int64_t k = 0;
  std::vector<double> mean;  // [k]
  std::vector<double> cov;   // [k, k]: Xc^T Xc, Xc the rows less their column means
};
InputStats input_stats(const float* x, int64_t n, int64_t k);

// With `stats` (input_stats of p.x), p.x and p.n are not read.
ShrunkProjection shrink_projection(const ProjectionRows& p, const std::vector<int32_t>& keep, Recovery r,
                                   double damp = 0.01, const InputStats* stats = nullptr);

}  // namespace tf

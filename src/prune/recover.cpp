#include "prune/recover.h"

#include <Eigen/Cholesky>
#include <Eigen/Core>

#include "core/error.h"

namespace tf {

namespace {

using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

ShrunkProjection sliced(const ProjectionRows& p, const std::vector<int32_t>& keep) {
  ShrunkProjection out;
  const size_t kk = keep.size();
  out.w.resize(size_t(p.m) * kk);
  for (int64_t i = 0; i < p.m; ++i)
    for (size_t j = 0; j < kk; ++j) out.w[size_t(i) * kk + j] = p.w[i * p.k + keep[j]];
  if (p.bias) out.bias.assign(p.bias, p.bias + p.m);
  return out;
}

// b + W[:, cols] mean[cols] for the columns not in `keep`.
void add_removed_mean(const ProjectionRows& p, const std::vector<int32_t>& keep, const std::vector<double>& mean,
                      ShrunkProjection& out) {
  std::vector<bool> kept(size_t(p.k), false);
  for (int32_t c : keep) kept[size_t(c)] = true;
  if (out.bias.empty()) out.bias.assign(size_t(p.m), 0.0f);
  for (int64_t i = 0; i < p.m; ++i) {
    double s = out.bias[size_t(i)];
    for (int64_t j = 0; j < p.k; ++j)
      if (!kept[size_t(j)]) s += double(p.w[i * p.k + j]) * mean[size_t(j)];
    out.bias[size_t(i)] = float(s);
  }
}

void refit(const ProjectionRows& p, const std::vector<int32_t>& keep, const InputStats& st, double damp,
           ShrunkProjection& out) {
  const int64_t kk = int64_t(keep.size());
  const Eigen::Map<const MatD> c(st.cov.data(), p.k, p.k);
  const std::vector<double>& mean = st.mean;
  MatD w(p.m, p.k);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.k; ++j) w(i, j) = p.w[i * p.k + j];
  MatD a(kk, kk), ck(kk, p.k);
  for (int64_t r = 0; r < kk; ++r) {
    ck.row(r) = c.row(keep[size_t(r)]);
    for (int64_t j = 0; j < kk; ++j) a(r, j) = c(keep[size_t(r)], keep[size_t(j)]);  // C[K, K]
  }
  MatD b = ck * w.transpose();  // C[K, :] W^T  [kk, m]
  const double lambda = damp * std::max(a.diagonal().mean(), 1e-12);
  a.diagonal().array() += lambda;
  for (int64_t j = 0; j < kk; ++j) b.row(j) += lambda * w.col(keep[size_t(j)]).transpose();
  const Eigen::LLT<MatD> llt(a);
  if (llt.info() != Eigen::Success) fail("least-squares refit: the kept inputs' covariance is not positive definite");
  const MatD wt = llt.solve(b);  // W'^T [kk, m]
  for (int64_t i = 0; i < p.m; ++i) {
    double s = p.bias ? p.bias[i] : 0.0;
    for (int64_t j = 0; j < p.k; ++j) s += w(i, j) * mean[size_t(j)];
    for (int64_t j = 0; j < kk; ++j) {
      out.w[size_t(i * kk + j)] = float(wt(j, i));
      s -= wt(j, i) * mean[size_t(keep[size_t(j)])];
    }
    if (out.bias.empty()) out.bias.assign(size_t(p.m), 0.0f);
    out.bias[size_t(i)] = float(s);
  }
}

}  // namespace

std::string_view recovery_name(Recovery r) {
  return r == Recovery::None ? "none" : r == Recovery::Bias ? "bias" : "lsq";
}

Recovery parse_recovery(std::string_view name, std::string_view flag) {
  if (name == "none") return Recovery::None;
  if (name == "bias") return Recovery::Bias;
  if (name == "lsq") return Recovery::Lsq;
  fail("{}: unknown recovery '{}' (expected none, bias or lsq)", flag, name);
}

InputStats input_stats(const float* x, int64_t n, int64_t k) {
  InputStats st{.k = k, .mean = std::vector<double>(size_t(k), 0.0)};
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < k; ++j) st.mean[size_t(j)] += x[r * k + j];
  for (double& v : st.mean) v /= double(std::max<int64_t>(n, 1));
  MatD xc(n, k);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < k; ++j) xc(r, j) = double(x[r * k + j]) - st.mean[size_t(j)];
  st.cov.resize(size_t(k * k));
  Eigen::Map<MatD> c(st.cov.data(), k, k);
  c.setZero();
  c.selfadjointView<Eigen::Lower>().rankUpdate(xc.transpose());
  c.triangularView<Eigen::StrictlyUpper>() = c.transpose();
  return st;
}

ShrunkProjection shrink_projection(const ProjectionRows& p, const std::vector<int32_t>& keep, Recovery r, double damp,
                                   const InputStats* stats) {
  TF_ASSERT(int64_t(keep.size()) <= p.k, "shrink_projection: {} kept of {} columns", keep.size(), p.k);
  ShrunkProjection out = sliced(p, keep);
  if (int64_t(keep.size()) == p.k || r == Recovery::None) return out;
  InputStats own;
  if (!stats) {
    if (p.n < 1) fail("bias or least-squares recovery needs calibration rows");
    own = input_stats(p.x, p.n, p.k);
    stats = &own;
  }
  TF_ASSERT(stats->k == p.k, "shrink_projection: input stats of {} columns for {}", stats->k, p.k);
  if (r == Recovery::Bias) add_removed_mean(p, keep, stats->mean, out);
  else refit(p, keep, *stats, damp, out);
  return out;
}

}  // namespace tf

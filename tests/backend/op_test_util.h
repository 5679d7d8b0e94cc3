// Helpers shared by the backend op tests: deterministic random tensors, host tensors in a
// storage dtype, moving data to and from a backend, and the error metrics with which a
// backend under test is compared against the reference backend.
//
// Every op test follows ggml's test-backend-ops pattern: the same random inputs go to the
// reference backend and to the backend under test, and the outputs are compared with a
// relative L2 error ||got - want|| / ||want|| (matmul: relative to each output's natural
// scale, see scaled_l2) against a tolerance stated, with its reasoning, next to each test.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numbers>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/host_backend.h"

namespace tf {
// Lets gtest print a DType parameter by name (in test names and failure messages).
inline void PrintTo(DType t, std::ostream* os) { *os << dtype_name(t); }
}  // namespace tf

namespace tf::test {

// ---- random numbers -----------------------------------------------------------------------

// mt19937_64 is specified bit-exactly by the standard but std::normal_distribution and
// std::shuffle are not, so the normal samples (Box-Muller) and the shuffle are done here: a
// seed then means the same numbers with any standard library.
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  double uniform() { return double(gen_() >> 11) * 0x1.0p-53; }  // [0, 1)
  // Uniform integer in [lo, hi] (the modulo bias is irrelevant for test data).
  int64_t uniform_int(int64_t lo, int64_t hi) { return lo + int64_t(gen_() % uint64_t(hi - lo + 1)); }
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = uniform();
    while (u1 == 0.0) u1 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * std::numbers::pi * uniform();
    spare_ = r * std::sin(a);
    has_spare_ = true;
    return r * std::cos(a);
  }
  template <typename T>
  void shuffle(std::vector<T>& v) {  // Fisher-Yates
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[size_t(uniform_int(0, int64_t(i) - 1))]);
  }

 private:
  std::mt19937_64 gen_;
  double spare_ = 0;
  bool has_spare_ = false;
};

// n samples of N(0, scale^2), as F32.
inline std::vector<float> randn(Rng& rng, int64_t n, double scale = 1.0) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = float(rng.normal() * scale);
  return v;
}

// Seed from a test's parameters, so each shape of a sweep gets its own numbers.
inline uint64_t seed_of(std::initializer_list<int64_t> parts) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (int64_t p : parts) h = (h ^ uint64_t(p)) * 0x100000001b3ull + 0x632be59bd9b4e019ull;
  return h;
}

// ---- host tensors ---------------------------------------------------------------------------

// A host tensor in a storage dtype (F32/BF16/F16), made from F32 values rounded to that dtype.
// Its view() is what a checkpoint loader would hand to Backend::upload.
struct HostTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  TensorView view() const {
    TensorView v;
    v.data = const_cast<uint8_t*>(bytes.data());
    v.dtype = dtype;
    for (int64_t s : shape) v.shape[size_t(v.n_dims++)] = s;
    return v;
  }
  // The stored values widened back to F32 (exact).
  std::vector<float> to_f32() const {
    std::vector<float> out(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) out[size_t(i)] = load_f32(bytes.data(), dtype, i);
    return out;
  }
};

inline HostTensor make_host(const std::vector<float>& values, DType dtype, std::vector<int64_t> shape) {
  HostTensor t{dtype, std::move(shape), {}};
  EXPECT_EQ(int64_t(values.size()), t.numel());
  t.bytes.resize(size_t(t.numel()) * dtype_size(dtype));
  for (int64_t i = 0; i < t.numel(); ++i) store_f32(t.bytes.data(), dtype, i, values[size_t(i)]);
  return t;
}

// ---- backends -------------------------------------------------------------------------------

struct BackendPair {
  std::unique_ptr<Backend> ref = make_backend(BackendKind::Ref);
  std::unique_ptr<Backend> cpu = make_backend(BackendKind::Cpu);
};

inline HostBackend& as_host(Backend& be) {
  auto* h = dynamic_cast<HostBackend*>(&be);
  EXPECT_NE(h, nullptr) << be.name() << " is not a host backend";
  return *h;
}

// An F32 activation on `be` holding `values`.
inline TensorView to_device(Backend& be, const std::vector<float>& values, int64_t rows, int64_t cols) {
  TensorView t = be.alloc(DType::F32, {rows, cols});
  EXPECT_EQ(int64_t(values.size()), t.numel());
  be.copy_from_host(values.data(), t);
  return t;
}

// A vector as a 1-D F32 tensor on `be`.
inline TensorView upload_f32(Backend& be, const std::vector<float>& v) {
  TensorView t = be.alloc(DType::F32, {int64_t(v.size())});
  be.copy_from_host(v.data(), t);
  return t;
}

// The frequencies of a rotation of n_rot dims (base 10000), divided by `factor`.
inline std::vector<float> rope_freqs(int64_t n_rot, double factor) {
  std::vector<float> f(size_t(n_rot / 2));
  for (int64_t i = 0; i < n_rot / 2; ++i)
    f[size_t(i)] = float(std::pow(10000.0, -2.0 * double(i) / double(n_rot)) / factor);
  return f;
}

inline std::vector<float> to_host_f32(Backend& be, const TensorView& t) {
  EXPECT_EQ(t.dtype, DType::F32);
  std::vector<float> out(size_t(t.numel()));
  be.copy_to_host(t, out.data());
  return out;
}

inline std::vector<uint8_t> to_host_bytes(Backend& be, const TensorView& t) {
  std::vector<uint8_t> out(t.nbytes());
  be.copy_to_host(t, out.data());
  return out;
}

// An F32 output [rows, cols] followed in memory by one guard row, all of it NaN with a
// recognisable payload before the op runs: an element the op fails to write stays NaN (and
// fails every comparison), and an op that writes past its output (a tail loop gone wrong)
// changes the guard.
class GuardedOut {
 public:
  GuardedOut(Backend& be, int64_t rows, int64_t cols) : be_(be), rows_(rows), cols_(cols) {
    buf_ = be.alloc(DType::F32, {rows + 1, cols});
    std::vector<float> init(size_t((rows + 1) * cols), poison());
    be.copy_from_host(init.data(), buf_);
    view_ = make_view(buf_.data, DType::F32, {rows, cols});
  }
  const TensorView& view() const { return view_; }
  std::vector<float> values() const {
    std::vector<float> all(size_t((rows_ + 1) * cols_));
    be_.copy_to_host(buf_, all.data());
    all.resize(size_t(rows_ * cols_));
    return all;
  }
  bool guard_intact() const {
    std::vector<float> all(size_t((rows_ + 1) * cols_));
    be_.copy_to_host(buf_, all.data());
    const float p = poison();
    return std::memcmp(all.data() + rows_ * cols_, std::vector<float>(size_t(cols_), p).data(),
                       size_t(cols_) * 4) == 0;
  }
  static float poison() {
    const uint32_t bits = 0x7fc0beefu;  // quiet NaN with a payload
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }

 private:
  Backend& be_;
  int64_t rows_, cols_;
  TensorView buf_, view_;
};

// ---- error metrics --------------------------------------------------------------------------

struct ErrorStats {
  double rel_l2 = 0;        // ||got - want|| / ||want|| (absolute L2 when want == 0)
  double max_abs = 0;       // max |got - want|
  int64_t argmax = -1;      // where max_abs occurs
  int64_t n_nonfinite = 0;  // elements where got or want is not finite (must be 0)
};

inline ErrorStats error_stats(const std::vector<float>& got, const std::vector<float>& want) {
  ErrorStats s;
  if (got.size() != want.size()) {
    s.rel_l2 = s.max_abs = std::numeric_limits<double>::infinity();
    return s;
  }
  double diff2 = 0, want2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) {
      ++s.n_nonfinite;
      continue;
    }
    const double d = double(got[i]) - double(want[i]);
    diff2 += d * d;
    want2 += double(want[i]) * want[i];
    if (std::abs(d) > s.max_abs) {
      s.max_abs = std::abs(d);
      s.argmax = int64_t(i);
    }
  }
  s.rel_l2 = want2 > 0 ? std::sqrt(diff2 / want2) : std::sqrt(diff2);
  return s;
}

// got ~ want within a relative L2 tolerance, every element finite on both sides.
inline ::testing::AssertionResult close_rel_l2(const std::vector<float>& got, const std::vector<float>& want,
                                               double tol) {
  const ErrorStats s = error_stats(got, want);
  if (got.size() == want.size() && s.n_nonfinite == 0 && s.rel_l2 <= tol)
    return ::testing::AssertionSuccess();
  auto r = ::testing::AssertionFailure();
  if (got.size() != want.size()) return r << "size " << got.size() << " != " << want.size();
  r << "rel L2 error " << s.rel_l2 << " (tolerance " << tol << "), max abs error " << s.max_abs;
  if (s.argmax >= 0)
    r << " at [" << s.argmax << "] got " << got[size_t(s.argmax)] << " want " << want[size_t(s.argmax)];
  if (s.n_nonfinite) r << ", " << s.n_nonfinite << " non-finite elements";
  return r;
}

// The natural scale of each output [r, j] of out = x @ w^T + bias (x [n, k], w [m, k],
// bias [m] or empty): sqrt(sum_i (x[r, i] * w[j, i])^2 + bias[j]^2), in double.
inline std::vector<double> matmul_output_scale(const std::vector<float>& x, const std::vector<float>& w,
                                               const std::vector<float>& bias, int64_t n, int64_t k, int64_t m) {
  std::vector<double> scale(size_t(n * m));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < m; ++j) {
      double ss = bias.empty() ? 0.0 : double(bias[size_t(j)]) * bias[size_t(j)];
      for (int64_t i = 0; i < k; ++i) {
        const double p = double(x[size_t(r * k + i)]) * w[size_t(j * k + i)];
        ss += p * p;
      }
      scale[size_t(r * m + j)] = std::sqrt(ss);
    }
  }
  return scale;
}

// ||got - want|| / ||scale||, where scale[i] is the natural magnitude of element i. For a sum
// of terms (a dot product) that is the root-sum-square of the terms: the size the sum has
// for random-sign terms and the size its rounding error scales with, which unlike |want|
// does not vanish when the terms happen to cancel.
inline double scaled_l2(const std::vector<float>& got, const std::vector<float>& want,
                        const std::vector<double>& scale) {
  double diff2 = 0, scale2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = double(got[i]) - double(want[i]);
    diff2 += d * d;
    scale2 += scale[i] * scale[i];
  }
  return std::sqrt(diff2 / scale2);
}

inline ::testing::AssertionResult close_scaled_l2(const std::vector<float>& got,
                                                  const std::vector<float>& want,
                                                  const std::vector<double>& scale, double tol) {
  if (got.size() != want.size() || scale.size() != want.size())
    return ::testing::AssertionFailure()
           << "sizes " << got.size() << ", " << want.size() << ", " << scale.size();
  const ErrorStats s = error_stats(got, want);
  const double err = scaled_l2(got, want, scale);
  if (s.n_nonfinite == 0 && err <= tol) return ::testing::AssertionSuccess();
  auto r = ::testing::AssertionFailure();
  r << "scaled L2 error " << err << " (tolerance " << tol << "), max abs error " << s.max_abs;
  if (s.argmax >= 0)
    r << " at [" << s.argmax << "] got " << got[size_t(s.argmax)] << " want " << want[size_t(s.argmax)]
      << " scale " << scale[size_t(s.argmax)];
  if (s.n_nonfinite) r << ", " << s.n_nonfinite << " non-finite elements";
  return r;
}

// Bitwise equality of two F32 arrays (for ops that only copy or do one IEEE operation).
inline ::testing::AssertionResult bitwise_equal(const std::vector<float>& got,
                                                const std::vector<float>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], 4) != 0)
      return ::testing::AssertionFailure()
             << "first difference at [" << i << "]: got " << got[i] << " want " << want[i];
  }
  return ::testing::AssertionSuccess();
}

// Spacing of `dtype` values at magnitude |x| (one unit in the last place).
inline double ulp_of(DType dtype, double x) {
  const int mant_bits = dtype == DType::BF16 ? 7 : dtype == DType::F16 ? 10 : 23;
  const int min_exp = dtype == DType::F16 ? -14 : -126;
  int e = 0;
  std::frexp(std::abs(x), &e);  // |x| in [2^(e-1), 2^e)
  return std::ldexp(1.0, std::max(e - 1, min_exp) - mant_bits);
}

}  // namespace tf::test

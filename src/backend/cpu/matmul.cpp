// CPU GEMM / GEMV: out[n, m] = x[n, k] @ w[m, k]^T (+ bias).
//
// Weights are [out, in] as checkpoints store them, so every output is a dot product of two
// contiguous rows. Threads split the output features (rows of w) into blocks of kRows; a
// thread widens its kRows weight rows to F32 once into a small buffer (L1/L2 resident), then
// runs a kTok x kRows register-tiled micro-kernel over all tokens. Each weight byte is read
// from memory once per call whatever n is, which is what decode (n = batch) needs; prefill
// reuses the widened rows across all its tokens.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/shape_checks.h"

namespace tf {
namespace {

#if defined(__AVX512F__)
constexpr int kLanes = 16;
#else
constexpr int kLanes = 8;
#endif
typedef float VecF __attribute__((vector_size(kLanes * 4)));

constexpr int kRows = 4;  // weight rows per block
constexpr int kTok = 4;   // tokens per micro-tile

inline VecF load_vec(const float* p) {
  VecF v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline float hsum(VecF v) {
  float s = 0;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}

// acc[t][r] = sum_i x[t][i] * w[r][i] for NT tokens and kRows rows over k (k_vec multiple of lanes).
template <int NT>
inline void micro_tile(const float* x, int64_t ldx, const float* wbuf, int64_t k, float* dst,
                       int64_t ldo, const float* bias_blk, int n_rows) {
  VecF acc[NT][kRows];
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < kRows; ++r) acc[t][r] = VecF{};
  const int64_t k_vec = k / kLanes * kLanes;
  for (int64_t i = 0; i < k_vec; i += kLanes) {
    VecF wv[kRows];
    for (int r = 0; r < kRows; ++r) wv[r] = load_vec(wbuf + r * k + i);
    for (int t = 0; t < NT; ++t) {
      const VecF xv = load_vec(x + t * ldx + i);
      for (int r = 0; r < kRows; ++r) acc[t][r] += xv * wv[r];
    }
  }
  for (int t = 0; t < NT; ++t) {
    for (int r = 0; r < n_rows; ++r) {
      float s = hsum(acc[t][r]);
      for (int64_t i = k_vec; i < k; ++i) s += x[t * ldx + i] * wbuf[r * k + i];
      dst[t * ldo + r] = s + (bias_blk ? bias_blk[r] : 0.0f);
    }
  }
}

}  // namespace

void cpu_matmul(const TensorView& x, const TensorView& w, const TensorView& bias,
                const TensorView& out) {
  check_matmul(x, w, bias, out);
  const int64_t n = x.shape[0], k = x.shape[1], m = w.shape[0];
  const int64_t n_blocks = (m + kRows - 1) / kRows;
  std::vector<float> bias_f32;
  if (bias.data) {
    bias_f32.resize(size_t(m));
    load_row_f32(bias.data, bias.dtype, 0, m, bias_f32.data());
  }
  const float* xp = x.as<float>();
  float* op = out.as<float>();

#pragma omp parallel
  {
    std::vector<float> wbuf(size_t(kRows * k));
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < n_blocks; ++blk) {
      const int64_t r0 = blk * kRows;
      const int rows = int(std::min<int64_t>(kRows, m - r0));
      for (int r = 0; r < rows; ++r) load_row_f32(w.data, w.dtype, (r0 + r) * k, k, wbuf.data() + r * k);
      for (int r = rows; r < kRows; ++r) std::fill_n(wbuf.data() + r * k, k, 0.0f);
      const float* bias_blk = bias.data ? bias_f32.data() + r0 : nullptr;
      int64_t t = 0;
      for (; t + kTok <= n; t += kTok)
        micro_tile<kTok>(xp + t * k, k, wbuf.data(), k, op + t * m + r0, m, bias_blk, rows);
      for (; t < n; ++t) micro_tile<1>(xp + t * k, k, wbuf.data(), k, op + t * m + r0, m, bias_blk, rows);
    }
  }
}

void CpuBackend::matmul(const TensorView& x, const TensorView& w, const TensorView& bias,
                        const TensorView& out) {
  cpu_matmul(x, w, bias, out);
}

}  // namespace tf

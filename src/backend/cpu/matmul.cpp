// CPU GEMM / GEMV: out[n, m] = x[n, k] @ w[m, k]^T (+ bias).
//
// Weights are [out, in] as checkpoints store them, so every output is a dot product of two
// contiguous rows. Threads split the output features (rows of w) into blocks of kRows, so
// each weight byte is read from memory once per call whatever n is (decode at batch n).
//  - Few tokens (decode): the micro-kernel widens BF16/F16 weights to F32 in registers as
//    it streams them; nothing is written back, the loop runs at memory speed.
//  - Many tokens (prefill): a thread widens its kRows weight rows once into a small F32
//    buffer (L1/L2 resident), then runs the kTok x kRows register tile over all tokens.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm_tile.h"
#include "backend/shape_checks.h"

namespace tf {
namespace {

using namespace cpu_tile;

typedef uint16_t VecH __attribute__((vector_size(kLanes * 2)));
typedef uint32_t VecU __attribute__((vector_size(kLanes * 4)));
typedef _Float16 VecF16 __attribute__((vector_size(kLanes * 2)));

// kLanes weights of type W at p, widened to F32.
template <typename W>
inline VecF load_w(const W* p) {
  if constexpr (std::is_same_v<W, float>) {
    return load_vec(p);
  } else if constexpr (std::is_same_v<W, uint16_t>) {  // bfloat16: the high half of a float
    VecH h;
    std::memcpy(&h, p, sizeof(h));
    const VecU u = __builtin_convertvector(h, VecU) << 16;
    VecF f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  } else {
    VecF16 h;
    std::memcpy(&h, p, sizeof(h));
    return __builtin_convertvector(h, VecF);
  }
}
template <typename W>
inline float to_f32(W v) {
  if constexpr (std::is_same_v<W, float>) return v;
  else if constexpr (std::is_same_v<W, uint16_t>) return bf16_to_f32(v);
  else return float(v);
}

// Decode path: NT tokens (NT <= kTok) against kRows weight rows read in their stored type.
template <int NT, typename W>
inline void direct_tile(const float* x, int64_t ldx, const W* w, int64_t k, float* dst, int64_t ldo,
                        const float* bias_blk, int n_rows) {
  VecF acc[NT][kRows];
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < kRows; ++r) acc[t][r] = VecF{};
  const int64_t k_vec = k / kLanes * kLanes;
  const int full = n_rows;  // rows past n_rows are not touched
  for (int64_t i = 0; i < k_vec; i += kLanes) {
    VecF wv[kRows];
    for (int r = 0; r < kRows; ++r) wv[r] = r < full ? load_w(w + r * k + i) : VecF{};
    for (int t = 0; t < NT; ++t) {
      const VecF xv = load_vec(x + t * ldx + i);
      for (int r = 0; r < kRows; ++r) acc[t][r] += xv * wv[r];
    }
  }
  for (int t = 0; t < NT; ++t) {
    for (int r = 0; r < n_rows; ++r) {
      float s = hsum(acc[t][r]);
      for (int64_t i = k_vec; i < k; ++i) s += x[t * ldx + i] * to_f32(w[r * k + i]);
      dst[t * ldo + r] = s + (bias_blk ? bias_blk[r] : 0.0f);
    }
  }
}

template <typename W>
void direct_matmul(const float* xp, const W* wp, const float* bias, float* op, int64_t n, int64_t k,
                   int64_t m) {
  const int64_t n_blocks = (m + kRows - 1) / kRows;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < n_blocks; ++blk) {
    const int64_t r0 = blk * kRows;
    const int rows = int(std::min<int64_t>(kRows, m - r0));
    const float* bias_blk = bias ? bias + r0 : nullptr;
    const W* w = wp + r0 * k;
    float* dst = op + r0;
    int64_t t = 0;
    for (; t + kTok <= n; t += kTok) direct_tile<kTok>(xp + t * k, k, w, k, dst + t * m, m, bias_blk, rows);
    for (; t + 2 <= n; t += 2) direct_tile<2>(xp + t * k, k, w, k, dst + t * m, m, bias_blk, rows);
    for (; t < n; ++t) direct_tile<1>(xp + t * k, k, w, k, dst + t * m, m, bias_blk, rows);
  }
}

// Up to this many tokens the weights are widened in registers on every pass.
constexpr int64_t kDirectMaxTokens = 8;

}  // namespace

void cpu_matmul(const TensorView& x, const TensorView& w, const TensorView& bias,
                const TensorView& out) {
  check_matmul(x, w, bias, out);
  check_quantized(w);
  const int64_t n = x.shape[0], k = x.shape[1], m = w.shape[0];
  const int64_t n_blocks = (m + kRows - 1) / kRows;
  std::vector<float> bias_f32;
  if (bias.data) {
    bias_f32.resize(size_t(m));
    load_row_f32(bias.data, bias.dtype, 0, m, bias_f32.data());
  }
  const float* xp = x.as<float>();
  float* op = out.as<float>();
  const float* bp = bias.data ? bias_f32.data() : nullptr;
  if (dtype_is_quantized(w.dtype)) return cpu_matmul_quant(x, w, bp, out);
  if (n <= kDirectMaxTokens) {
    switch (w.dtype) {
      case DType::F32: return direct_matmul(xp, w.as<float>(), bp, op, n, k, m);
      case DType::BF16: return direct_matmul(xp, w.as<uint16_t>(), bp, op, n, k, m);
      case DType::F16: return direct_matmul(xp, w.as<_Float16>(), bp, op, n, k, m);
      default: TF_ASSERT(false, "matmul: weight dtype {} unsupported", dtype_name(w.dtype));
    }
  }

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

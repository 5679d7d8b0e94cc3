// The register tile of matmul_quant.cpp (quantized weights dequantized into F32 scratch): NT
// tokens against kRows weight rows that sit as F32 in a small buffer, GCC vector extensions
// of kLanes floats, compiled at the library's own ISA level (not one of the per-ISA kernel
// builds of kernels/). Internal to src/backend/cpu.
#pragma once

#include <cstdint>
#include <cstring>

namespace tf::cpu_tile {

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

// dst[t][r] (+)= sum_i x[t][i] * wbuf[r][i] (+ bias_blk[r]) for NT tokens and n_rows <= kRows
// rows over k (wbuf rows are k apart and kRows of them exist; rows past n_rows are read, not
// stored). kAccumulate adds to dst (a later slice of k), otherwise dst is overwritten.
template <int NT, bool kAccumulate = false>
inline void micro_tile(const float* x, int64_t ldx, const float* wbuf, int64_t k, float* dst, int64_t ldo,
                       const float* bias_blk, int n_rows) {
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
      s += bias_blk ? bias_blk[r] : 0.0f;
      if constexpr (kAccumulate)
        dst[t * ldo + r] += s;
      else
        dst[t * ldo + r] = s;
    }
  }
}

}  // namespace tf::cpu_tile

// Float matmul kernel: out[n, m] = x[n, k] @ w[m, k]^T (+ bias) for a range of weight row
// blocks (kernels.h, KernelTable::matmul_blocks).
//
// Weights are [out, in] as checkpoints store them, so every output is a dot product of two
// contiguous rows. A block is kRows weight rows; the register tile is kTok tokens x kRows
// rows of vector accumulators over k (each loaded weight vector serves kTok tokens, each
// loaded activation vector kRows rows), reduced horizontally once at the end of k.
//  - Few tokens (decode, n <= kTok): the tile reads the weights in their stored type and
//    widens BF16/F16 in registers as it streams them; kRows rows are in flight at once and
//    nothing is written back, so the loop runs at memory speed.
//  - More tokens (prefill): the block's rows are widened once into `scratch` (kRows x k
//    floats, L2-resident) and the tile walks all tokens over it, so the FMAs run from cache.
// A tail block of fewer rows points its missing rows at its last row (results discarded);
// a tail of tokens runs a narrower tile; k past the last full vector is summed as scalars.
#include <algorithm>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/simd.h"
#include "core/error.h"

namespace tf::cpu::TF_CPU_ISA_NS {
namespace {

// Accumulators kTok x kRows plus kRows weight vectors must fit the register file with one
// to spare: 32 vector registers with AVX-512, 16 below it (activations as memory operands).
#if defined(__AVX512F__)
constexpr int kRows = 6, kTok = 4;
#else
constexpr int kRows = 4, kTok = 3;
#endif

template <int NT, typename W>
inline void tile(const float* x, int64_t k, const W* const* w, float* out, int64_t ldo, const float* bias,
                 int n_rows) {
  VecF acc[NT][kRows];
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < kRows; ++r) acc[t][r] = VecF{};
  const int64_t k_vec = k / kLanes * kLanes;
  for (int64_t i = 0; i < k_vec; i += kLanes) {
    VecF wv[kRows];
    for (int r = 0; r < kRows; ++r) wv[r] = load_w(w[r] + i);
    for (int t = 0; t < NT; ++t) {
      const VecF xv = load(x + t * k + i);
      for (int r = 0; r < kRows; ++r) acc[t][r] += xv * wv[r];
    }
  }
  for (int t = 0; t < NT; ++t) {
    for (int r = 0; r < n_rows; ++r) {
      float s = hsum(acc[t][r]);
      for (int64_t i = k_vec; i < k; ++i) s += x[t * k + i] * to_f32(w[r][i]);
      out[t * ldo + r] = s + (bias ? bias[r] : 0.0f);
    }
  }
}

// All n tokens against one block of rows w[r] (r < kRows, n_rows of them real).
template <typename W>
void block_all_tokens(const MatmulArgs& a, const W* const* w, int64_t r0, int n_rows) {
  const float* bias = a.bias ? a.bias + r0 : nullptr;
  int64_t t = 0;
  for (; t + kTok <= a.n; t += kTok) tile<kTok>(a.x + t * a.k, a.k, w, a.out + t * a.m + r0, a.m, bias, n_rows);
  switch (a.n - t) {
    case 0: break;
    case 1: tile<1>(a.x + t * a.k, a.k, w, a.out + t * a.m + r0, a.m, bias, n_rows); break;
    case 2: tile<2>(a.x + t * a.k, a.k, w, a.out + t * a.m + r0, a.m, bias, n_rows); break;
    default:
      if constexpr (kTok > 3) tile<3>(a.x + t * a.k, a.k, w, a.out + t * a.m + r0, a.m, bias, n_rows);
  }
}

template <typename W>
void blocks_of(const MatmulArgs& a, int64_t b0, int64_t b1, float* scratch) {
  const W* w = static_cast<const W*>(a.w);
  const bool widen_once = !std::is_same_v<W, float> && a.n > kTok;
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t r0 = b * kRows;
    const int n_rows = int(std::min<int64_t>(kRows, a.m - r0));
    if (widen_once) {
      const float* rows[kRows];
      for (int r = 0; r < n_rows; ++r) {
        float* dst = scratch + r * a.k;
        const W* src = w + (r0 + r) * a.k;
        int64_t i = 0;
        for (; i + kLanes <= a.k; i += kLanes) store(dst + i, load_w(src + i));
        for (; i < a.k; ++i) dst[i] = to_f32(src[i]);
      }
      for (int r = 0; r < kRows; ++r) rows[r] = scratch + std::min(r, n_rows - 1) * a.k;
      block_all_tokens<float>(a, rows, r0, n_rows);
    } else {
      const W* rows[kRows];
      for (int r = 0; r < kRows; ++r) rows[r] = w + (r0 + std::min(r, n_rows - 1)) * a.k;
      block_all_tokens<W>(a, rows, r0, n_rows);
    }
  }
}

}  // namespace

int64_t matmul_block_rows() { return kRows; }

void matmul_blocks(const MatmulArgs& a, int64_t b0, int64_t b1, float* scratch) {
  switch (a.w_dtype) {
    case DType::F32: return blocks_of<float>(a, b0, b1, scratch);
    case DType::BF16: return blocks_of<Bf16>(a, b0, b1, scratch);
    case DType::F16: return blocks_of<F16>(a, b0, b1, scratch);
    default: TF_ASSERT(false, "matmul: weight dtype {} is not a float type", dtype_name(a.w_dtype));
  }
}

}  // namespace tf::cpu::TF_CPU_ISA_NS

// CPU matmul on quantized weights with F32 activations (W8, W4, FP8; quant/formats.h): out[n,
// m] = x[n, k] @ dequant(w)^T (+ bias), the dequantization fused into the GEMM. CpuBackend::
// matmul takes it for what the integer kernels (matmul_quant_fast.cpp) do not cover: FP8, W8
// with k not a multiple of 32, W4 with groups not a multiple of 32.
//
// The pool's threads split the output features into blocks of kRows rows, as the float GEMM
// does, so each weight byte is read from memory once per call. A block walks k in slices of
// kSlice: the slice of its kRows rows is dequantized into an F32 scratch of kRows x kSlice
// floats (8 KiB, L1-resident), and the register tile of gemm_tile.h runs every token over
// it, adding into out. No F32 or 16-bit copy of the weight ever exists beyond that scratch;
// the dequantization costs about one operation per weight, shared by all n tokens.
//
// Dequantized values are those of quant/quantized_weight.h's dequantize_row (the reference),
// bit for bit: the same F32 products of the stored scale and the code.
#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm_tile.h"
#include "backend/shape_checks.h"
#include "quant/fp8.h"

namespace tf {
namespace {

using namespace cpu_tile;

constexpr int64_t kSlice = 512;  // k elements per dequantized slice (even: W4 bytes stay whole)

// Elements [k0, k0 + len) of row i of w, dequantized into out[len].
void dequant_slice(const TensorView& w, int64_t i, int64_t k0, int64_t len, float* out) {
  const int64_t k = w.shape[1];
  switch (w.dtype) {
    case DType::W8: {
      const int8_t* q = static_cast<const int8_t*>(w.data) + i * k + k0;
      const float s = static_cast<const float*>(w.scales)[i];
#pragma omp simd
      for (int64_t j = 0; j < len; ++j) out[j] = s * float(q[j]);
      return;
    }
    case DType::FP8: {
      const uint8_t* q = static_cast<const uint8_t*>(w.data) + i * k + k0;
      const float s = static_cast<const float*>(w.scales)[i];
      const float* table = e4m3_table();
      for (int64_t j = 0; j < len; ++j) out[j] = s * table[q[j]];
      return;
    }
    case DType::W4: {
      const int64_t g = w.group_size, n_groups = k / g;
      const uint8_t* q = static_cast<const uint8_t*>(w.data) + i * (k / 2);
      const uint16_t* sc = static_cast<const uint16_t*>(w.scales) + i * n_groups;
      const uint8_t* zp = static_cast<const uint8_t*>(w.zeros) + i * n_groups;
      for (int64_t j0 = k0; j0 < k0 + len;) {  // one group's share of the slice at a time
        const int64_t grp = j0 / g, j1 = std::min(k0 + len, (grp + 1) * g);
        const float s = f16_to_f32(sc[grp]);
        const int z = zp[grp];
        float* o = out + (j0 - k0);
        const uint8_t* b = q + j0 / 2;
#pragma omp simd
        for (int64_t p = 0; p < (j1 - j0) / 2; ++p) {
          o[2 * p] = s * float(int(b[p] & 15) - z);
          o[2 * p + 1] = s * float(int(b[p] >> 4) - z);
        }
        j0 = j1;
      }
      return;
    }
    default: TF_ASSERT(false, "cpu matmul: weight dtype {} unsupported", dtype_name(w.dtype));
  }
}

}  // namespace

void CpuBackend::matmul_dequant(const TensorView& x, const TensorView& w, const TensorView& bias_view,
                                const TensorView& out) {
  check_matmul(x, w, bias_view, out);
  check_quantized(w);
  const int64_t n = x.shape[0], k = x.shape[1], m = w.shape[0];
  const int64_t n_blocks = (m + kRows - 1) / kRows;
  const float* xp = x.as<float>();
  const float* bias = bias_f32(bias_view);
  float* op = out.as<float>();
  ThreadPool& tp = pool();
  for (int t = 0; t < tp.size(); ++t) scratch(t, size_t(kRows * kSlice));
  const int64_t n_chunks = tp.chunks_for(n_blocks, 1);
  tp.parallel_for(n_chunks, [&](int64_t c, int thread) {
    float* wbuf = scratch_[size_t(thread)].data();
    for (int64_t blk = c * n_blocks / n_chunks; blk < (c + 1) * n_blocks / n_chunks; ++blk) {
      const int64_t r0 = blk * kRows;
      const int rows = int(std::min<int64_t>(kRows, m - r0));
      for (int64_t k0 = 0; k0 < k; k0 += kSlice) {
        const int64_t len = std::min(kSlice, k - k0);
        for (int r = 0; r < rows; ++r) dequant_slice(w, r0 + r, k0, len, wbuf + r * len);
        for (int r = rows; r < kRows; ++r) std::fill_n(wbuf + r * len, len, 0.0f);
        const float* bias_blk = bias && k0 == 0 ? bias + r0 : nullptr;
        const float* xs = xp + k0;
        float* dst = op + r0;
        int64_t t = 0;
        if (k0 == 0) {
          for (; t + kTok <= n; t += kTok) micro_tile<kTok>(xs + t * k, k, wbuf, len, dst + t * m, m, bias_blk, rows);
          for (; t < n; ++t) micro_tile<1>(xs + t * k, k, wbuf, len, dst + t * m, m, bias_blk, rows);
        } else {
          for (; t + kTok <= n; t += kTok)
            micro_tile<kTok, true>(xs + t * k, k, wbuf, len, dst + t * m, m, nullptr, rows);
          for (; t < n; ++t) micro_tile<1, true>(xs + t * k, k, wbuf, len, dst + t * m, m, nullptr, rows);
        }
      }
    }
  });
}

}  // namespace tf

// Row kernels: RMSNorm, SwiGLU and widening 16-bit rows to F32 (KernelTable).
#include <cmath>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/simd.h"
#include "core/error.h"

namespace tf::cpu::TF_CPU_ISA_NS {

void rms_norm_row(const float* x, const float* w, int64_t d, float eps, float* out) {
  VecF acc = VecF{};
  int64_t i = 0;
  for (; i + kLanes <= d; i += kLanes) {
    const VecF v = load(x + i);
    acc += v * v;
  }
  float ss = hsum(acc);
  for (; i < d; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / float(d) + eps);
  for (i = 0; i + kLanes <= d; i += kLanes) store(out + i, load(x + i) * inv * load(w + i));
  for (; i < d; ++i) out[i] = x[i] * inv * w[i];
}

void swiglu_row(const float* gate, const float* up, int64_t d, float* out) {
  int64_t i = 0;
  for (; i + kLanes <= d; i += kLanes) {
    const VecF g = load(gate + i);
    store(out + i, g / (1.0f + exp_vec(-g)) * load(up + i));
  }
  for (; i < d; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void widen_row(const void* src, DType dtype, int64_t n, float* dst) {
  int64_t i = 0;
  switch (dtype) {
    case DType::F32: std::memcpy(dst, src, size_t(n) * sizeof(float)); return;
    case DType::BF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (; i + kLanes <= n; i += kLanes) store(dst + i, widen_bf16(s + i));
      for (; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::F16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (; i + kLanes <= n; i += kLanes) store(dst + i, widen_f16(s + i));
      for (; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    default: TF_ASSERT(false, "widen_row: dtype {} is not a float type", dtype_name(dtype));
  }
}

}  // namespace tf::cpu::TF_CPU_ISA_NS

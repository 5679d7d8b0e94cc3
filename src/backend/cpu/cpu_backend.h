// The fast CPU backend: OpenMP threads over independent rows/heads, inner loops written for
// the compiler's vectoriser (GCC vector extensions in the GEMM micro-kernel), weights read in
// their stored dtype (BF16/F16 widened on the fly, so decode reads half the bytes of F32).
#pragma once

#include "backend/host_backend.h"

namespace tf {

class CpuBackend : public HostBackend {
 public:
  std::string name() const override { return "cpu"; }
  void embedding(const TensorView& table, const TensorView& out) override;
  void rms_norm(const TensorView& x, const TensorView& w, float eps, const TensorView& out) override;
  void matmul(const TensorView& x, const TensorView& w, const TensorView& bias,
              const TensorView& out) override;
  void rope_kv_write(int layer, const TensorView& qkv, const TensorView& inv_freq,
                     const AttentionParams& p) override;
  void attention(int layer, const TensorView& qkv, const AttentionParams& p,
                 const TensorView& out) override;
  void swiglu(const TensorView& gate_up, const TensorView& out) override;
  void gather_logit_rows(const TensorView& x, const TensorView& out) override;
};

// out[rows, m] = x[rows, k] @ w[m, k]^T (+ bias); exposed for the micro-benchmarks and tests.
// Quantized weights (W8/W4/FP8) go to cpu_matmul_quant (matmul_quant.cpp).
void cpu_matmul(const TensorView& x, const TensorView& w, const TensorView& bias,
                const TensorView& out);
// The quantized half of cpu_matmul: w W8/W4/FP8 [m, k] (checked by the caller), bias [m] F32
// or nullptr.
void cpu_matmul_quant(const TensorView& x, const TensorView& w, const float* bias, const TensorView& out);

}  // namespace tf

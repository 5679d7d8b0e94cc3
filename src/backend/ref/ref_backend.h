// The reference backend: plain scalar loops with double accumulation, written to be read,
// not to be fast. It defines the semantics every other backend is tested against.
#pragma once

#include "backend/host_backend.h"

namespace tf {

class RefBackend : public HostBackend {
 public:
  std::string name() const override { return "ref"; }
  // Every GGUF block type: matmul and embedding dequantize rows as they go.
  bool reads_gguf_block(DType t) const override { return dtype_is_gguf_block(t); }
  void embedding(const TensorView& table, const TensorView& out) override;
  void rms_norm(const TensorView& x, const TensorView& w, float eps, const TensorView& out) override;
  void matmul(const TensorView& x, const TensorView& w, const TensorView& bias,
              const TensorView& out) override;
  void rope_kv_write(int layer, const TensorView& qkv, const QkRope& rope, const AttentionParams& p) override;
  void attention(int layer, const TensorView& qkv, const AttentionParams& p,
                 const TensorView& out) override;
  void swiglu(const TensorView& gate_up, const TensorView& out) override;
  void geglu(const TensorView& gate_up, const TensorView& out) override;
  void moe_experts(const TensorView& x, const TensorView& ids, const TensorView& weights, const TensorView& w_gate_up,
                   const TensorView& w_down, const MoeParams& p, const TensorView& out) override;
  void gather_logit_rows(const TensorView& x, const TensorView& out) override;
};

}  // namespace tf

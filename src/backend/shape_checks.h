// Shape checks shared by every backend's ops: a mismatch is a programming error in model
// code, so these assert (with the shapes in the message) rather than throw.
#pragma once

#include "backend/backend.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tf {

inline void check_2d(const TensorView& t, int64_t rows, int64_t cols, const char* what) {
  TF_ASSERT(t.n_dims == 2 && t.shape[0] == rows && t.shape[1] == cols, "{}: shape {} != [{}, {}]",
            what, t.shape_str(), rows, cols);
}

inline void check_matmul(const TensorView& x, const TensorView& w, const TensorView& bias,
                         const TensorView& out) {
  TF_ASSERT(x.n_dims == 2 && w.n_dims == 2 && out.n_dims == 2, "matmul wants 2-d tensors");
  TF_ASSERT(x.shape[1] == w.shape[1], "matmul: x {} vs w {}", x.shape_str(), w.shape_str());
  TF_ASSERT(out.shape[0] == x.shape[0] && out.shape[1] == w.shape[0], "matmul: out {} for x {} w {}",
            out.shape_str(), x.shape_str(), w.shape_str());
  TF_ASSERT(!bias.data || bias.numel() == w.shape[0], "matmul: bias {} for w {}", bias.shape_str(),
            w.shape_str());
}

// A QkRope for heads of head_dim: at most head_dim / 2 frequencies (F32), norms of head_dim.
inline void check_qk_rope(const QkRope& r, int64_t head_dim) {
  const int64_t half = r.inv_freq.numel();
  TF_ASSERT(r.inv_freq.dtype == DType::F32 && half >= 1 && 2 * half <= head_dim,
            "rope inv_freq: {} {} for head_dim {}", dtype_name(r.inv_freq.dtype), r.inv_freq.shape_str(), head_dim);
  TF_ASSERT(!r.inv_freq_long.data || (r.inv_freq_long.dtype == DType::F32 && r.inv_freq_long.numel() == half),
            "rope inv_freq_long: {} for {} frequencies", r.inv_freq_long.shape_str(), half);
  for (const TensorView* n : {&r.q_norm, &r.k_norm})
    TF_ASSERT(!n->data || n->numel() == head_dim, "rope q/k norm: {} for head_dim {}", n->shape_str(), head_dim);
}

// The sizes moe_experts works on, from its checked arguments.
struct MoeShape {
  int64_t rows = 0, d_model = 0, d_ff = 0;
};
inline MoeShape check_moe(const TensorView& x, const TensorView& ids, const TensorView& weights,
                          const TensorView& w_gate_up, const TensorView& w_down, const MoeParams& p,
                          const TensorView& out) {
  TF_ASSERT(x.n_dims == 2 && w_gate_up.n_dims == 2 && w_down.n_dims == 2 && p.n_experts >= 1 && p.top_k >= 1 &&
                p.top_k <= p.n_experts,
            "moe_experts: x {}, w_gate_up {}, w_down {}, {} experts, top {}", x.shape_str(), w_gate_up.shape_str(),
            w_down.shape_str(), p.n_experts, p.top_k);
  const MoeShape m{.rows = x.shape[0], .d_model = x.shape[1], .d_ff = w_down.shape[1]};
  TF_ASSERT(w_gate_up.shape[0] == p.n_experts * 2 * m.d_ff && w_gate_up.shape[1] == m.d_model &&
                w_down.shape[0] == p.n_experts * m.d_model,
            "moe_experts: w_gate_up {} and w_down {} for {} experts of d_model {}", w_gate_up.shape_str(),
            w_down.shape_str(), p.n_experts, m.d_model);
  TF_ASSERT(ids.dtype == DType::I32 && ids.numel() == m.rows * p.top_k && weights.dtype == DType::F32 &&
                weights.numel() == m.rows * p.top_k,
            "moe_experts: ids {} and weights {} for {} rows of top {}", ids.shape_str(), weights.shape_str(), m.rows,
            p.top_k);
  check_2d(out, m.rows, m.d_model, "moe_experts out");
  return m;
}

// A W8/W4/FP8 weight carries its parameters (quant/formats.h); other dtypes pass. Views made by
// make_quantized_view (quant/quantized_weight.h) always do: this catches a view built by hand.
inline void check_quantized(const TensorView& w) {
  if (w.dtype != DType::W8 && w.dtype != DType::W4 && w.dtype != DType::FP8) return;
  TF_ASSERT(w.n_dims == 2 && w.scales, "{} weight {}: 2-d with scales", dtype_name(w.dtype), w.shape_str());
  if (w.dtype == DType::W4)
    TF_ASSERT(w.zeros && w.group_size > 0 && w.group_size % 32 == 0 && w.shape[1] % w.group_size == 0,
              "W4 weight {}: zeros and a group size (a multiple of 32 dividing k), not {}", w.shape_str(),
              w.group_size);
}

}  // namespace tf

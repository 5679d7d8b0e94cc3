// Shape checks shared by every backend's ops: a mismatch is a programming error in model
// code, so these assert (with the shapes in the message) rather than throw.
#pragma once

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

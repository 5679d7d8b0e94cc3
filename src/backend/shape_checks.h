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

}  // namespace tf

#include "core/tensor.h"

namespace tf {

std::string TensorView::shape_str() const {
  std::string s = "[";
  for (int i = 0; i < n_dims; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace tf

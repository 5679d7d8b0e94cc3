// Rows of a weight matrix as a view of the same memory, quantized or not.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tf {

// Rows [row0, row0 + n) of a W8, W4 or FP8 matrix (or a dense one) as a view of the same
// memory: the values, scales and zero points of those rows (a row owns its parameters).
TensorView quantized_rows(const TensorView& w, int64_t row0, int64_t n);

}  // namespace tf

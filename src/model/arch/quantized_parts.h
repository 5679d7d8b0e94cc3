// The host-side form of one linear weight in a quantized layout (src/quant/formats.h), as one
// tensor-parallel rank holds it, for the loader (weight_loader.h) to upload:
//
//   per part   the part's whole matrix in the target layout: the checkpoint's own stored
//              tensors when they have that layout (no copy), else round-to-nearest of its
//              16-bit values (dequantized first when stored in another quantized layout)
//   per rank   rows or columns of it cut out (weight_table.h TpSlice); columns of int4 only on
//              whole groups, so every rank's scales are the unsplit weight's
//   weight     the parts concatenated along rows (q|k|v, gate|up)
//
// Quantizing the whole part before cutting it keeps every rank's codes and scales equal to the
// unsharded model's: --tp N computes what --tp 1 does.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/tensor_source.h"
#include "model/weight_table.h"
#include "quant/group_quant.h"

namespace tf {

// A quantized weight in host memory: `view` points either into the tensor source or into `owned`.
struct HostQuantized {
  TensorView view;
  std::unique_ptr<QuantizedWeight> owned;
};

// The rows and columns of a part this rank holds (TpSplit applied to the part's logical shape).
struct PartSlice {
  int64_t row0 = 0, n_rows = 0;  // inside the part
  int64_t col0 = 0, n_cols = 0;  // n_cols = the part's columns when not column-split
};
PartSlice part_slice(const WeightPart& p, int32_t tp_rank, int32_t tp_size);

// Weight `w` of the table (dense or quantized as stored) for rank tp_rank of tp_size in layout
// `target` (W8, W4 or FP8; a W4 group size that does not divide a part's input dimension is
// lowered to fitting_group_size). Throws tf::Error naming the tensor: stored parts that do not
// match their layout (make_quantized_view), a column slice that cuts an int4 group, weights
// that cannot be quantized (non-finite values).
HostQuantized quantized_weight_for_rank(const WeightSpec& w, const TensorSource& source, const QuantSpec& target,
                                        int32_t tp_rank, int32_t tp_size);

// A stored quantized weight `w` dequantized to F32 for the rank: [rows, cols] row-major in `out`.
std::vector<float> dequantized_weight_for_rank(const WeightSpec& w, const TensorSource& source, int32_t tp_rank,
                                               int32_t tp_size, int64_t* rows, int64_t* cols);

// The layout a stored quantized weight has (its format and group size), for comparing with a target.
QuantSpec stored_spec(const WeightSpec& w);

}  // namespace tf

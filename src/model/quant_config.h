// Quantized checkpoints: config.json's "quantization_config" and the weight table in the form
// such a checkpoint stores it (docs/QUANT.md, "Quantized model folders").
//
//   "quantization_config": {
//     "quant_method": "twofold",          the layout below (other tools' layouts are refused)
//     "format": "int4",                   int8 | int4 | fp8 (src/quant/formats.h: W8, W4, FP8)
//     "group_size": 128,                  int4 only: a multiple of 32 dividing each input dimension
//     "symmetric": false,                 int4, informational (the zero points are stored either way)
//     "method": "awq",                    how the weights were made (informational)
//     "modules_to_not_convert": ["lm_head"],           modules stored dense
//     "group_size_overrides": {"model.layers.0.mlp.down_proj": 96}   int4: a module's own group size
//   }
//
// A linear module `M` (its dense tensor `M.weight`, e.g. model.layers.3.mlp.down_proj) is
// stored as M.qweight (the packed codes), M.scales and, for int4, M.zeros, in the dtypes and
// shapes of src/quant/formats.h. The LM head is a linear module like the others; a tied one
// (the embedding's tensor) stays dense, as embeddings, norms and biases do.
#pragma once

#include <string>
#include <string_view>

#include "model/config.h"
#include "model/config_fields.h"
#include "model/weight_table.h"

namespace tf {

// The "quantization_config" object of `f` (absent or null: a dense checkpoint). Throws
// tf::Error naming the file and the field: another quant_method, an unknown format, a group
// size that is not a positive multiple of 32, fields of the wrong type.
QuantConfig parse_quant_config(const ConfigFields& f);

// `M.weight` -> "M"; empty when the name does not end in ".weight".
std::string module_of(std::string_view dense_tensor);
// The stored name of one component of module M: M.qweight, M.scales, M.zeros.
std::string quantized_tensor_name(std::string_view module, TensorComponent c);

// Turns the dense table of an architecture into the table of a checkpoint stored as `q` says:
// every linear weight (is_linear_role) whose modules are converted gets q's format, each of its
// parts naming the module's qweight, scales and zeros tensors, with their stored shapes. Throws
// tf::Error naming q.origin and the module: a group size that does not divide the module's
// input dimension, parts of one fused weight (q|k|v, gate|up) that are not all converted or do
// not share a group size, a module name in the config that is no linear module of the model.
void apply_quant_config(WeightTable& t, const QuantConfig& q);

// The stored form of a weight of logical shape [m, k] in `format` (group size g for Int4) as a
// TensorSpec of component `c`, named for module M.
TensorSpec quantized_tensor_spec(std::string_view module, WeightFormat format, TensorComponent c,
                                 const std::vector<int64_t>& weight_shape, int32_t group_size);

}  // namespace tf

// The weight table of an architecture for one config: every tensor its checkpoint holds and
// every weight its forward uses, described once. Validation, loading (src/model/arch/
// weight_loader.h), dummy weights, tensor-parallel sharding, `info` and `kv-plan` read the
// table; none of them names an architecture. Each architecture file (src/model/arch/) builds
// its table, mostly through the shared builders of src/model/arch/block_weights.h.
//
// Two lists, because checkpoint tensors and forward weights need not match one to one: the
// forward's fused q|k|v matrix is three checkpoint tensors concatenated (Llama) or one
// (Phi-3's qkv_proj, whose rows the parts address with row0); a tied LM head is the
// embedding's tensor again; a quantized matrix (src/quant/formats.h) is several stored
// tensors (values, scales, zero points) for one weight, which its parts name. Every entry
// has its own shape, so layers may differ (pruned layers, per-layer attention types).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/tensor_source.h"

namespace tf {

// How a weight is stored in the checkpoint. Dense: each part is one tensor in F32, F16 or
// BF16 (a GGUF file's matrices also in a GGUF block type, dtype_is_gguf_block). Int8, Int4,
// Fp8: each part is the layout of src/quant/formats.h (W8, W4, FP8) in up to three tensors,
// its packed values, scales and (Int4) zero points (quant_config.h).
enum class WeightFormat : uint8_t { Dense, Int8, Int4, Fp8 };
std::string_view weight_format_name(WeightFormat f);  // "dense", "int8", "int4", "fp8"
// W8 / W4 / FP8 for the quantized formats (the TensorView dtype of the loaded weight), and back.
DType weight_format_dtype(WeightFormat f);
WeightFormat weight_format_of(DType quantized);

// What a stored tensor holds of its weight: the values (a dense matrix, or a quantized
// format's packed values), or a quantized format's scales or zero points.
enum class TensorComponent : uint8_t { Values, Scales, Zeros };

// What `--load-format dummy` fills a tensor with: uniform values of variance 1/fan_in
// (fan_in = the last dimension of a matrix, 1 for a vector), ones (RMSNorm weights), or
// zeros (the weights of Gemma's (1 + w) norms).
enum class DummyInit : uint8_t { FanIn, Ones, Zeros };

// One tensor the checkpoint holds.
struct TensorSpec {
  std::string name;            // checkpoint name, e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // exact shape as stored; dense matrices [out_features, in_features]
  WeightFormat format = WeightFormat::Dense;
  TensorComponent component = TensorComponent::Values;
  bool optional = false;       // may be absent (lm_head.weight when embeddings are tied)
  DummyInit init = DummyInit::FanIn;
  // Quantized formats: the logical [out_features, in_features] of the weight this tensor is a
  // component of, and (Int4) its group size; `shape` is the component's own (W4 values [m, k / 2]).
  std::vector<int64_t> weight_shape;
  int32_t group_size = 0;
};

// How tensor parallelism (Megatron-LM) cuts one part among ranks.
//   Replicated: every rank holds all of it (embedding, norms).
//   Rows:       column-parallel, the rows (output features) split: q/k/v by heads, gate/up by
//               d_ff, the LM head by vocabulary. Outputs are split; no communication.
//   Columns:    row-parallel, the columns (input features) split: o_proj by heads, down_proj
//               by d_ff (each expert's down_proj by its d_ff). Each rank's product is
//               partial; the forward all-reduces it.
//   FirstRank:  rank 0 holds all of it, the others nothing: the bias of a row-parallel
//               projection, added once before the all-reduce.
// Rows and Columns cut the axis into n_groups groups of group_size (heads of head_dim, or
// single d_ff columns / vocabulary rows): see tp_groups().
enum class TpSplit : uint8_t { Replicated, Rows, Columns, FirstRank };
struct TpSlice {
  TpSplit split = TpSplit::Replicated;
  int64_t n_groups = 1;
  int64_t group_size = 1;
};
inline TpSlice tp_rows(int64_t n_groups, int64_t group_size = 1) { return {TpSplit::Rows, n_groups, group_size}; }
inline TpSlice tp_columns(int64_t n_groups, int64_t group_size = 1) { return {TpSplit::Columns, n_groups, group_size}; }
inline constexpr TpSlice kReplicated{};
inline constexpr TpSlice kFirstRank{TpSplit::FirstRank, 1, 1};

// Groups [begin, begin + count) that rank `rank` of `size` holds of n_groups: an equal share
// when size divides n_groups; when n_groups divides size (fewer KV heads than ranks), the one
// group the rank's query heads read, rank * n_groups / size. Throws tf::Error otherwise.
struct TpRange {
  int64_t begin = 0, count = 0;
};
TpRange tp_groups(int64_t n_groups, int32_t rank, int32_t size);

// What a weight is to the forward. Architecture files fetch weights by {role, layer}.
enum class WeightRole : uint8_t {
  Embedding, FinalNorm, LmHead,
  AttnNorm, Wqkv, Bqkv, QNorm, KNorm, Wo, Bo, AttnPostNorm,
  MlpNorm, WgateUp, Wdown, Bdown, MlpPostNorm,
  Router, ExpertsGateUp, ExpertsDown,
};
std::string_view weight_role_name(WeightRole r);

struct WeightKey {
  WeightRole role;
  int32_t layer = -1;  // -1 for global weights
  auto operator<=>(const WeightKey&) const = default;
};

// What loading does to a part's values before they reach the backend: nothing, or add one
// (Gemma's RMSNorm weights w, used as 1 + w; the result is kept in F32).
enum class PartTransform : uint8_t { None, AddOne };

// Rows [row0, row0 + shape[0]) of the checkpoint tensor `tensor`: one piece of a weight.
struct WeightPart {
  std::string tensor;          // a TensorSpec name: the values (Dense: the matrix itself)
  std::string scales, zeros;   // TensorSpec names of its scale / zero-point arrays (components
                               // Scales / Zeros) in a quantized format; empty for Dense
  int64_t row0 = 0;            // first row inside that tensor (a fused tensor holds several parts)
  std::vector<int64_t> shape;  // [rows, cols] or [rows]
  TpSlice tp;
  PartTransform transform = PartTransform::None;
};

// One weight as the forward sees it on the backend: its parts (each cut to this rank's
// slice) concatenated along dim 0 in order, e.g. q|k|v or gate|up for one fused matmul, or
// every expert's gate|up for a mixture of experts. Column-split parts all cut the same
// columns.
struct WeightSpec {
  WeightKey key;
  std::vector<WeightPart> parts;
  WeightFormat format = WeightFormat::Dense;
  int32_t group_size = 0;  // Int4: of every part (a fused weight is one matrix of one layout)
};

// The forward's linear layers, which quantized formats may hold: q|k|v, o, gate|up, down, the
// LM head and the experts' stacked gate|up and down (each expert's rows quantized alone).
// Embeddings, norms, biases and the MoE router stay dense.
bool is_linear_role(WeightRole r);

struct WeightTable {
  std::string arch;                 // model_type, for messages
  std::vector<TensorSpec> tensors;  // in checkpoint order of the forward: globals, then layers
  std::vector<WeightSpec> weights;  // in load order

  const TensorSpec* find_tensor(std::string_view name) const;  // nullptr if absent
  const WeightSpec* find(WeightKey key) const;                  // nullptr if absent
  // Elements of every required tensor (the model's parameter count; a tied LM head once; a
  // quantized weight counts its logical elements, not its packed bytes, scales or zeros).
  int64_t n_params() const;
};

// Appends a Dense tensor and returns a part covering all of it with slice `tp`.
WeightPart add_dense_tensor(WeightTable& t, TensorSpec spec, TpSlice tp);

// Internal consistency, asserted: every part names a Values tensor of the table and lies
// inside it (and Scales / Zeros tensors, in a quantized format only), parts of one weight
// agree on their columns, keys are unique.
void check_table(const WeightTable& t);

// The checkpoint against the table: every required tensor present with exactly its shape and
// a dtype of its format and component (Dense: F32, F16, BF16; quantized: quant_config.h), and
// no tensor the table does not know (it would be a feature the forward silently leaves out).
// Throws tf::Error naming the tensor, the file, the expected and the actual shape (for packed
// int4 values and for scales, the weight shape and group size they were expected from).
void validate_weights(const WeightTable& table, const TensorSource& source);

}  // namespace tf

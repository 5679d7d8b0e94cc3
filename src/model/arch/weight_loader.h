// A weight table made resident on a backend: each weight's parts read from the tensor source,
// cut to this rank's tensor-parallel slice (weight_table.h TpSlice), concatenated along dim 0
// and uploaded. Architecture-blind: it reads only the table.
//
// Linear weights (is_linear_role) may be held in several copies, one per precision
// (LoadOptions::weight_copies: as stored, 16-bit, or a quantized layout made at load by
// round-to-nearest); every other weight is held once. Equal uploads are shared: a tied LM
// head is the embedding's upload, a dense LM head serves every copy that does not quantize it.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/arch/model.h"
#include "model/tensor_source.h"
#include "model/weight_table.h"
#include "quant/group_quant.h"
#include "quant/quantized_weight.h"

namespace tf {

class LoadedWeights {
 public:
  // Uploads every weight of `table` from `source` (validated against the table) onto
  // `backend` as rank opt.tp_rank of opt.tp_size, in opt's weight dtype, each linear weight once
  // per opt.weight_copies entry. `source` must outlive this object: zero-copy backends keep
  // pointing into it. Throws tf::Error naming the tensor a quantized copy cannot be made of.
  LoadedWeights(const WeightTable& table, const TensorSource& source, Backend& backend, const LoadOptions& opt);

  // The weight under `key` in copy `copy` of the linear weights (a weight held once answers
  // for every copy); an empty view when the table has none or this rank holds none
  // (TpSplit::FirstRank on ranks > 0).
  TensorView find(WeightKey key, int copy = 0) const;
  // The weight under `key`, asserted present.
  TensorView get(WeightKey key, int copy = 0) const;

  int n_copies() const { return int(copies_.size()); }
  const std::vector<WeightCopy>& copies() const { return copies_; }
  int64_t bytes() const { return bytes_; }         // as resident on the backend, every copy
  int64_t n_params() const { return n_params_; }   // elements uploaded (a shared tensor once)
  // Bytes of the uploads copy `copy` uses that not every copy shares, and of those every copy
  // shares (norms, a dense LM head): a step using copy c reads shared + copy(c). An upload only
  // the token embedding uses is left out of both: a step gathers one row of it a token (a tied
  // LM head reads it whole, so a tied table counts).
  int64_t copy_bytes(int copy) const { return copy_bytes_[size_t(copy)]; }
  int64_t shared_bytes() const { return shared_bytes_; }
  // "as stored", "bf16", "int8", "int4 g128", "fp8".
  static std::string copy_name(const WeightCopy& c);

 private:
  struct Upload {
    TensorView view;
    int64_t bytes = 0;
    std::vector<bool> used_by;  // [copy]
    bool read_whole = false;    // used by a weight other than the token embedding
  };
  TensorView load(const WeightSpec& w, const TensorSource& source, const LoadOptions& opt, int copy);
  TensorView load_dense(const WeightSpec& w, const TensorSource& source, const LoadOptions& opt);
  TensorView load_quantized(const WeightSpec& w, const TensorSource& source, const LoadOptions& opt,
                            const QuantSpec& target);
  TensorView load_dequantized(const WeightSpec& w, const TensorSource& source, const LoadOptions& opt);
  TensorView upload(const TensorView& host, const LoadOptions& opt);
  TensorView upload_concat(const std::vector<TensorView>& parts, const LoadOptions& opt);
  static TensorView add_one(const TensorView& v, std::unique_ptr<uint8_t[]>& buf);
  // The upload under `key` (what it holds), made by `make` the first time; marks `copy` (-1: all)
  // as a user, and the upload as read whole unless `role` (the weight asking) is the embedding.
  template <typename F>
  TensorView shared_upload(const std::string& key, int copy, WeightRole role, F&& make);

  Backend& be_;
  std::vector<WeightCopy> copies_;
  std::map<WeightKey, std::vector<TensorView>> weights_;  // [copy] for linear weights, one entry otherwise
  std::map<std::string, Upload> by_slice_;                // uploads by what they hold: equal slices are shared
  std::vector<std::unique_ptr<uint8_t[]>> host_tmp_;      // concatenated, cut or transformed weights kept
                                                          // for zero-copy backends
  std::vector<std::unique_ptr<QuantizedWeight>> host_quant_;  // quantized ones likewise
  int64_t bytes_ = 0, n_params_ = 0, shared_bytes_ = 0;
  std::vector<int64_t> copy_bytes_;
};

}  // namespace tf

// A weight table made resident on a backend: each weight's parts read from the tensor source,
// cut to this rank's tensor-parallel slice (weight_table.h TpSlice), concatenated along dim 0
// and uploaded. Architecture-blind: it reads only the table.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/arch/model.h"
#include "model/tensor_source.h"
#include "model/weight_table.h"

namespace tf {

class LoadedWeights {
 public:
  // Uploads every weight of `table` from `source` (validated against the table) onto
  // `backend` as rank opt.tp_rank of opt.tp_size, in opt's weight dtype. `source` must
  // outlive this object: zero-copy backends keep pointing into it.
  LoadedWeights(const WeightTable& table, const TensorSource& source, Backend& backend, const LoadOptions& opt);

  // The weight under `key`; an empty view when the table has none or this rank holds none
  // (TpSplit::FirstRank on ranks > 0).
  TensorView find(WeightKey key) const;
  // The weight under `key`, asserted present.
  TensorView get(WeightKey key) const;

  int64_t bytes() const { return bytes_; }        // as resident on the backend
  int64_t n_params() const { return n_params_; }  // elements uploaded (a shared tensor once)

 private:
  TensorView load(const WeightSpec& w, const TensorSource& source, const LoadOptions& opt);
  TensorView upload(const TensorView& host, const LoadOptions& opt);
  TensorView upload_concat(const std::vector<TensorView>& parts, const LoadOptions& opt);
  TensorView upload_cols(const TensorView& host, int64_t col0, int64_t n, const LoadOptions& opt);

  Backend& be_;
  std::map<WeightKey, TensorView> weights_;
  std::map<std::string, TensorView> by_slice_;        // uploads by what they hold: equal slices are shared
  std::vector<std::unique_ptr<uint8_t[]>> host_tmp_;  // concatenated or cut weights kept for zero-copy backends
  int64_t bytes_ = 0, n_params_ = 0;
};

}  // namespace tf

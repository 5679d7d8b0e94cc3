// Random weights for every required tensor of a weight table, generated in host memory
// (vLLM's `--load-format dummy`): speed work on real shapes without the real files. BF16
// values, uniform with variance 1/fan_in (DummyInit::FanIn) or ones (DummyInit::Ones), so
// activations stay finite; the same seed gives the same weights.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/tensor_source.h"
#include "model/weight_table.h"

namespace tf {

class RandomWeights final : public TensorSource {
 public:
  RandomWeights(const WeightTable& table, uint64_t seed);

  const std::string& origin() const override { return origin_; }
  const std::map<std::string, const TensorInfo*>& all() const override { return index_; }

 private:
  std::string origin_ = "<random weights>";
  std::map<std::string, TensorInfo> infos_;
  std::map<std::string, const TensorInfo*> index_;
  std::vector<std::unique_ptr<uint16_t[]>> data_;
};

}  // namespace tf

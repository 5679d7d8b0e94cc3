// `twofold prune`: a dense model folder -> one with fewer query heads and FFN channels per
// layer (docs/PRUNE.md). The written folder is the usual layout: config.json with the
// per-layer arrays layer_num_attention_heads, layer_num_key_value_heads and
// layer_intermediate_size where a layer differs from the scalar keys, the sliced tensors in
// the source's dtypes, and o_proj / down_proj biases where the recovery adds them.
//
// A Pruner runs the calibration forward once (convert/calibration.h) and keeps, per layer,
// the inputs of o_proj and down_proj; plans (plan.h), builds (recover.h) and measures any
// number of candidates from them, in memory, and writes the one asked for.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"
#include "model/weight_table.h"
#include "prune/importance.h"
#include "prune/plan.h"
#include "prune/recover.h"

namespace tf {

struct PruneParams {
  std::string in_dir;
  std::vector<int32_t> calib_ids;  // calibration tokens: the activations the scores and recovery read
  int64_t calib_rows = 8192;       // input rows per projection kept from them
  int32_t window = 256;            // tokens per window (calibration forward and every perplexity)
  double damp = 0.3;               // the least-squares ridge (recover.h; the default chosen in docs/PRUNE.md)
  std::function<void(const std::string& what, int64_t done, int64_t total)> progress;  // may be empty
};

// One tensor of a candidate model, its bytes owned.
struct OwnedTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

struct PrunedModel {
  nlohmann::json config;              // config.json of the candidate
  std::vector<OwnedTensor> tensors;   // in the source's order, biases after their weight
  std::vector<LayerKeep> keep;
  int64_t n_params = 0;               // every tensor's elements (a tied head once)
  int64_t n_layer_params_removed = 0;
};

class Pruner {
 public:
  // Reads p.in_dir's config and tensors and runs the calibration forward. Throws tf::Error
  // for a folder it cannot prune (quantized, fused q|k|v or gate|up, experts), naming it.
  explicit Pruner(PruneParams p);

  const PruneShapes& shapes() const { return shapes_; }
  int64_t n_params() const { return n_params_; }  // of the source model

  // Per layer, the heads' and channels' scores under s.
  const std::vector<LayerScores>& scores(PruneScore s) const;
  std::vector<LayerKeep> plan(PruneScore s, const PlanTarget& t) const { return plan_pruning(shapes_, scores(s), t); }
  // The model that keeps `keep`, recovered by r. keep_all(shapes()) with any recovery is the
  // source, byte for byte.
  PrunedModel build(const std::vector<LayerKeep>& keep, Recovery r) const;
  // Perplexity of m on ids (windows of p.window tokens), loaded in memory on the CPU backend as
  // `twofold perplexity` would load the written folder.
  double perplexity(const PrunedModel& m, const std::vector<int32_t>& ids, const std::string& what) const;
  // Writes m to out_dir (created): config.json, model.safetensors, the source's other files.
  void write(const PrunedModel& m, const std::string& out_dir) const;

 private:
  void tick(const std::string& what, int64_t done, int64_t total) const {
    if (p_.progress) p_.progress(what, done, total);
  }

  PruneParams p_;
  ModelConfig cfg_;
  WeightTable table_;
  PruneShapes shapes_;
  int64_t n_params_ = 0;
  std::shared_ptr<TensorSource> source_;
  // Per layer: o_proj's and down_proj's calibration input rows, [n, n_heads head_dim] / [n, d_ff].
  std::vector<std::vector<float>> o_rows_, down_rows_;
  int64_t n_rows_ = 0;
  std::vector<InputStats> o_stats_, down_stats_;  // per layer, of those rows (the recoveries read them)
  std::vector<LayerScores> wanda_, flap_;
};

// The per-layer table (query heads, KV heads and channels kept of each layer) and the totals.
std::vector<std::string> format_prune_report(const PruneShapes& shapes, const PrunedModel& m, int64_t n_params_before);

}  // namespace tf

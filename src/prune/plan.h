// Which query heads and FFN channels each layer keeps, from their importance scores
// (importance.h) and a target. Host-only and deterministic.
//
// Units. A layer's FFN loses single channels (its gate and up rows and its down column:
// 3 d_model parameters each). Its attention loses query heads within their KV groups so that
// every group keeps the same number (the layer stays a valid GQA layout, every KV head and so
// the KV cache stay, and the unit is as fine as the layout allows): the unit is a "slice",
// the least important remaining query head of every group (n_kv_heads heads, their q rows and
// o columns: 2 head_dim d_model parameters each), and each group keeps at least one head.
// A layer with one query head per group (multi-head attention) loses whole groups instead:
// a query head with its K and V heads (4 head_dim d_model parameters).
//
// Ranking is global across layers, so layers are cut unevenly: units are taken in ascending
// order of score per unit removed (a head, a channel, or for a parameter target a parameter,
// each type's scores divided by their mean so heads and channels compare), skipping a unit
// that would pass the target or a layer's minimum (min_keep_pct of its heads, rounded up to
// whole slices, and of its channels). Within a layer the order is the scores' order, so the
// least important go first. Kept channels are then rounded up to a multiple of
// channel_multiple per layer (the most important removed ones come back), for kernels that
// want aligned widths.
#pragma once

#include <cstdint>
#include <vector>

namespace tf {

struct LayerShape {
  int64_t n_heads = 0, n_kv_heads = 0, d_ff = 0;
};

struct PruneShapes {
  int64_t d_model = 0, head_dim = 0;
  int64_t n_layer_params = 0;  // every parameter of the transformer layers (params_pct's base)
  std::vector<LayerShape> layers;
};

struct LayerScores {
  std::vector<double> heads;     // [n_heads] query heads
  std::vector<double> channels;  // [d_ff]
};

struct PlanTarget {
  double heads_pct = 0;   // of all query heads
  double ffn_pct = 0;     // of all FFN channels
  double params_pct = 0;  // of n_layer_params, heads and channels ranked together (not with the two above)
  double min_keep_pct = 10;
  int64_t channel_multiple = 8;
};

struct LayerKeep {
  std::vector<int32_t> heads;     // kept query heads, ascending
  std::vector<int32_t> kv_heads;  // kept KV heads, ascending
  std::vector<int32_t> channels;  // kept FFN channels, ascending
};

// Throws tf::Error for a negative or >= 100 percentage or params_pct combined with the others.
void check_plan_target(const PlanTarget& t);
// Checks t (check_plan_target), then plans.
std::vector<LayerKeep> plan_pruning(const PruneShapes& shapes, const std::vector<LayerScores>& scores,
                                    const PlanTarget& target);

// Parameters the kept heads and channels of `keep` remove from `shapes` (q, k, v, o, gate,
// up, down; biases not counted).
int64_t removed_params(const PruneShapes& shapes, const std::vector<LayerKeep>& keep);

struct LayerCut {
  int64_t head_units = 0;  // head units removed (slices of n_kv_heads heads, or whole groups)
  int64_t channels = 0;    // FFN channels removed
};

// Per layer, its first cut.head_units head units and its cut.channels lowest-scoring channels
// removed, in plan_pruning's order within the layer.
std::vector<LayerKeep> keep_of_cuts(const PruneShapes& shapes, const std::vector<LayerScores>& scores,
                                    const std::vector<LayerCut>& cuts);

// Nothing removed: every head, KV head and channel of every layer.
std::vector<LayerKeep> keep_all(const PruneShapes& shapes);

}  // namespace tf

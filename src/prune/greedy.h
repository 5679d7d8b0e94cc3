// Loss-driven allocation of a parameter cut across layers (`twofold prune --allocate greedy`).
//
// plan_pruning ranks every unit of every layer on one scale, so how much each layer loses
// rests on how the scores of different layers and unit types compare. Here the scores only
// order the units within a layer (the same order as plan_pruning's: the weakest head slice,
// the weakest channels first); how much each layer loses is chosen by a loss. The cut grows
// in steps: at each step every layer offers two candidates, one more head unit (a slice, or a
// whole group for multi-head attention) and about step_pct of the layers' parameters more of
// its channels (a multiple of channel_multiple), each the model so far plus that cut, and the
// candidate with the least loss increase per parameter removed is taken. Steps repeat until
// no candidate fits in what is left of the target; the last step's channel candidates shrink
// to fit. Each step costs up to two loss evaluations per layer.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "prune/plan.h"

namespace tf {

struct GreedyStep {
  int32_t layer = 0;
  bool heads = false;     // a head unit, or channels
  int64_t params = 0;     // removed by this step
  double loss = 0;        // the model's loss after it
  int64_t candidates = 0; // evaluated at this step
};

struct GreedyPlan {
  std::vector<LayerKeep> keep;
  std::vector<LayerCut> cuts;
  std::vector<GreedyStep> steps;
  double loss = 0;             // of the model that keeps `keep`
  int64_t evaluations = 0;     // calls to the loss, the unpruned model's included
};

// The loss of the model that keeps `keep` (e.g. the mean negative log-likelihood on held-out
// calibration tokens after the recovery). Lower is better.
using CutLoss = std::function<double(const std::vector<LayerKeep>&)>;

// t.params_pct of shapes.n_layer_params at most (t.heads_pct and t.ffn_pct must be 0), every
// layer keeping t.min_keep_pct of its heads (whole units) and channels, channels kept a
// multiple of t.channel_multiple (of those a layer has, when it has fewer than that).
// on_step (may be empty) sees each step as it is taken.
GreedyPlan greedy_plan(const PruneShapes& shapes, const std::vector<LayerScores>& scores, const PlanTarget& t,
                       double step_pct, const CutLoss& loss,
                       const std::function<void(const GreedyStep&)>& on_step = {});

}  // namespace tf

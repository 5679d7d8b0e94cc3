#include "prune/greedy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace tf {

namespace {

struct LayerLimits {
  int64_t unit_heads = 0, unit_params = 0, max_units = 0;  // head units
  int64_t max_channels = 0;                                // channels it may lose in all
};

// What plan_pruning allows a layer: min_keep_pct of its heads in whole units (at least one),
// and of its channels, rounded up to the channel multiple.
LayerLimits limits_of(const PruneShapes& s, const LayerShape& l, const PlanTarget& t) {
  const int64_t qpg = l.n_heads / l.n_kv_heads;
  LayerLimits o;
  o.unit_heads = qpg == 1 ? 1 : l.n_kv_heads;
  o.unit_params = qpg == 1 ? 4 * s.head_dim * s.d_model : l.n_kv_heads * 2 * s.head_dim * s.d_model;
  const int64_t min_heads =
      std::max<int64_t>(o.unit_heads, int64_t(std::ceil(t.min_keep_pct / 100 * double(l.n_heads) / double(o.unit_heads))) *
                                          o.unit_heads);
  o.max_units = std::max<int64_t>(0, (l.n_heads - min_heads) / o.unit_heads);
  int64_t min_channels = std::max<int64_t>(1, int64_t(std::ceil(t.min_keep_pct / 100 * double(l.d_ff))));
  min_channels = std::min(l.d_ff, (min_channels + t.channel_multiple - 1) / t.channel_multiple * t.channel_multiple);
  o.max_channels = l.d_ff - min_channels;
  return o;
}

}  // namespace

GreedyPlan greedy_plan(const PruneShapes& s, const std::vector<LayerScores>& scores, const PlanTarget& t,
                       double step_pct, const CutLoss& loss, const std::function<void(const GreedyStep&)>& on_step) {
  check_plan_target(t);
  if (t.heads_pct > 0 || t.ffn_pct > 0) fail("the greedy allocation takes a parameter target (--target-params) only");
  if (!(step_pct > 0)) fail("--greedy-step must be positive, got {}", step_pct);
  TF_ASSERT(scores.size() == s.layers.size(), "greedy_plan: {} layers of scores for {} layers", scores.size(),
            s.layers.size());
  const int64_t n_layers = int64_t(s.layers.size());
  std::vector<LayerLimits> lim;
  for (const LayerShape& l : s.layers) lim.push_back(limits_of(s, l, t));
  const double budget = t.params_pct / 100 * double(s.n_layer_params);
  const double step = step_pct / 100 * double(s.n_layer_params);
  const int64_t mult = t.channel_multiple;

  GreedyPlan g;
  g.cuts.assign(size_t(n_layers), LayerCut{});
  g.keep = keep_of_cuts(s, scores, g.cuts);
  g.loss = loss(g.keep);
  g.evaluations = 1;
  double used = 0;
  for (;;) {
    const double left = budget - used;
    GreedyStep best{.loss = std::numeric_limits<double>::infinity()};
    double best_cost = std::numeric_limits<double>::infinity();
    std::vector<LayerCut> best_cuts;
    auto consider = [&](int32_t il, bool heads, const std::vector<LayerCut>& cuts, int64_t params) {
      const std::vector<LayerKeep> keep = keep_of_cuts(s, scores, cuts);
      const double l = loss(keep);
      ++g.evaluations;
      ++best.candidates;
      const double cost = (l - g.loss) / double(params);
      if (cost < best_cost) {
        best_cost = cost;
        best.layer = il;
        best.heads = heads;
        best.params = params;
        best.loss = l;
        best_cuts = cuts;
      }
    };
    for (int32_t il = 0; il < int32_t(n_layers); ++il) {
      const LayerShape& l = s.layers[size_t(il)];
      const LayerCut c = g.cuts[size_t(il)];
      if (c.head_units < lim[size_t(il)].max_units && double(lim[size_t(il)].unit_params) <= left + 1e-9) {
        std::vector<LayerCut> cuts = g.cuts;
        ++cuts[size_t(il)].head_units;
        consider(il, true, cuts, lim[size_t(il)].unit_params);
      }
      // About `step` more parameters of channels (at least one multiple), within what is left
      // and the layer's minimum; the layer keeps a multiple of `mult`.
      const int64_t kept = l.d_ff - c.channels, min_kept = l.d_ff - lim[size_t(il)].max_channels;
      const int64_t want = std::max<int64_t>(mult, int64_t(step / double(3 * s.d_model)));
      int64_t new_kept = std::max(min_kept, (kept - want) / mult * mult);
      while (new_kept < kept && double((kept - new_kept) * 3 * s.d_model) > left + 1e-9) new_kept += mult;
      new_kept = std::min(new_kept, kept);
      if (new_kept < kept) {
        std::vector<LayerCut> cuts = g.cuts;
        cuts[size_t(il)].channels = l.d_ff - new_kept;
        consider(il, false, cuts, (kept - new_kept) * 3 * s.d_model);
      }
    }
    if (best_cuts.empty()) break;
    g.cuts = std::move(best_cuts);
    g.loss = best.loss;
    used += double(best.params);
    g.steps.push_back(best);
    if (on_step) on_step(best);
  }
  g.keep = keep_of_cuts(s, scores, g.cuts);
  return g;
}

}  // namespace tf

// The loss-driven allocation (src/prune/greedy.h) on hand-built losses, and keep_of_cuts
// (plan.h) against plan_pruning's order within a layer: the greedy step takes the cut whose
// loss rises least per parameter, never passes the target or a layer's minimum, keeps channel
// widths a multiple, and spreads the cut when each layer's loss grows faster than linearly.
#include <gtest/gtest.h>

#include <cmath>

#include "prune/greedy.h"
#include "plan_fixtures.h"
#include "test_util.h"

namespace tf {
namespace {

using prune_test::ramp;
using prune_test::shapes;

// Per layer: heads and channels removed, from the kept lists.
struct Removed {
  int64_t heads, channels;
};
std::vector<Removed> removed_of(const PruneShapes& s, const std::vector<LayerKeep>& keep) {
  std::vector<Removed> out;
  for (size_t il = 0; il < s.layers.size(); ++il)
    out.push_back({s.layers[il].n_heads - int64_t(keep[il].heads.size()),
                   s.layers[il].d_ff - int64_t(keep[il].channels.size())});
  return out;
}

TEST(PruneGreedy, KeepOfCutsFollowsTheScoresWithinALayer) {
  const PruneShapes s = shapes({{4, 2, 8}});
  // Group 0 = heads 0, 1; group 1 = heads 2, 3. Weakest: head 1 in group 0, head 2 in group 1.
  const std::vector<LayerScores> sc = {{{5, 1, 0.5, 9}, {8, 7, 1, 2, 6, 5, 4, 3}}};
  const auto k = keep_of_cuts(s, sc, {LayerCut{.head_units = 1, .channels = 3}});
  EXPECT_EQ(k[0].heads, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(k[0].kv_heads, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(k[0].channels, (std::vector<int32_t>{0, 1, 4, 5, 6}));  // channels 2, 3, 7 score lowest
  // The same layer under plan_pruning's head target removes the same slice.
  const auto p = plan_pruning(s, sc, PlanTarget{.heads_pct = 50});
  EXPECT_EQ(p[0].heads, k[0].heads);
  EXPECT_EQ(keep_of_cuts(s, sc, {LayerCut{}})[0].channels.size(), 8u);
}

TEST(PruneGreedy, EachStepTakesTheLayerWhoseCutCostsLeast) {
  // Three equal layers; the loss charges each removed channel by its layer's price: layer 1's
  // channels are cheapest, then layer 2's. Heads are dear everywhere.
  const PruneShapes s = shapes({{4, 2, 64}, {4, 2, 64}, {4, 2, 64}});
  const std::vector<LayerScores> sc(3, LayerScores{ramp(4, 1), ramp(64, 1)});
  const double price[3] = {3, 1, 2};
  int64_t calls = 0;
  const CutLoss loss = [&](const std::vector<LayerKeep>& keep) {
    ++calls;
    double l = 0;
    for (size_t il = 0; il < 3; ++il) {
      l += price[il] * double(64 - int64_t(keep[il].channels.size()));
      l += 1000.0 * double(4 - int64_t(keep[il].heads.size()));
    }
    return l;
  };
  // 16 channels of 3 * 16 parameters per step; the target is 32 channels' worth.
  const double step_pct = 100.0 * 16 * 48 / double(s.n_layer_params);
  const GreedyPlan g = greedy_plan(s, sc, PlanTarget{.params_pct = 2 * step_pct + 1e-6, .min_keep_pct = 10},
                                   step_pct, loss);
  ASSERT_EQ(g.steps.size(), 2u);
  EXPECT_EQ(g.steps[0].layer, 1);
  EXPECT_FALSE(g.steps[0].heads);
  EXPECT_EQ(g.steps[0].params, 16 * 48);
  EXPECT_EQ(g.steps[1].layer, 1);
  const auto r = removed_of(s, g.keep);
  EXPECT_EQ(r[0].channels, 0);
  EXPECT_EQ(r[1].channels, 32);
  EXPECT_EQ(r[2].channels, 0);
  for (const Removed& x : r) EXPECT_EQ(x.heads, 0);
  EXPECT_DOUBLE_EQ(g.loss, 32.0);
  EXPECT_EQ(g.evaluations, calls);
  // Channels go in the layer's score order: the 32 lowest of the ramp.
  EXPECT_EQ(g.keep[1].channels.front(), 32);
  EXPECT_LE(removed_params(s, g.keep), int64_t(g.steps.size()) * 16 * 48);
}

TEST(PruneGreedy, ConvexLossesSpreadTheCutAndMinimumsHold) {
  // Each layer's loss grows with the square of its removed channels, layer 0's twice as fast:
  // the greedy cut ends about sqrt(2) times deeper in layer 1, and no layer passes min_keep.
  const PruneShapes s = shapes({{2, 2, 96}, {2, 2, 96}});  // multi-head attention: heads go in whole groups
  const std::vector<LayerScores> sc(2, LayerScores{ramp(2, 1), ramp(96, 1)});
  const CutLoss loss = [&](const std::vector<LayerKeep>& keep) {
    const double c0 = double(96 - int64_t(keep[0].channels.size())), c1 = double(96 - int64_t(keep[1].channels.size()));
    double heads = 0;
    for (const LayerKeep& k : keep) heads += 1e6 * double(2 - int64_t(k.heads.size()));
    return 2 * c0 * c0 + c1 * c1 + heads;
  };
  const double step_pct = 100.0 * 8 * 48 / double(s.n_layer_params);
  const GreedyPlan g =
      greedy_plan(s, sc, PlanTarget{.params_pct = 60, .min_keep_pct = 25, .channel_multiple = 8}, step_pct, loss);
  const auto r = removed_of(s, g.keep);
  EXPECT_EQ(r[0].heads + r[1].heads, 0);
  for (const Removed& x : r) {
    EXPECT_EQ((96 - x.channels) % 8, 0);
    EXPECT_LE(x.channels, 96 - 24);  // 25% of 96 kept
  }
  EXPECT_GT(r[1].channels, r[0].channels);
  EXPECT_GT(r[0].channels, 0);
  EXPECT_LE(removed_params(s, g.keep), int64_t(0.60 * double(s.n_layer_params)));
  // Not stopped early: no layer can lose another multiple within the target and its minimum.
  const int64_t left = int64_t(0.60 * double(s.n_layer_params)) - removed_params(s, g.keep);
  EXPECT_TRUE(left < 8 * 48 || (r[0].channels == 72 && r[1].channels == 72)) << left;
}

TEST(PruneGreedy, HeadUnitsCompeteWithChannelsPerParameter) {
  // One layer, GQA 4 heads / 2 KV heads (one slice: 2 heads, 2 * 2 * 4 * 16 = 256 parameters).
  // A slice costs 1 in loss, channels 1 each (48 parameters): the slice is cheaper per
  // parameter and goes first, then channels.
  const PruneShapes s = shapes({{4, 2, 64}});
  const std::vector<LayerScores> sc(1, LayerScores{ramp(4, 1), ramp(64, 1)});
  const CutLoss loss = [&](const std::vector<LayerKeep>& keep) {
    return double(4 - int64_t(keep[0].heads.size())) / 2 + double(64 - int64_t(keep[0].channels.size()));
  };
  const double step_pct = 100.0 * 8 * 48 / double(s.n_layer_params);
  const GreedyPlan g = greedy_plan(s, sc, PlanTarget{.params_pct = 100.0 * (256 + 8 * 48) / double(s.n_layer_params) + 1e-6},
                                   step_pct, loss);
  ASSERT_EQ(g.steps.size(), 2u);
  EXPECT_TRUE(g.steps[0].heads);
  EXPECT_EQ(g.steps[0].params, 256);
  EXPECT_FALSE(g.steps[1].heads);
  EXPECT_EQ(g.keep[0].heads.size(), 2u);
  EXPECT_EQ(g.keep[0].channels.size(), 56u);
}

TEST(PruneGreedy, RefusesHeadOrChannelTargets) {
  const PruneShapes s = shapes({{4, 2, 8}});
  const std::vector<LayerScores> sc = {{ramp(4, 1), ramp(8, 1)}};
  const CutLoss loss = [](const std::vector<LayerKeep>&) { return 0.0; };
  EXPECT_THROW(greedy_plan(s, sc, PlanTarget{.heads_pct = 50}, 1, loss), Error);
  EXPECT_THROW(greedy_plan(s, sc, PlanTarget{.params_pct = 10}, 0, loss), Error);
}

}  // namespace
}  // namespace tf

// The pruning plan (src/prune/plan.h), host-only: GQA slices within KV groups, whole groups
// for multi-head attention, global ranking across layers with per-layer minimums, the
// parameter target, channel rounding, and the importance scores on hand-made columns.
#include <gtest/gtest.h>

#include "prune/importance.h"
#include "prune/plan.h"
#include "plan_fixtures.h"
#include "test_util.h"

namespace tf {
namespace {

using prune_test::ramp;
using prune_test::shapes;

TEST(PrunePlan, KeepAllAndZeroTargetsKeepEverything) {
  const PruneShapes s = shapes({{4, 2, 8}, {4, 2, 8}});
  const std::vector<LayerScores> sc = {{ramp(4, 1), ramp(8, 1)}, {ramp(4, 1), ramp(8, 1)}};
  const auto k = plan_pruning(s, sc, PlanTarget{});
  ASSERT_EQ(k.size(), 2u);
  for (const LayerKeep& l : k) {
    EXPECT_EQ(l.heads, (std::vector<int32_t>{0, 1, 2, 3}));
    EXPECT_EQ(l.kv_heads, (std::vector<int32_t>{0, 1}));
    EXPECT_EQ(l.channels.size(), 8u);
  }
  EXPECT_EQ(removed_params(s, k), 0);
  EXPECT_EQ(removed_params(s, keep_all(s)), 0);
}

TEST(PrunePlan, GqaRemovesTheWeakestHeadOfEveryGroup) {
  // Groups {0, 1} and {2, 3}: the weakest of each (1 and 2) go together, every group keeps one.
  const PruneShapes s = shapes({{4, 2, 8}});
  const std::vector<LayerScores> sc = {{{5, 1, 2, 9}, ramp(8, 1)}};
  const auto k = plan_pruning(s, sc, PlanTarget{.heads_pct = 50, .min_keep_pct = 0});
  EXPECT_EQ(k[0].heads, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(k[0].kv_heads, (std::vector<int32_t>{0, 1}));
  // 75% would leave a group empty: one slice is all a 2-per-group layer can lose.
  const auto k2 = plan_pruning(s, sc, PlanTarget{.heads_pct = 75, .min_keep_pct = 0});
  EXPECT_EQ(k2[0].heads.size(), 2u);
}

TEST(PrunePlan, MultiHeadAttentionLosesWholeGroups) {
  const PruneShapes s = shapes({{4, 4, 8}});
  const std::vector<LayerScores> sc = {{{3, 1, 4, 2}, ramp(8, 1)}};
  const auto k = plan_pruning(s, sc, PlanTarget{.heads_pct = 50, .min_keep_pct = 0});
  EXPECT_EQ(k[0].heads, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(k[0].kv_heads, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(removed_params(s, k), 2 * 4 * 4 * 16);
}

TEST(PrunePlan, RanksAcrossLayersWithAMinimumPerLayer) {
  // Layer 0's channels all score below layer 1's: a 25% cut takes them from layer 0 only,
  // down to its minimum (25% of 8 = 2 kept), then from layer 1.
  const PruneShapes s = shapes({{4, 2, 8}, {4, 2, 8}});
  const std::vector<LayerScores> sc = {{ramp(4, 1), ramp(8, 0.5)}, {ramp(4, 1), ramp(8, 100)}};
  PlanTarget t{.ffn_pct = 25, .min_keep_pct = 25, .channel_multiple = 1};
  auto k = plan_pruning(s, sc, t);
  EXPECT_EQ(k[0].channels, (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_EQ(k[1].channels.size(), 8u);
  t.ffn_pct = 50;
  k = plan_pruning(s, sc, t);
  EXPECT_EQ(k[0].channels, (std::vector<int32_t>{6, 7}));
  EXPECT_EQ(k[1].channels, (std::vector<int32_t>{2, 3, 4, 5, 6, 7}));
}

TEST(PrunePlan, ChannelsRoundUpToTheMultiple) {
  const PruneShapes s = shapes({{4, 2, 16}});
  const std::vector<LayerScores> sc = {{ramp(4, 1), ramp(16, 1)}};
  const auto k = plan_pruning(s, sc, PlanTarget{.ffn_pct = 30, .min_keep_pct = 0, .channel_multiple = 8});
  // 30% of 16 is 5 channels removed, 11 left: a multiple of 8 brings all 16 back, of 4 twelve.
  EXPECT_EQ(k[0].channels.size(), 16u);
  const auto k4 = plan_pruning(s, sc, PlanTarget{.ffn_pct = 30, .min_keep_pct = 0, .channel_multiple = 4});
  EXPECT_EQ(k4[0].channels, (std::vector<int32_t>{4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}));
}

TEST(PrunePlan, ParameterTargetIsNotPassed) {
  const PruneShapes s = shapes({{8, 2, 64}, {8, 2, 64}, {8, 2, 64}});
  std::vector<LayerScores> sc;
  for (int il = 0; il < 3; ++il) sc.push_back({ramp(8, 1 + il), ramp(64, 1 + il)});
  for (double pct : {5.0, 10.0, 20.0, 30.0}) {
    const auto k = plan_pruning(s, sc, PlanTarget{.params_pct = pct, .min_keep_pct = 10, .channel_multiple = 1});
    const double removed = 100.0 * double(removed_params(s, k)) / double(s.n_layer_params);
    EXPECT_LE(removed, pct + 1e-9);
    EXPECT_GT(removed, pct - 2.0) << pct;  // the last unit that fits is one channel (48 parameters)
  }
}

TEST(PrunePlan, RefusesBadTargets) {
  const PruneShapes s = shapes({{4, 2, 8}});
  const std::vector<LayerScores> sc = {{ramp(4, 1), ramp(8, 1)}};
  EXPECT_CONTAINS(test::error_of([&] { plan_pruning(s, sc, PlanTarget{.heads_pct = 10, .params_pct = 10}); }),
                  "--target-params");
  EXPECT_CONTAINS(test::error_of([&] { plan_pruning(s, sc, PlanTarget{.ffn_pct = 100}); }), "--ffn");
  EXPECT_CONTAINS(test::error_of([&] { plan_pruning(s, sc, PlanTarget{.heads_pct = -1}); }), "--heads");
}

TEST(PruneImportance, ScoresFollowTheirDefinitions) {
  // w [2, 3], x [4, 3]: column 0 varies, column 1 is constant, column 2 is zero.
  const float w[] = {1, -2, 3, -1, 1, 0.5f};
  const float x[] = {1, 2, 0, -1, 2, 0, 3, 2, 0, 1, 2, 0};
  const auto wanda = column_scores(PruneScore::Wanda, w, 2, 3, x, 4);
  EXPECT_DOUBLE_EQ(wanda[0], 2 * std::sqrt(1 + 1 + 9 + 1.0));
  EXPECT_DOUBLE_EQ(wanda[1], 3 * 4.0);
  EXPECT_DOUBLE_EQ(wanda[2], 0);
  const auto flap = column_scores(PruneScore::Flap, w, 2, 3, x, 4);
  EXPECT_DOUBLE_EQ(flap[0], 2.0 * 2.0);  // var(1, -1, 3, 1) = 2, ||w||^2 = 2
  EXPECT_DOUBLE_EQ(flap[1], 0);          // constant input: bias compensation restores it
  EXPECT_DOUBLE_EQ(flap[2], 0);
  EXPECT_EQ(group_sums({1, 2, 3, 4}, 2), (std::vector<double>{3, 7}));
  EXPECT_EQ(parse_prune_score("flap", "--score"), PruneScore::Flap);
  EXPECT_CONTAINS(test::error_of([] { parse_prune_score("l1", "--score"); }), "--score");
}

}  // namespace
}  // namespace tf

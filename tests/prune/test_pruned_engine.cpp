// A pruned tiny-main folder loaded by the engine (per-layer heads, KV heads and FFN widths,
// o_proj / down_proj biases): without recovery it gives the logits of the unpruned shapes with
// the removed heads' and channels' o_proj / down_proj columns zero; with recovery it loads and
// its greedy ids through the batching engine equal those of each request alone.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "model/arch/cut_model.h"
#include "prune/prune_model.h"
#include "convert/tiny_inputs.h"
#include "engine/golden_util.h"
#include "test_util.h"
#include "twofold/engine.h"

namespace tf {
namespace {

using test::rel_l2;

const std::string kTiny = test::model_dir("tiny-main");

// `m` written with the source's shapes: removed heads' o_proj columns and removed channels'
// down_proj columns zero, everything else as in the source.
void write_zeroed(const PrunedModel& m, const std::string& out) {
  const nlohmann::json cfg = test::load_json(kTiny + "/config.json");
  std::vector<test::LayerCut> cuts;
  for (const LayerKeep& k : m.keep)
    cuts.push_back({.heads = test::complement(cfg["num_attention_heads"].get<int64_t>(), k.heads),
                    .channels = test::complement(cfg["intermediate_size"].get<int64_t>(), k.channels)});
  test::write_cut_model(kTiny, out, cuts, test::CutMode::Zero);
}

class PrunedEngine : public test::TempDirTest {};

TEST_F(PrunedEngine, PrunedFolderEqualsTheZeroedColumns) {
  const Pruner pruner(PruneParams{.in_dir = kTiny, .calib_ids = test::tiny_calib_ids(1024), .calib_rows = 1024});
  const PrunedModel m = pruner.build(pruner.plan(PruneScore::Flap, PlanTarget{.params_pct = 20}), Recovery::None);
  ASSERT_GT(m.n_layer_params_removed, 0);
  const std::string pruned = (dir_ / "pruned").string(), zeroed = (dir_ / "zeroed").string();
  pruner.write(m, pruned);
  write_zeroed(m, zeroed);
  Engine a(EngineOptions{.model_dir = pruned, .max_seqs = 1}), b(EngineOptions{.model_dir = zeroed, .max_seqs = 1});
  for (const auto& p : test::tiny_prompts()) {
    const double err = rel_l2(a.score(p, true), b.score(p, true));
    std::printf("pruned vs zeroed: logits rel L2 %.2e\n", err);
    EXPECT_LT(err, 1e-5);  // the same sums without the zero terms, in another order
  }
}

TEST_F(PrunedEngine, RecoveredFolderRunsThroughTheBatchingEngine) {
  const Pruner pruner(PruneParams{.in_dir = kTiny, .calib_ids = test::tiny_calib_ids(1024), .calib_rows = 1024});
  for (Recovery r : {Recovery::Bias, Recovery::Lsq}) {
    SCOPED_TRACE(std::string(recovery_name(r)));
    const PrunedModel m = pruner.build(pruner.plan(PruneScore::Wanda, PlanTarget{.params_pct = 20}), r);
    const std::string out = (dir_ / std::string(recovery_name(r))).string();
    pruner.write(m, out);
    Engine alone(EngineOptions{.model_dir = out, .max_seqs = 1}), batched(EngineOptions{.model_dir = out, .max_seqs = 8});
    const auto a = test::tiny_greedy_ids(alone, /*one_at_a_time=*/true);
    EXPECT_EQ(a, test::tiny_greedy_ids(batched, /*one_at_a_time=*/false));
    for (const auto& ids : a) EXPECT_EQ(ids.size(), 12u);
    // The recovered model stays near the source (a 20% cut moves tiny-main's logits by about a third).
    Engine src(EngineOptions{.model_dir = kTiny, .max_seqs = 1});
    EXPECT_LT(rel_l2(alone.score(test::tiny_prompts()[0], false), src.score(test::tiny_prompts()[0], false)), 0.6);
  }
}

}  // namespace
}  // namespace tf

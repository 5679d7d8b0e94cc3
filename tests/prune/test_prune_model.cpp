// Pruned tiny-main end to end (src/prune/prune_model.h): nothing removed writes the source's
// tensors and logits bit for bit; heads and channels that contribute nothing (their o_proj /
// down_proj columns zero) are what the scores remove first, and removing them leaves the
// output as it was.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <cstring>

#include "model/arch/cut_model.h"
#include "model/safetensors.h"
#include "model/tensor_source.h"
#include "prune/prune_model.h"
#include "convert/tiny_inputs.h"
#include "test_util.h"
#include "twofold/engine.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
const std::string kTiny = test::model_dir("tiny-main");

class PruneModel : public test::TempDirTest {};

TEST_F(PruneModel, NothingRemovedIsTheSourceBitForBit) {
  const Pruner pruner(PruneParams{.in_dir = kTiny, .calib_ids = test::tiny_calib_ids(512), .calib_rows = 512});
  const std::vector<LayerKeep> keep = pruner.plan(PruneScore::Flap, PlanTarget{});
  for (Recovery r : {Recovery::None, Recovery::Bias, Recovery::Lsq}) {
    SCOPED_TRACE(std::string(recovery_name(r)));
    const PrunedModel m = pruner.build(keep, r);
    EXPECT_EQ(m.n_layer_params_removed, 0);
    EXPECT_EQ(m.n_params, pruner.n_params());
    const std::string out = (dir_ / std::string(recovery_name(r))).string();
    pruner.write(m, out);
    EXPECT_EQ(test::load_json(out + "/config.json"), test::load_json(kTiny + "/config.json"));
    const auto src = open_tensor_source(kTiny), dst = open_tensor_source(out);
    ASSERT_EQ(dst->all().size(), src->all().size());
    for (const auto& [name, t] : src->all()) {
      const TensorInfo& u = dst->get(name);
      EXPECT_EQ(u.dtype, t->dtype) << name;
      EXPECT_EQ(u.shape, t->shape) << name;
      ASSERT_EQ(u.nbytes, t->nbytes) << name;
      EXPECT_EQ(std::memcmp(u.data, t->data, t->nbytes), 0) << name;
    }
    Engine a(EngineOptions{.model_dir = kTiny, .max_seqs = 1}), b(EngineOptions{.model_dir = out, .max_seqs = 1});
    for (const auto& p : test::tiny_prompts()) EXPECT_EQ(a.score(p, true), b.score(p, true));
  }
}

// tiny-main with layer 2's query heads 1 and 3 (one in each KV group) and layer 4's channels
// 0..7 dead: their o_proj / down_proj columns zero, so they add nothing to the output.
std::string dead_copy(const fs::path& dir) {
  const fs::path out = dir / "dead";
  std::vector<test::LayerCut> cuts(5);
  cuts[2].heads = {1, 3};
  cuts[4].channels = {0, 1, 2, 3, 4, 5, 6, 7};
  test::write_cut_model(kTiny, out, cuts, test::CutMode::Zero);
  return out.string();
}

TEST_F(PruneModel, DeadHeadsAndChannelsGoFirst) {
  const std::string dead = dead_copy(dir_);
  const Pruner pruner(PruneParams{.in_dir = dead, .calib_ids = test::tiny_calib_ids(512), .calib_rows = 512});
  for (PruneScore s : {PruneScore::Wanda, PruneScore::Flap}) {
    SCOPED_TRACE(std::string(prune_score_name(s)));
    // 2 of 24 heads and 8 of 3456 channels: exactly one slice and the dead channels.
    const std::vector<LayerKeep> keep =
        pruner.plan(s, PlanTarget{.heads_pct = 100.0 * 2 / 24, .ffn_pct = 100.0 * 8 / 3456, .channel_multiple = 8});
    for (int il = 0; il < 6; ++il) {
      const std::vector<int32_t> heads = il == 2 ? std::vector<int32_t>{0, 2} : std::vector<int32_t>{0, 1, 2, 3};
      EXPECT_EQ(keep[size_t(il)].heads, heads);
      EXPECT_EQ(keep[size_t(il)].kv_heads, (std::vector<int32_t>{0, 1}));
      EXPECT_EQ(keep[size_t(il)].channels.size(), il == 4 ? 568u : 576u);
      if (il == 4) {
        EXPECT_EQ(keep[4].channels.front(), 8);
      }
    }
    const PrunedModel m = pruner.build(keep, Recovery::None);
    EXPECT_EQ(m.n_layer_params_removed, 2 * 2 * 64 * 256 + 8 * 3 * 256);
    EXPECT_EQ(m.config["layer_num_attention_heads"], nlohmann::json({4, 4, 2, 4, 4, 4}));
    EXPECT_EQ(m.config["layer_num_key_value_heads"], nlohmann::json({2, 2, 2, 2, 2, 2}));
    EXPECT_EQ(m.config["layer_intermediate_size"], nlohmann::json({576, 576, 576, 576, 568, 576}));
  }
}

}  // namespace
}  // namespace tf

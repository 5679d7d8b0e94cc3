// A pruned tiny-main folder loaded by the engine (per-layer heads, KV heads and FFN widths,
// o_proj / down_proj biases): without recovery it gives the logits of the unpruned shapes with
// the removed heads' and channels' o_proj / down_proj columns zero; with recovery it loads and
// its greedy ids through the batching engine equal those of each request alone.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "model/write_safetensors.h"
#include "prune/prune_model.h"
#include "convert/tiny_inputs.h"
#include "test_util.h"
#include "twofold/engine.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
const std::string kTiny = test::model_dir("tiny-main");

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) d += double(a[i] - b[i]) * (a[i] - b[i]), n += double(b[i]) * b[i];
  return std::sqrt(d / n);
}

std::vector<std::vector<int32_t>> greedy_ids(Engine& e, bool one_at_a_time) {
  std::vector<RequestId> ids;
  for (const auto& p : test::tiny_prompts()) {
    ids.push_back(e.add_request({.prompt_ids = p, .sampling = {.temperature = 0, .max_tokens = 12, .ignore_eos = true}}));
    if (one_at_a_time)
      while (e.has_unfinished()) e.step();
  }
  while (e.has_unfinished()) e.step();
  std::vector<std::vector<int32_t>> out;
  for (RequestId id : ids) out.push_back(e.output_ids(id));
  return out;
}

// `m` written with the source's shapes: removed heads' o_proj columns and removed channels'
// down_proj columns zero, everything else as in the source.
void write_zeroed(const PrunedModel& m, const std::string& out) {
  fs::create_directories(out);
  for (const auto& e : fs::directory_iterator(kTiny))
    if (e.path().filename() != "model.safetensors") fs::copy_file(e.path(), out / e.path().filename());
  const auto src = open_tensor_source(kTiny);
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<TensorToWrite> w;
  for (const auto& [name, t] : src->all()) {
    bytes.emplace_back(t->data, t->data + t->nbytes);
    const bool o = name.ends_with("o_proj.weight"), d = name.ends_with("down_proj.weight");
    if (o || d) {
      const size_t il = std::stoul(name.substr(13, name.find('.', 13) - 13));
      std::vector<bool> kept(size_t(t->shape[1]), false);
      if (o)
        for (int32_t h : m.keep[il].heads)
          for (int j = 0; j < 64; ++j) kept[size_t(h * 64 + j)] = true;
      else
        for (int32_t c : m.keep[il].channels) kept[size_t(c)] = true;
      for (int64_t r = 0; r < t->shape[0]; ++r)
        for (int64_t c = 0; c < t->shape[1]; ++c)
          if (!kept[size_t(c)]) std::memset(bytes.back().data() + size_t(r * t->shape[1] + c) * dtype_size(t->dtype), 0, dtype_size(t->dtype));
    }
    w.push_back({.name = name, .dtype = t->dtype, .shape = t->shape, .data = bytes.back().data(), .nbytes = t->nbytes});
  }
  write_safetensors(out + "/model.safetensors", w);
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
    const auto a = greedy_ids(alone, true);
    EXPECT_EQ(a, greedy_ids(batched, false));
    for (const auto& ids : a) EXPECT_EQ(ids.size(), 12u);
    // The recovered model stays near the source (a 20% cut moves tiny-main's logits by about a third).
    Engine src(EngineOptions{.model_dir = kTiny, .max_seqs = 1});
    EXPECT_LT(rel_l2(alone.score(test::tiny_prompts()[0], false), src.score(test::tiny_prompts()[0], false)), 0.6);
  }
}

}  // namespace
}  // namespace tf

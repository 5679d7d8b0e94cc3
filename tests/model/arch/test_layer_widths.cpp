// Per-layer widths (docs/PER_LAYER_WIDTHS.md) on the reference and CPU backends: layer_*
// arrays equal to the scalars change nothing, bit for bit; tiny-main with heads, whole KV
// groups and MLP channels physically removed (cut_model.h) computes what the uniform model
// with those heads' o_proj columns and those channels' down_proj columns zeroed computes,
// through score, the batching engine and tensor parallelism; the optional o_proj / down_proj
// biases are added where they belong; random weights follow the arrays; the KV pool holds
// each layer's own KV heads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "backend/backend.h"
#include "engine/golden_util.h"
#include "engine/greedy_util.h"
#include "model/arch/cut_model.h"
#include "model/arch/registry.h"
#include "model/arch/tp_shard.h"
#include "twofold/engine.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::CutMode;

// Logits of models that differ only in the order of F32 sums (fewer columns in o_proj and
// down_proj, each removed term an exact zero) agree to a few ulps of the row's scale.
constexpr double kRelTol = 1e-5;

// max_j |a_j - b_j| / max_j |b_j| over rows of n.
double worst_row_err(const std::vector<float>& a, const std::vector<float>& b, int64_t n) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t r = 0; r * size_t(n) < std::min(a.size(), b.size()); ++r) {
    double diff = 0, scale = 0;
    for (int64_t j = 0; j < n; ++j) {
      diff = std::max(diff, std::fabs(double(a[r * n + j]) - b[r * n + j]));
      scale = std::max(scale, std::fabs(double(b[r * n + j])));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

EngineOptions options(const fs::path& dir, const std::string& backend, int tp = 1) {
  return EngineOptions{.model_dir = dir.string(), .backend = backend, .max_seqs = 8, .tensor_parallel = tp};
}

// Every golden prompt's logits at every position.
std::vector<std::vector<float>> score_all(Engine& e, const std::vector<test::GoldenPrompt>& prompts) {
  std::vector<std::vector<float>> out;
  for (const auto& g : prompts) out.push_back(e.score(g.input_ids, /*all_positions=*/true));
  return out;
}

class LayerWidths : public test::TempDirTest {
 protected:
  const std::string tiny_ = test::model_dir("tiny-main");
  const std::vector<test::GoldenPrompt> prompts_ = test::load_golden("tiny-main");
};

class LayerWidthsOnBackend : public LayerWidths, public ::testing::WithParamInterface<std::string> {};

// Arrays that repeat the scalars: the same weights, the same ops, bit-identical logits.
TEST_P(LayerWidthsOnBackend, ArraysEqualToTheScalarsGiveBitIdenticalLogits) {
  const fs::path dir = dir_ / "arrays";
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(tiny_))
    if (e.path().filename() != "config.json") fs::create_symlink(e.path(), dir / e.path().filename());
  json cfg = test::load_json(tiny_ + "/config.json");
  cfg["layer_num_attention_heads"] = std::vector<int>(6, 4);
  cfg["layer_num_key_value_heads"] = std::vector<int>(6, 2);
  cfg["layer_intermediate_size"] = std::vector<int>(6, 576);
  std::ofstream(dir / "config.json") << cfg.dump();

  Engine plain(options(tiny_, GetParam())), arrays(options(dir, GetParam()));
  const auto a = score_all(plain, prompts_), b = score_all(arrays, prompts_);
  for (size_t p = 0; p < a.size(); ++p) {
    ASSERT_EQ(a[p].size(), b[p].size());
    EXPECT_EQ(std::memcmp(a[p].data(), b[p].data(), a[p].size() * sizeof(float)), 0) << prompts_[p].name;
  }
  EXPECT_EQ(test::greedy_batched(plain, prompts_), test::greedy_batched(arrays, prompts_));
}

// Heads, KV groups and channels removed = the same heads and channels contributing zero.
TEST_P(LayerWidthsOnBackend, RemovedHeadsAndChannelsEqualZeroedOnes) {
  const auto cut = test::tiny_main_cut();
  test::write_cut_model(tiny_, dir_ / "removed", cut, CutMode::Remove);
  test::write_cut_model(tiny_, dir_ / "zeroed", cut, CutMode::Zero);
  const ModelConfig c = load_model_config((dir_ / "removed").string());
  ASSERT_TRUE(c.non_uniform());
  EXPECT_EQ(c.layer_n_heads, (std::vector<int64_t>{4, 2, 2, 2, 2, 4}));
  EXPECT_EQ(c.layer_n_kv_heads, (std::vector<int64_t>{2, 2, 1, 2, 1, 2}));
  EXPECT_EQ(c.layer_d_ff, (std::vector<int64_t>{576, 512, 384, 576, 288, 376}));

  Engine removed(options(dir_ / "removed", GetParam())), zeroed(options(dir_ / "zeroed", GetParam()));
  // The pruned model really is smaller: 2 heads' q and o and 1 KV group's k and v go per cut.
  const int64_t d = 256, hd = 64, heads_cut = 2 + 2 + 2 + 2, kv_cut = 2, ff_cut = 64 + 192 + 288 + 200;
  EXPECT_EQ(zeroed.model().n_params() - removed.model().n_params(), heads_cut * 2 * hd * d + kv_cut * 2 * hd * d + ff_cut * 3 * d);
  const auto a = score_all(removed, prompts_), b = score_all(zeroed, prompts_);
  double worst = 0;
  for (size_t p = 0; p < a.size(); ++p) worst = std::max(worst, worst_row_err(a[p], b[p], c.n_vocab));
  std::printf("[ note ] %s: worst relative logit error removed vs zeroed %.2g\n", GetParam().c_str(), worst);
  EXPECT_LE(worst, kRelTol);
  // The cut matters: the uncut model's logits are far from both.
  Engine full(options(tiny_, GetParam()));
  EXPECT_GT(worst_row_err(score_all(full, prompts_)[0], b[0], c.n_vocab), 100 * kRelTol);
  EXPECT_EQ(test::greedy_batched(removed, prompts_), test::greedy_batched(zeroed, prompts_));
}

INSTANTIATE_TEST_SUITE_P(Backends, LayerWidthsOnBackend, ::testing::Values("cpu", "ref"));

// A pruned model's KV pool holds each layer's own KV heads, and the planner counts them.
TEST_F(LayerWidths, KvPoolHoldsEachLayersKvHeads) {
  test::write_cut_model(tiny_, dir_ / "removed", test::tiny_main_cut(), CutMode::Remove);
  Engine removed(options(dir_ / "removed", "cpu")), full(options(tiny_, "cpu"));
  // F32 KV on the CPU: 2 (K, V) x head_dim 64 x 4 bytes per KV head and token
  EXPECT_EQ(full.kv_bytes_per_token(), 6 * 2 * 512);
  EXPECT_EQ(removed.kv_bytes_per_token(), (2 + 2 + 1 + 2 + 1 + 2) * 512);
  EXPECT_EQ(load_model_config((dir_ / "removed").string()).kv_bytes_per_token(4), removed.kv_bytes_per_token());
}

// Tensor parallelism cuts each layer by its own widths: TP = 2 gives TP = 1's logits (the
// layers with one KV head hold it on both ranks); TP = 4 is refused naming the layer whose
// 2 query heads do not split 4 ways.
TEST_F(LayerWidths, TensorParallelShardsEachLayer) {
  test::write_cut_model(tiny_, dir_ / "removed", test::tiny_main_cut(), CutMode::Remove);
  const ModelConfig c = load_model_config((dir_ / "removed").string());
  const TpShard s = tp_shard(c, 1, 2);
  ASSERT_EQ(s.layers.size(), 6u);
  EXPECT_EQ(s.layer(2).n_heads, 1);
  EXPECT_EQ(s.layer(2).n_kv_heads, 1);  // replicated
  EXPECT_EQ(s.layer(2).kv_head0, 0);
  EXPECT_EQ(s.layer(4).d_ff, 144);
  EXPECT_EQ(s.layer(4).ff0, 144);
  EXPECT_EQ(s.max_d_ff(), 288);
  EXPECT_TRUE(s.kv_heads_per_layer().empty());  // one KV head per rank in every layer

  Engine one(options(dir_ / "removed", "cpu")), two(options(dir_ / "removed", "cpu", 2));
  const auto a = score_all(one, prompts_), b = score_all(two, prompts_);
  double worst = 0;
  for (size_t p = 0; p < a.size(); ++p) worst = std::max(worst, worst_row_err(b[p], a[p], c.n_vocab));
  EXPECT_LE(worst, kRelTol);
  EXPECT_EQ(test::greedy_batched(one, prompts_), test::greedy_batched(two, prompts_));

  const std::string msg = test::error_of([&] { Engine e(options(dir_ / "removed", "cpu", 4)); });
  EXPECT_CONTAINS(msg, "tensor parallel size 4 does not divide layer 1's num_attention_heads "
                       "(layer_num_attention_heads) = 2");
  test::write_cut_model(tiny_, dir_ / "odd", {{}, {}, {}, {.channels = {7}}}, CutMode::Remove);
  EXPECT_CONTAINS(test::error_of([&] { Engine e(options(dir_ / "odd", "cpu", 2)); }),
                  "does not divide layer 3's intermediate_size (layer_intermediate_size) = 575");
}

// The optional biases of o_proj and down_proj (a pruned model's bias compensation).
class LayerBiases : public LayerWidths {
 protected:
  // Small random biases for layers 1 and 3 (values of the size of the layers' outputs).
  static std::vector<test::RawTensor> biases(bool o, bool down) {
    std::mt19937 rng(5);
    std::normal_distribution<float> dist(0.0f, 0.05f);
    std::vector<test::RawTensor> out;
    for (int il : {1, 3}) {
      for (const auto& [want, name] : {std::pair{o, "self_attn.o_proj.bias"}, std::pair{down, "mlp.down_proj.bias"}}) {
        if (!want) continue;
        std::vector<float> b(256);
        for (float& x : b) x = dist(rng);
        out.push_back(test::bf16_vector("model.layers." + std::to_string(il) + "." + name, b));
      }
    }
    return out;
  }
};

// CPU against the reference backend with both biases, on the uncut and the cut model; the
// biases change the logits (they are not ignored).
TEST_F(LayerBiases, CpuEqualsTheReference) {
  for (bool cut : {false, true}) {
    SCOPED_TRACE(cut ? "cut" : "uncut");
    const fs::path dir = dir_ / (cut ? "cut" : "uncut");
    test::write_cut_model(tiny_, dir, cut ? test::tiny_main_cut() : std::vector<test::LayerCut>{}, CutMode::Remove,
                          biases(true, true));
    Engine cpu(options(dir, "cpu")), ref(options(dir, "ref"));
    const auto a = score_all(cpu, prompts_), b = score_all(ref, prompts_);
    for (size_t p = 0; p < a.size(); ++p) EXPECT_LE(worst_row_err(a[p], b[p], 8192), kRelTol) << prompts_[p].name;
    EXPECT_EQ(test::greedy_batched(cpu, prompts_), test::greedy_batched(ref, prompts_));
  }
  test::write_cut_model(tiny_, dir_ / "none", {}, CutMode::Remove);
  Engine with(options(dir_ / "uncut", "cpu")), without(options(dir_ / "none", "cpu"));
  EXPECT_GT(worst_row_err(with.score(prompts_[0].input_ids, true), without.score(prompts_[0].input_ids, true), 8192),
            1e-3);
}

// o_proj's optional bias is the same addition as Llama's attention_bias (q/k/v biases zero).
TEST_F(LayerBiases, OProjBiasEqualsAttentionBias) {
  test::write_cut_model(tiny_, dir_ / "optional", {}, CutMode::Remove, biases(true, false));
  std::vector<test::RawTensor> all = biases(true, false);
  for (int il = 0; il < 6; ++il) {
    const std::string l = "model.layers." + std::to_string(il) + ".self_attn.";
    if (il != 1 && il != 3) all.push_back(test::bf16_vector(l + "o_proj.bias", std::vector<float>(256, 0.0f)));
    all.push_back(test::bf16_vector(l + "q_proj.bias", std::vector<float>(256, 0.0f)));
    all.push_back(test::bf16_vector(l + "k_proj.bias", std::vector<float>(128, 0.0f)));
    all.push_back(test::bf16_vector(l + "v_proj.bias", std::vector<float>(128, 0.0f)));
  }
  test::write_cut_model(tiny_, dir_ / "attention_bias", {}, CutMode::Remove, all, {{"attention_bias", true}});
  Engine a(options(dir_ / "optional", "cpu")), b(options(dir_ / "attention_bias", "cpu"));
  const auto x = score_all(a, prompts_), y = score_all(b, prompts_);
  for (size_t p = 0; p < x.size(); ++p) EXPECT_LE(worst_row_err(x[p], y[p], 8192), kRelTol) << prompts_[p].name;
}

// down_proj's bias goes into the residual stream after the MLP: with layer 3's down_proj
// zero, a bias b there equals the same b on layer 3's o_proj (the MLP then adds nothing but
// b either way, and the next layer reads the same residual).
TEST_F(LayerBiases, DownProjBiasEntersTheResidualAfterTheMlp) {
  std::vector<test::RawTensor> down = biases(false, true), o = biases(true, false);
  // Layer 3's entries only, the down bias renamed as o_proj's in the second model.
  auto layer3 = [](std::vector<test::RawTensor> v) {
    std::erase_if(v, [](const test::RawTensor& r) { return r.name.rfind("model.layers.3.", 0) != 0; });
    return v;
  };
  down = layer3(down);
  o = layer3(o);
  o[0].bytes = down[0].bytes;
  // Zero every column of layer 3's down_proj in both (CutMode::Zero of all its channels).
  std::vector<int64_t> all(576);
  for (int64_t i = 0; i < 576; ++i) all[size_t(i)] = i;
  const std::vector<test::LayerCut> zero_mlp{{}, {}, {}, {.channels = all}};
  test::write_cut_model(tiny_, dir_ / "down", zero_mlp, CutMode::Zero, down);
  test::write_cut_model(tiny_, dir_ / "o", zero_mlp, CutMode::Zero, o);
  Engine a(options(dir_ / "down", "ref")), b(options(dir_ / "o", "ref"));
  const auto x = score_all(a, prompts_), y = score_all(b, prompts_);
  for (size_t p = 0; p < x.size(); ++p) EXPECT_LE(worst_row_err(x[p], y[p], 8192), kRelTol) << prompts_[p].name;
}

// --load-format dummy draws every tensor in its layer's shape.
TEST_F(LayerWidths, DummyWeightsFollowTheArrays) {
  test::write_cut_model(tiny_, dir_ / "removed", test::tiny_main_cut(), CutMode::Remove);
  const int64_t real_params = Engine(options(dir_ / "removed", "cpu")).model().n_params();
  fs::remove(dir_ / "removed" / "model.safetensors");
  EngineOptions o = options(dir_ / "removed", "cpu");
  o.load_format = "dummy";
  Engine e(o);
  EXPECT_EQ(e.model().n_params(), real_params);
  const RequestId id = e.add_request({.prompt_ids = prompts_[0].input_ids,
                                      .sampling = {.temperature = 0, .max_tokens = 4, .ignore_eos = true}});
  while (e.has_unfinished()) e.step();
  EXPECT_EQ(e.output_ids(id).size(), 4u);
}

}  // namespace
}  // namespace tf

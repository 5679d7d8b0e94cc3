// The weight table (Llama and Qwen2 rows of the registry), tensor-parallel groups, random
// weights, and checkpoint validation against the table.
#include "model/weight_table.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "model/arch/registry.h"
#include "model/dummy_weights.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "test_util.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using test::error_of;

WeightTable table_of(const std::string& model) { return weight_table(load_model_config(test::model_dir(model))); }

std::vector<std::string> part_tensors(const WeightSpec& w) {
  std::vector<std::string> names;
  for (const WeightPart& p : w.parts) names.push_back(p.tensor);
  return names;
}

// ---- the table ------------------------------------------------------------------------------

TEST(WeightTable, TinyMainTensors) {
  const WeightTable t = table_of("tiny-main");
  EXPECT_EQ(t.arch, "llama");
  ASSERT_EQ(t.tensors.size(), 69u);  // 3 global + 6 layers * (9 + the optional o_proj and down_proj biases)
  for (const TensorSpec& s : t.tensors) {
    // untied: lm_head required; only the projection biases of pruned models are optional
    EXPECT_EQ(s.optional, s.name.ends_with("o_proj.bias") || s.name.ends_with("down_proj.bias")) << s.name;
    EXPECT_EQ(s.format, WeightFormat::Dense) << s.name;
    EXPECT_EQ(s.component, TensorComponent::Values) << s.name;
  }
  struct Want { const char* name; std::vector<int64_t> shape; DummyInit init; };
  for (const Want& w : std::vector<Want>{
           {"model.embed_tokens.weight", {8192, 256}, DummyInit::FanIn},
           {"model.norm.weight", {256}, DummyInit::Ones},
           {"lm_head.weight", {8192, 256}, DummyInit::FanIn},
           {"model.layers.0.input_layernorm.weight", {256}, DummyInit::Ones},
           {"model.layers.5.self_attn.q_proj.weight", {256, 256}, DummyInit::FanIn},
           {"model.layers.5.self_attn.k_proj.weight", {128, 256}, DummyInit::FanIn},
           {"model.layers.5.self_attn.v_proj.weight", {128, 256}, DummyInit::FanIn},
           {"model.layers.5.self_attn.o_proj.weight", {256, 256}, DummyInit::FanIn},
           {"model.layers.3.post_attention_layernorm.weight", {256}, DummyInit::Ones},
           {"model.layers.3.mlp.gate_proj.weight", {576, 256}, DummyInit::FanIn},
           {"model.layers.3.mlp.up_proj.weight", {576, 256}, DummyInit::FanIn},
           {"model.layers.3.mlp.down_proj.weight", {256, 576}, DummyInit::FanIn},
       }) {
    const TensorSpec* s = t.find_tensor(w.name);
    ASSERT_NE(s, nullptr) << w.name;
    EXPECT_EQ(s->shape, w.shape) << w.name;
    EXPECT_EQ(s->init, w.init) << w.name;
  }
  EXPECT_EQ(t.find_tensor("model.layers.6.input_layernorm.weight"), nullptr);
  EXPECT_EQ(t.find_tensor("model.layers.0.self_attn.q_proj.bias"), nullptr);
  EXPECT_EQ(t.n_params(), 8031488);  // models README
}

TEST(WeightTable, TinyMainForwardWeights) {
  const WeightTable t = table_of("tiny-main");
  // embed, norm, head + per layer 2 norms, qkv, o, gate_up, down and the optional o and down biases
  ASSERT_EQ(t.weights.size(), 3u + 6u * 8u);
  using R = WeightRole;
  const WeightSpec* qkv = t.find({R::Wqkv, 5});
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(part_tensors(*qkv), (std::vector<std::string>{"model.layers.5.self_attn.q_proj.weight",
                                                           "model.layers.5.self_attn.k_proj.weight",
                                                           "model.layers.5.self_attn.v_proj.weight"}));
  // q by its 4 heads of 64, k and v by their 2 KV heads
  EXPECT_EQ(qkv->parts[0].tp.split, TpSplit::Rows);
  EXPECT_EQ(qkv->parts[0].tp.n_groups, 4);
  EXPECT_EQ(qkv->parts[0].tp.group_size, 64);
  EXPECT_EQ(qkv->parts[1].tp.n_groups, 2);
  EXPECT_EQ(qkv->parts[2].tp.n_groups, 2);
  const WeightSpec* o = t.find({R::Wo, 0});
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->parts[0].tp.split, TpSplit::Columns);
  EXPECT_EQ(o->parts[0].tp.n_groups, 4);
  const WeightSpec* gate_up = t.find({R::WgateUp, 3});
  ASSERT_NE(gate_up, nullptr);
  EXPECT_EQ(part_tensors(*gate_up), (std::vector<std::string>{"model.layers.3.mlp.gate_proj.weight",
                                                               "model.layers.3.mlp.up_proj.weight"}));
  EXPECT_EQ(gate_up->parts[1].tp.n_groups, 576);
  EXPECT_EQ(t.find({R::Wdown, 3})->parts[0].tp.split, TpSplit::Columns);
  EXPECT_EQ(t.find({R::Embedding})->parts[0].tp.split, TpSplit::Replicated);
  const WeightSpec* head = t.find({R::LmHead});
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(part_tensors(*head), std::vector<std::string>{"lm_head.weight"});
  EXPECT_EQ(head->parts[0].tp.n_groups, 8192);  // by vocabulary
  EXPECT_EQ(t.find({R::Bqkv, 0}), nullptr);
  // o_proj's and down_proj's biases: optional (a pruned model's bias compensation), added by rank 0
  for (R role : {R::Bo, R::Bdown}) {
    const WeightSpec* b = t.find({role, 2});
    ASSERT_NE(b, nullptr);
    EXPECT_TRUE(t.find_tensor(b->parts[0].tensor)->optional);
    EXPECT_EQ(b->parts[0].shape, std::vector<int64_t>{256});
    EXPECT_EQ(b->parts[0].tp.split, TpSplit::FirstRank);
  }
}

TEST(WeightTable, TiedDraftHeadIsTheEmbedding) {
  const WeightTable t = table_of("tiny-draft");
  EXPECT_EQ(t.tensors.size(), 36u);  // 3 + 3 * (9 + 2 optional biases)
  const TensorSpec* lm = t.find_tensor("lm_head.weight");
  ASSERT_NE(lm, nullptr);
  EXPECT_TRUE(lm->optional);
  EXPECT_EQ(part_tensors(*t.find({WeightRole::LmHead})), std::vector<std::string>{"model.embed_tokens.weight"});
  // 4 query heads of 32, 1 key/value head of 32.
  EXPECT_EQ(t.find_tensor("model.layers.2.self_attn.q_proj.weight")->shape, (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(t.find_tensor("model.layers.2.self_attn.k_proj.weight")->shape, (std::vector<int64_t>{32, 128}));
  EXPECT_EQ(t.n_params(), 1614720);  // models README: the tied head counts once
}

TEST(WeightTable, Qwen2Biases) {
  const WeightTable t = table_of("parity/qwen2");
  EXPECT_EQ(t.arch, "qwen2");
  EXPECT_EQ(t.tensors.size(), 31u);  // 3 + 2 * (12 + 2 optional biases)
  const TensorSpec* bq = t.find_tensor("model.layers.1.self_attn.q_proj.bias");
  ASSERT_NE(bq, nullptr);
  EXPECT_EQ(bq->shape, std::vector<int64_t>{128});
  EXPECT_EQ(t.find_tensor("model.layers.1.self_attn.k_proj.bias")->shape, std::vector<int64_t>{64});
  EXPECT_TRUE(t.find_tensor("model.layers.1.self_attn.o_proj.bias")->optional);  // Qwen2: only a pruned model's
  const WeightSpec* b = t.find({WeightRole::Bqkv, 1});
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(part_tensors(*b), (std::vector<std::string>{"model.layers.1.self_attn.q_proj.bias",
                                                         "model.layers.1.self_attn.k_proj.bias",
                                                         "model.layers.1.self_attn.v_proj.bias"}));
  EXPECT_EQ(b->parts[1].tp.n_groups, 2);  // k bias by KV heads
  EXPECT_TRUE(t.find_tensor(t.find({WeightRole::Bo, 1})->parts[0].tensor)->optional);
}

TEST(WeightTable, LlamaAttentionBiasIncludesOProj) {
  ModelConfig cfg = load_model_config(test::model_dir("parity/llama-mha"));
  cfg.attention_bias = true;
  const WeightTable t = weight_table(cfg);
  const TensorSpec* bo = t.find_tensor("model.layers.0.self_attn.o_proj.bias");
  ASSERT_NE(bo, nullptr);
  EXPECT_EQ(bo->shape, std::vector<int64_t>{128});
  EXPECT_NE(t.find_tensor("model.layers.0.self_attn.k_proj.bias"), nullptr);
  const WeightSpec* w = t.find({WeightRole::Bo, 0});
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->parts[0].tp.split, TpSplit::FirstRank);  // added once, before the all-reduce
}

TEST(WeightTable, MistralUsesTheLlamaTable) {
  ModelConfig cfg = load_model_config(test::model_dir("tiny-main"));
  const WeightTable llama = weight_table(cfg);
  cfg.model_type = "mistral";
  const WeightTable mistral = weight_table(cfg);
  EXPECT_EQ(mistral.arch, "mistral");
  ASSERT_EQ(mistral.tensors.size(), llama.tensors.size());
  for (size_t i = 0; i < llama.tensors.size(); ++i) EXPECT_EQ(mistral.tensors[i].name, llama.tensors[i].name);
}

TEST(WeightTable, InconsistentTablesAssert) {
  WeightTable t = table_of("parity/llama-mha");
  t.weights[0].parts[0].tensor = "model.nothing.weight";
  EXPECT_DEATH(check_table(t), "not in the table");
  t = table_of("parity/llama-mha");
  t.weights.push_back(t.weights[0]);
  EXPECT_DEATH(check_table(t), "listed twice");
  t = table_of("parity/llama-mha");
  for (WeightSpec& w : t.weights)
    if (w.key.role == WeightRole::Wqkv) w.parts[0].row0 = 1;  // q's rows run past the tensor
  EXPECT_DEATH(check_table(t), "rows \\[1, 129\\)");
  t = table_of("parity/llama-mha");
  t.weights[0].parts[0].scales = "model.norm.weight";  // a Values tensor named as scales
  EXPECT_DEATH(check_table(t), "for its scales or zeros");
}

// ---- tensor-parallel groups -----------------------------------------------------------------

TEST(TpGroups, EqualSharesAndReplicatedGroups) {
  EXPECT_EQ(tp_groups(8, 0, 1).count, 8);
  for (int32_t r = 0; r < 4; ++r) {
    const TpRange g = tp_groups(8, r, 4);
    EXPECT_EQ(g.begin, 2 * r);
    EXPECT_EQ(g.count, 2);
  }
  // 2 KV heads over 4 ranks: ranks 0, 1 read head 0 and ranks 2, 3 head 1
  for (int32_t r = 0; r < 4; ++r) {
    const TpRange g = tp_groups(2, r, 4);
    EXPECT_EQ(g.begin, r / 2);
    EXPECT_EQ(g.count, 1);
  }
  EXPECT_CONTAINS(error_of([] { tp_groups(6, 0, 4); }), "tensor parallel size 4");
}

// ---- random weights -------------------------------------------------------------------------

TEST(RandomWeights, EveryRequiredTensorOfTheTable) {
  const WeightTable t = table_of("tiny-draft");  // tied: lm_head.weight optional, so not drawn
  const RandomWeights a(t, 7), b(t, 7), c(t, 8);
  EXPECT_NO_THROW(validate_weights(t, a));
  size_t required = 0;
  for (const TensorSpec& s : t.tensors) required += !s.optional;
  EXPECT_EQ(required, t.tensors.size() - 1 - 2 * 3);  // the head and the optional biases are not drawn
  EXPECT_EQ(a.all().size(), required);
  EXPECT_EQ(a.find("lm_head.weight"), nullptr);
  const TensorInfo& norm = a.get("model.layers.1.input_layernorm.weight");
  for (int64_t i = 0; i < 128; ++i) EXPECT_EQ(bf16_to_f32(norm.view().as<uint16_t>()[i]), 1.0f);
  const TensorInfo& q = a.get("model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(q.dtype, DType::BF16);
  const float bound = std::sqrt(3.0f / 128.0f);  // uniform, variance 1/fan_in
  double sum_sq = 0;
  for (int64_t i = 0; i < 128 * 128; ++i) {
    const float v = bf16_to_f32(q.view().as<uint16_t>()[i]);
    EXPECT_LE(std::fabs(v), bound * 1.01f);
    sum_sq += double(v) * v;
  }
  EXPECT_NEAR(sum_sq / (128 * 128), 1.0 / 128, 0.1 / 128);
  EXPECT_EQ(std::memcmp(q.data, b.get(q.name).data, q.nbytes), 0) << "same seed, same weights";
  EXPECT_NE(std::memcmp(q.data, c.get(q.name).data, q.nbytes), 0) << "another seed, other weights";
}

// ---- validation of the bundled models -------------------------------------------------------

TEST(ValidateWeights, BundledModels) {
  for (const char* m : {"tiny-main", "tiny-draft", "parity/llama-mha", "parity/qwen2", "parity/qwen3", "parity/gemma3",
                        "parity/phi3", "parity/mixtral", "parity/qwen3-moe"}) {
    const WeightTable t = table_of(m);
    Checkpoint ck = Checkpoint::open(test::model_dir(m));
    EXPECT_NO_THROW(validate_weights(t, ck)) << m;
  }
}

// ---- mismatches, in a temp copy of a model folder -------------------------------------------

using test::RawTensor;
using test::write_safetensors;

class WeightsModelCopy : public test::TempDirTest {
 protected:

  // config.json from `model` with `edit` applied; the weights symlinked unchanged.
  void copy_model(const std::string& model, const json& edit, bool link_weights = true) {
    json cfg = test::load_json(test::model_dir(model) + "/config.json");
    cfg.update(edit);
    std::ofstream(dir_ / "config.json") << cfg.dump(2);
    fs::copy_file(test::model_dir(model) + "/generation_config.json", dir_ / "generation_config.json");
    if (link_weights) fs::create_symlink(test::model_dir(model) + "/model.safetensors", dir_ / "model.safetensors");
  }
  // Writes dir_/model.safetensors from `model`'s tensors, with `change` applied to each
  // (return false to drop the tensor), plus `extra` tensors.
  template <typename F>
  void rewrite_weights(const std::string& model, F&& change, std::vector<RawTensor> extra = {}) {
    SafetensorsFile src(test::model_dir(model) + "/model.safetensors");
    std::vector<RawTensor> out;
    for (const auto& [name, t] : src.tensors()) {
      RawTensor r{name, std::string(dtype_name(t.dtype)), t.shape,
                  std::string(reinterpret_cast<const char*>(t.data), t.nbytes)};
      if (change(r)) out.push_back(std::move(r));
    }
    for (RawTensor& r : extra) out.push_back(std::move(r));
    write_safetensors(dir_ / "model.safetensors", out);
  }
  std::string validate_error() {
    const WeightTable t = weight_table(load_model_config(dir_.string()));
    Checkpoint ck = Checkpoint::open(dir_.string());
    return error_of([&] { validate_weights(t, ck); });
  }
  void expect_valid() {
    const WeightTable t = weight_table(load_model_config(dir_.string()));
    EXPECT_NO_THROW(validate_weights(t, Checkpoint::open(dir_.string())));
  }
};

TEST_F(WeightsModelCopy, UnchangedCopyValidates) {
  copy_model("tiny-main", json::object());
  expect_valid();
}

TEST_F(WeightsModelCopy, WrongIntermediateSize) {
  copy_model("tiny-main", {{"intermediate_size", 512}});
  std::string msg = validate_error();
  EXPECT_CONTAINS(msg, "'model.layers.0.mlp.gate_proj.weight'");
  EXPECT_CONTAINS(msg, "[576, 256]");  // actual
  EXPECT_CONTAINS(msg, "[512, 256]");  // expected
  EXPECT_CONTAINS(msg, (dir_ / "model.safetensors").string());
}

TEST_F(WeightsModelCopy, WrongKvHeads) {
  copy_model("tiny-main", {{"num_key_value_heads", 4}});
  std::string msg = validate_error();
  EXPECT_CONTAINS(msg, "'model.layers.0.self_attn.k_proj.weight'");
  EXPECT_CONTAINS(msg, "[128, 256]");
  EXPECT_CONTAINS(msg, "[256, 256]");
}

TEST_F(WeightsModelCopy, MissingTensor) {
  copy_model("tiny-main", json::object(), /*link_weights=*/false);
  rewrite_weights("tiny-main", [](RawTensor& r) { return r.name != "model.layers.4.self_attn.o_proj.weight"; });
  std::string msg = validate_error();
  EXPECT_CONTAINS(msg, "'model.layers.4.self_attn.o_proj.weight'");
  EXPECT_CONTAINS(msg, "missing");
  EXPECT_CONTAINS(msg, "[256, 256]");
}

TEST_F(WeightsModelCopy, UntiedConfigNeedsLmHead) {
  copy_model("tiny-draft", {{"tie_word_embeddings", false}});
  std::string msg = validate_error();
  EXPECT_CONTAINS(msg, "'lm_head.weight'");
  EXPECT_CONTAINS(msg, "missing");
}

TEST_F(WeightsModelCopy, TiedConfigWithLmHeadPresentIsFine) {
  copy_model("tiny-main", {{"tie_word_embeddings", true}});
  EXPECT_TRUE(load_model_config(dir_.string()).tie_word_embeddings);
  expect_valid();
}

TEST_F(WeightsModelCopy, Qwen2MissingBias) {
  copy_model("parity/qwen2", json::object(), /*link_weights=*/false);
  rewrite_weights("parity/qwen2", [](RawTensor& r) { return r.name != "model.layers.1.self_attn.v_proj.bias"; });
  EXPECT_CONTAINS(validate_error(), "'model.layers.1.self_attn.v_proj.bias'");
}

TEST_F(WeightsModelCopy, MixtralMissingExpertTensor) {
  copy_model("parity/mixtral", json::object(), /*link_weights=*/false);
  rewrite_weights("parity/mixtral",
                  [](RawTensor& r) { return r.name != "model.layers.2.block_sparse_moe.experts.3.w2.weight"; });
  const std::string msg = validate_error();
  EXPECT_CONTAINS(msg, "'model.layers.2.block_sparse_moe.experts.3.w2.weight'");
  EXPECT_CONTAINS(msg, "missing");
}

TEST_F(WeightsModelCopy, Qwen3MissingQNorm) {
  copy_model("parity/qwen3", json::object(), /*link_weights=*/false);
  rewrite_weights("parity/qwen3", [](RawTensor& r) { return r.name != "model.layers.3.self_attn.q_norm.weight"; });
  EXPECT_CONTAINS(validate_error(), "'model.layers.3.self_attn.q_norm.weight'");
}

TEST_F(WeightsModelCopy, NonFloatDtype) {
  copy_model("parity/llama-mha", json::object(), /*link_weights=*/false);
  rewrite_weights("parity/llama-mha", [](RawTensor& r) {
    if (r.name == "model.norm.weight") r.dtype = "I32";  // same 4-byte elements, wrong type
    return true;
  });
  std::string msg = validate_error();
  EXPECT_CONTAINS(msg, "'model.norm.weight'");
  EXPECT_CONTAINS(msg, "I32");
}

TEST_F(WeightsModelCopy, UnexpectedTensor) {
  copy_model("parity/llama-mha", json::object(), /*link_weights=*/false);
  rewrite_weights("parity/llama-mha", [](RawTensor&) { return true; },
                  {{"model.layers.0.mlp.gate_proj.bias", "F32", {256}, std::string(1024, '\0')}});
  std::string msg = validate_error();
  EXPECT_CONTAINS(msg, "'model.layers.0.mlp.gate_proj.bias'");
}

// A pruned folder (docs/PER_LAYER_WIDTHS.md) whose tensors do not match its layer_* arrays:
// the error names the tensor, its layer, and both shapes.
TEST_F(WeightsModelCopy, PerLayerWidthThatDoesNotMatchNamesLayerAndTensor) {
  copy_model("tiny-main", {{"layer_intermediate_size", {576, 576, 448, 576, 576, 576}}});
  std::string msg = validate_error();
  EXPECT_CONTAINS(msg, "tensor 'model.layers.2.mlp.gate_proj.weight' (layer 2) has shape [576, 256]");
  EXPECT_CONTAINS(msg, "the config expects [448, 256]");
  EXPECT_CONTAINS(msg, (dir_ / "model.safetensors").string());
}

TEST_F(WeightsModelCopy, PerLayerHeadsThatDoNotMatchNameLayerAndTensor) {
  copy_model("tiny-main", {{"layer_num_attention_heads", {4, 4, 4, 4, 2, 4}},
                           {"layer_num_key_value_heads", {2, 2, 2, 2, 1, 2}}});
  const std::string msg = validate_error();
  EXPECT_CONTAINS(msg, "tensor 'model.layers.4.self_attn.q_proj.weight' (layer 4) has shape [256, 256]");
  EXPECT_CONTAINS(msg, "[128, 256]");
}

// The optional o_proj / down_proj biases: accepted when present, in their shape only.
TEST_F(WeightsModelCopy, OptionalProjectionBiases) {
  copy_model("tiny-main", json::object(), /*link_weights=*/false);
  rewrite_weights("tiny-main", [](RawTensor&) { return true; },
                  {{"model.layers.1.self_attn.o_proj.bias", "F32", {256}, std::string(1024, '\0')},
                   {"model.layers.5.mlp.down_proj.bias", "BF16", {256}, std::string(512, '\0')}});
  expect_valid();
  rewrite_weights("tiny-main", [](RawTensor&) { return true; },
                  {{"model.layers.3.mlp.down_proj.bias", "F32", {128}, std::string(512, '\0')}});
  const std::string msg = validate_error();
  EXPECT_CONTAINS(msg, "tensor 'model.layers.3.mlp.down_proj.bias' (layer 3) has shape [128]");
  EXPECT_CONTAINS(msg, "[256]");
}

TEST_F(WeightsModelCopy, FewerLayersInConfig) {
  // The checkpoint's extra layer is refused rather than silently dropped.
  copy_model("parity/llama-mha", {{"num_hidden_layers", 1}});
  EXPECT_CONTAINS(validate_error(), "'model.layers.1.");
}

TEST_F(WeightsModelCopy, OldRotaryBuffersAreIgnored) {
  copy_model("parity/llama-mha", json::object(), /*link_weights=*/false);
  rewrite_weights("parity/llama-mha", [](RawTensor&) { return true; },
                  {{"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {16}, std::string(64, '\0')}});
  expect_valid();
}

}  // namespace
}  // namespace tf

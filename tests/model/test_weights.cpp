// The weight table and checkpoint validation against it.
#include "model/weights.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "model/safetensors_writer.h"
#include "test_util.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using test::error_of;

const WeightSpec* find_spec(const std::vector<WeightSpec>& specs, const std::string& name) {
  for (const WeightSpec& s : specs) if (s.name == name) return &s;
  return nullptr;
}

// ---- the table ------------------------------------------------------------------------------

TEST(WeightSpecs, TinyMain) {
  ModelConfig cfg = load_model_config(test::model_dir("tiny-main"));
  std::vector<WeightSpec> specs = llama_weight_specs(cfg);
  ASSERT_EQ(specs.size(), 57u);  // 3 global + 6 layers * 9
  for (const WeightSpec& s : specs) EXPECT_FALSE(s.optional) << s.name;  // untied: lm_head required

  struct Want { const char* name; WeightRole role; int layer; std::vector<int64_t> shape; };
  for (const Want& w : std::vector<Want>{
           {"model.embed_tokens.weight", WeightRole::Embedding, -1, {8192, 256}},
           {"model.norm.weight", WeightRole::FinalNorm, -1, {256}},
           {"lm_head.weight", WeightRole::LmHead, -1, {8192, 256}},
           {"model.layers.0.input_layernorm.weight", WeightRole::AttnNorm, 0, {256}},
           {"model.layers.5.self_attn.q_proj.weight", WeightRole::Wq, 5, {256, 256}},
           {"model.layers.5.self_attn.k_proj.weight", WeightRole::Wk, 5, {128, 256}},
           {"model.layers.5.self_attn.v_proj.weight", WeightRole::Wv, 5, {128, 256}},
           {"model.layers.5.self_attn.o_proj.weight", WeightRole::Wo, 5, {256, 256}},
           {"model.layers.3.post_attention_layernorm.weight", WeightRole::MlpNorm, 3, {256}},
           {"model.layers.3.mlp.gate_proj.weight", WeightRole::Wgate, 3, {576, 256}},
           {"model.layers.3.mlp.up_proj.weight", WeightRole::Wup, 3, {576, 256}},
           {"model.layers.3.mlp.down_proj.weight", WeightRole::Wdown, 3, {256, 576}},
       }) {
    const WeightSpec* s = find_spec(specs, w.name);
    ASSERT_NE(s, nullptr) << w.name;
    EXPECT_EQ(s->role, w.role) << w.name;
    EXPECT_EQ(s->layer, w.layer) << w.name;
    EXPECT_EQ(s->shape, w.shape) << w.name;
  }
  EXPECT_EQ(find_spec(specs, "model.layers.6.input_layernorm.weight"), nullptr);
  EXPECT_EQ(find_spec(specs, "model.layers.0.self_attn.q_proj.bias"), nullptr);
}

TEST(WeightSpecs, TiedDraftHasOptionalLmHead) {
  ModelConfig cfg = load_model_config(test::model_dir("tiny-draft"));
  std::vector<WeightSpec> specs = llama_weight_specs(cfg);
  EXPECT_EQ(specs.size(), 30u);  // 3 + 3 * 9
  const WeightSpec* lm = find_spec(specs, "lm_head.weight");
  ASSERT_NE(lm, nullptr);
  EXPECT_TRUE(lm->optional);
  // 4 query heads of 32, 1 key/value head of 32.
  EXPECT_EQ(find_spec(specs, "model.layers.2.self_attn.q_proj.weight")->shape, (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(find_spec(specs, "model.layers.2.self_attn.k_proj.weight")->shape, (std::vector<int64_t>{32, 128}));
}

TEST(WeightSpecs, Qwen2Biases) {
  ModelConfig cfg = load_model_config(test::model_dir("parity/qwen2"));
  std::vector<WeightSpec> specs = llama_weight_specs(cfg);
  EXPECT_EQ(specs.size(), 27u);  // 3 + 2 * 12
  const WeightSpec* bq = find_spec(specs, "model.layers.1.self_attn.q_proj.bias");
  ASSERT_NE(bq, nullptr);
  EXPECT_EQ(bq->role, WeightRole::Bq);
  EXPECT_EQ(bq->shape, std::vector<int64_t>{128});
  EXPECT_EQ(find_spec(specs, "model.layers.1.self_attn.k_proj.bias")->shape, std::vector<int64_t>{64});
  EXPECT_EQ(find_spec(specs, "model.layers.1.self_attn.v_proj.bias")->role, WeightRole::Bv);
  EXPECT_EQ(find_spec(specs, "model.layers.1.self_attn.o_proj.bias"), nullptr);  // Qwen2: none
}

TEST(WeightSpecs, LlamaAttentionBiasIncludesOProj) {
  ModelConfig cfg = load_model_config(test::model_dir("parity/llama-mha"));
  cfg.attention_bias = true;
  std::vector<WeightSpec> specs = llama_weight_specs(cfg);
  const WeightSpec* bo = find_spec(specs, "model.layers.0.self_attn.o_proj.bias");
  ASSERT_NE(bo, nullptr);
  EXPECT_EQ(bo->role, WeightRole::Bo);
  EXPECT_EQ(bo->shape, std::vector<int64_t>{128});
  EXPECT_NE(find_spec(specs, "model.layers.0.self_attn.k_proj.bias"), nullptr);
}

// ---- validation of the bundled models -------------------------------------------------------

TEST(ValidateCheckpoint, BundledModels) {
  for (const char* m : {"tiny-main", "tiny-draft", "parity/llama-mha", "parity/qwen2"}) {
    ModelConfig cfg = load_model_config(test::model_dir(m));
    Checkpoint ck = Checkpoint::open(test::model_dir(m));
    EXPECT_NO_THROW(validate_checkpoint(cfg, ck)) << m;
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
    ModelConfig cfg = load_model_config(dir_.string());
    Checkpoint ck = Checkpoint::open(dir_.string());
    return error_of([&] { validate_checkpoint(cfg, ck); });
  }
};

TEST_F(WeightsModelCopy, UnchangedCopyValidates) {
  copy_model("tiny-main", json::object());
  ModelConfig cfg = load_model_config(dir_.string());
  EXPECT_NO_THROW(validate_checkpoint(cfg, Checkpoint::open(dir_.string())));
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
  ModelConfig cfg = load_model_config(dir_.string());
  EXPECT_TRUE(cfg.tie_word_embeddings);
  EXPECT_NO_THROW(validate_checkpoint(cfg, Checkpoint::open(dir_.string())));
}

TEST_F(WeightsModelCopy, Qwen2MissingBias) {
  copy_model("parity/qwen2", json::object(), /*link_weights=*/false);
  rewrite_weights("parity/qwen2", [](RawTensor& r) { return r.name != "model.layers.1.self_attn.v_proj.bias"; });
  EXPECT_CONTAINS(validate_error(), "'model.layers.1.self_attn.v_proj.bias'");
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
                  {{"model.layers.0.mlp.down_proj.bias", "F32", {128}, std::string(512, '\0')}});
  std::string msg = validate_error();
  EXPECT_CONTAINS(msg, "'model.layers.0.mlp.down_proj.bias'");
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
  ModelConfig cfg = load_model_config(dir_.string());
  EXPECT_NO_THROW(validate_checkpoint(cfg, Checkpoint::open(dir_.string())));
}

}  // namespace
}  // namespace tf

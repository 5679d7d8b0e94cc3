// config.json parsing: the bundled models, then hand-written configs for every rule and error.
#include "model/arch/registry.h"
#include "model/arch/rope.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "test_util.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kOrigin = "models/x/config.json";

// Runs f, expects a tf::Error, returns its message (empty string = no error: the
// EXPECT below then fails with the message shown).
using test::error_of;

// A complete transformers-4 style llama config with every required field.
json base_llama() {
  return json{{"model_type", "llama"},
              {"hidden_size", 256},
              {"intermediate_size", 576},
              {"num_hidden_layers", 6},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"vocab_size", 8192},
              {"max_position_embeddings", 1024},
              {"rms_norm_eps", 1e-5},
              {"bos_token_id", 0},
              {"eos_token_id", 1}};
}

ModelConfig parse(const json& j) { return parse_model_config(j.dump(), kOrigin); }
std::string parse_error(const json& j) { return error_of([&] { parse(j); }); }

// ---- bundled models -------------------------------------------------------------------------

TEST(Config, TinyMain) {
  ModelConfig c = load_model_config(test::model_dir("tiny-main"));
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.d_model, 256);
  EXPECT_EQ(c.n_layers, 6);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.d_ff, 576);
  EXPECT_EQ(c.n_vocab, 8192);
  EXPECT_EQ(c.max_position, 1024);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::None);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_id, 0);
  EXPECT_EQ(c.eos_ids, std::vector<int32_t>{1});
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  // 6 layers * 2 kv heads * 64 * (K and V) * 2 bytes
  EXPECT_EQ(c.kv_bytes_per_token(2), 6 * 2 * 64 * 2 * 2);
}

TEST(Config, TinyDraft) {
  ModelConfig c = load_model_config(test::model_dir("tiny-draft"));
  EXPECT_EQ(c.d_model, 128);
  EXPECT_EQ(c.n_layers, 3);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.d_ff, 384);
  EXPECT_TRUE(c.tie_word_embeddings);
}

TEST(Config, ParityQwen2) {
  ModelConfig c = load_model_config(test::model_dir("parity/qwen2"));
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 32);  // no head_dim field: 128 / 4
  EXPECT_EQ(c.torch_dtype, "float32");
}

TEST(Config, ParityLlamaMha) {
  ModelConfig c = load_model_config(test::model_dir("parity/llama-mha"));
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, c.n_heads);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.d_ff, 256);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
}

// What each newer parity model's config.json turns into (models/README.md).
TEST(Config, ParityArchitectures) {
  const ModelConfig q3 = load_model_config(test::model_dir("parity/qwen3"));
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_EQ(q3.head_dim, 64);  // wider than hidden 128 / 4 heads
  const ModelConfig g3 = load_model_config(test::model_dir("parity/gemma3"));
  EXPECT_EQ(g3.layer_types, (std::vector<LayerAttention>{LayerAttention::Sliding, LayerAttention::Sliding,
                                                          LayerAttention::Full, LayerAttention::Sliding}));
  EXPECT_EQ(g3.sliding_window, 16);
  EXPECT_EQ(g3.kv_layer_groups(), (std::vector<int32_t>{1, 1, 0, 1}));
  EXPECT_FLOAT_EQ(g3.embed_scale, std::sqrt(128.0f));
  EXPECT_FLOAT_EQ(g3.attn_scale, 1.0f / std::sqrt(32.0f));  // query_pre_attn_scalar
  EXPECT_EQ(g3.mlp_act, MlpActivation::GeluTanh);
  EXPECT_FLOAT_EQ(g3.rope(LayerAttention::Full).theta, 1e6f);
  EXPECT_FLOAT_EQ(g3.rope(LayerAttention::Sliding).theta, 1e4f);
  const ModelConfig p3 = load_model_config(test::model_dir("parity/phi3"));
  EXPECT_EQ(p3.rotary_dim, 24);  // partial_rotary_factor 0.75 of head_dim 32
  const ModelConfig mx = load_model_config(test::model_dir("parity/mixtral"));
  EXPECT_EQ(mx.n_experts, 4);
  EXPECT_EQ(mx.n_experts_per_tok, 2);
  EXPECT_EQ(mx.d_ff_expert, 128);
  EXPECT_TRUE(mx.moe_renormalize);
  EXPECT_EQ(mx.moe_layers, std::vector<bool>(4, true));
  const ModelConfig qm = load_model_config(test::model_dir("parity/qwen3-moe"));
  EXPECT_EQ(qm.n_experts, 8);
  EXPECT_EQ(qm.d_ff_expert, 64);
  EXPECT_EQ(qm.d_ff, 256);  // the dense layer 0
  EXPECT_TRUE(qm.moe_renormalize);
  EXPECT_EQ(qm.moe_layers, (std::vector<bool>{false, true, true, true}));  // mlp_only_layers [0]
}

TEST(Config, RegisteredArchitectures) {
  for (const char* type : {"llama", "mistral", "qwen2", "qwen3", "gemma3_text", "phi3", "mixtral", "qwen3_moe"}) {
    const ArchEntry* a = find_arch(type);
    ASSERT_NE(a, nullptr) << type;
    EXPECT_EQ(a->model_type, type);
  }
  EXPECT_EQ(find_arch("gpt2"), nullptr);
  EXPECT_EQ(supported_model_types(), "llama, mistral, qwen2, qwen3, gemma3_text, phi3, mixtral, qwen3_moe");
}

// ---- generation_config.json -----------------------------------------------------------------

class ConfigFolder : public test::TempDirTest {
 protected:
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
};

TEST_F(ConfigFolder, GenerationConfigOverridesIds) {
  write("config.json", base_llama().dump());
  write("generation_config.json", R"({"bos_token_id": 7, "eos_token_id": [1, 5]})");
  ModelConfig c = load_model_config(dir_.string());
  EXPECT_EQ(c.bos_id, 7);
  EXPECT_EQ(c.eos_ids, (std::vector<int32_t>{1, 5}));
}

TEST_F(ConfigFolder, GenerationConfigWithoutIdsKeepsConfigIds) {
  json j = base_llama();
  j["eos_token_id"] = json::array({3, 4});
  write("config.json", j.dump());
  write("generation_config.json", R"({"temperature": 0.7, "bos_token_id": null})");
  ModelConfig c = load_model_config(dir_.string());
  EXPECT_EQ(c.bos_id, 0);
  EXPECT_EQ(c.eos_ids, (std::vector<int32_t>{3, 4}));
}

TEST_F(ConfigFolder, NoGenerationConfig) {
  write("config.json", base_llama().dump());
  ModelConfig c = load_model_config(dir_.string());
  EXPECT_EQ(c.bos_id, 0);
  EXPECT_EQ(c.eos_ids, std::vector<int32_t>{1});
}

TEST_F(ConfigFolder, BadGenerationConfigNamesFile) {
  write("config.json", base_llama().dump());
  write("generation_config.json", R"({"eos_token_id": "x"})");
  std::string msg = error_of([&] { load_model_config(dir_.string()); });
  EXPECT_NE(msg.find("generation_config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("eos_token_id"), std::string::npos) << msg;
}

TEST_F(ConfigFolder, MissingConfigJson) {
  std::string msg = error_of([&] { load_model_config(dir_.string()); });
  EXPECT_NE(msg.find((dir_ / "config.json").string()), std::string::npos) << msg;
}

TEST_F(ConfigFolder, ErrorNamesConfigPath) {
  json j = base_llama();
  j.erase("hidden_size");
  write("config.json", j.dump());
  std::string msg = error_of([&] { load_model_config(dir_.string()); });
  EXPECT_NE(msg.find((dir_ / "config.json").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("'hidden_size'"), std::string::npos) << msg;
}

// ---- parsed from strings --------------------------------------------------------------------

TEST(ConfigParse, BaseLlama) {
  ModelConfig c = parse(base_llama());
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.head_dim, 64);  // 256 / 4
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);  // default
  EXPECT_FALSE(c.tie_word_embeddings);      // default
  EXPECT_EQ(c.torch_dtype, "");
}

TEST(ConfigParse, MistralSlidingWindow) {
  json j = base_llama();
  j["model_type"] = "mistral";
  j["sliding_window"] = 4096;
  ModelConfig c = parse(j);
  EXPECT_EQ(c.model_type, "mistral");
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_FALSE(c.attention_bias);

  j["sliding_window"] = nullptr;
  EXPECT_EQ(parse(j).sliding_window, 0);
  j.erase("sliding_window");
  EXPECT_EQ(parse(j).sliding_window, 0);
}

TEST(ConfigParse, MistralBadSlidingWindow) {
  json j = base_llama();
  j["model_type"] = "mistral";
  j["sliding_window"] = -5;
  EXPECT_NE(parse_error(j).find("'sliding_window'"), std::string::npos);
}

TEST(ConfigParse, LlamaIgnoresSlidingWindow) {
  json j = base_llama();
  j["sliding_window"] = 4096;
  EXPECT_EQ(parse(j).sliding_window, 0);
}

TEST(ConfigParse, Qwen2SlidingWindowOnlyWithUseSlidingWindow) {
  json j = base_llama();
  j["model_type"] = "qwen2";
  j["sliding_window"] = 4096;
  j["max_window_layers"] = 0;  // every layer slides
  j["use_sliding_window"] = false;
  EXPECT_EQ(parse(j).sliding_window, 0);
  j.erase("use_sliding_window");
  EXPECT_EQ(parse(j).sliding_window, 0);
  j["use_sliding_window"] = true;
  ModelConfig c = parse(j);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_TRUE(c.attention_bias);  // qwen2 always has q/k/v biases
}

TEST(ConfigParse, Qwen2SlidingWindowFollowsLayerTypes) {
  json j = base_llama();
  j["model_type"] = "qwen2";
  j["num_hidden_layers"] = 2;
  j["sliding_window"] = 4096;
  j["use_sliding_window"] = true;
  // transformers: layers il >= max_window_layers (default 28) slide, so none of 2 layers do.
  EXPECT_EQ(parse(j).sliding_window, 0);
  j["layer_types"] = {"sliding_attention", "sliding_attention"};
  EXPECT_EQ(parse(j).sliding_window, 4096);
  j["layer_types"] = {"full_attention", "full_attention"};
  EXPECT_EQ(parse(j).sliding_window, 0);
  j["layer_types"] = {"full_attention", "sliding_attention"};  // a mix: one KV group per kind
  const ModelConfig mixed = parse(j);
  EXPECT_EQ(mixed.sliding_window, 4096);
  EXPECT_EQ(mixed.kv_layer_groups(), (std::vector<int32_t>{0, 1}));
  j["layer_types"] = {"full_attention"};
  EXPECT_NE(parse_error(j).find("'layer_types'"), std::string::npos);
}

TEST(ConfigParse, Qwen2MissingSlidingWindowValue) {
  json j = base_llama();
  j["model_type"] = "qwen2";
  j["use_sliding_window"] = true;
  j["max_window_layers"] = 0;
  std::string msg = parse_error(j);
  EXPECT_NE(msg.find("'sliding_window' is missing"), std::string::npos) << msg;
}

TEST(ConfigParse, Qwen2BiasEvenWithoutAttentionBiasField) {
  json j = base_llama();
  j["model_type"] = "qwen2";
  j["attention_bias"] = false;  // not a Qwen2 field; the biases are part of the architecture
  EXPECT_TRUE(parse(j).attention_bias);
}

TEST(ConfigParse, LlamaAttentionBias) {
  json j = base_llama();
  EXPECT_FALSE(parse(j).attention_bias);
  j["attention_bias"] = true;
  EXPECT_TRUE(parse(j).attention_bias);
  j["attention_bias"] = "yes";
  EXPECT_NE(parse_error(j).find("'attention_bias'"), std::string::npos);
}

TEST(ConfigParse, TopLevelRopeTheta) {
  json j = base_llama();
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = nullptr;
  ModelConfig c = parse(j);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::None);
}

TEST(ConfigParse, RopeParametersTheta) {
  json j = base_llama();
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  ModelConfig c = parse(j);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::None);
}

TEST(ConfigParse, RopeScalingLlama3) {
  json j = base_llama();
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  ModelConfig c = parse(j);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Llama3);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
}

TEST(ConfigParse, RopeScalingLlama3OldTypeKey) {
  json j = base_llama();
  j["rope_scaling"] = {{"type", "llama3"},
                       {"factor", 32.0},
                       {"low_freq_factor", 2.0},
                       {"high_freq_factor", 8.0},
                       {"original_max_position_embeddings", 4096}};
  ModelConfig c = parse(j);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Llama3);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 32.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.low_freq_factor, 2.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.high_freq_factor, 8.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);
}

TEST(ConfigParse, RopeParametersLlama3) {
  // transformers 5 writes theta and scaling together under rope_parameters.
  json j = base_llama();
  j["rope_parameters"] = {{"rope_type", "llama3"},
                          {"rope_theta", 500000.0},
                          {"factor", 8.0},
                          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}};
  ModelConfig c = parse(j);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Llama3);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
}

TEST(ConfigParse, RopeScalingLlama3MissingField) {
  for (const char* field : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
    json j = base_llama();
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
    j["rope_scaling"].erase(field);
    std::string msg = parse_error(j);
    EXPECT_NE(msg.find(std::string("'rope_scaling.") + field + "' is missing"), std::string::npos) << msg;
    EXPECT_NE(msg.find(kOrigin), std::string::npos) << msg;
  }
}

TEST(ConfigParse, RopeScalingDefaultAndNull) {
  json j = base_llama();
  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(parse(j).rope_scaling.type, RopeScaling::Type::None);
  j["rope_scaling"] = nullptr;
  EXPECT_EQ(parse(j).rope_scaling.type, RopeScaling::Type::None);
}

TEST(ConfigParse, RopeScalingYarnRejected) {
  json j = base_llama();
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  std::string msg = parse_error(j);
  EXPECT_NE(msg.find("yarn"), std::string::npos) << msg;
  EXPECT_NE(msg.find(kOrigin), std::string::npos) << msg;
  EXPECT_NE(msg.find("llama3"), std::string::npos) << msg;  // lists what is supported

  json k = base_llama();
  k["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 4.0}};
  msg = parse_error(k);
  EXPECT_NE(msg.find("yarn"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rope_parameters.rope_type"), std::string::npos) << msg;
}

TEST(ConfigParse, RopeScalingWithoutType) {
  json j = base_llama();
  j["rope_scaling"] = {{"factor", 8.0}};
  std::string msg = parse_error(j);
  EXPECT_NE(msg.find("rope_scaling.rope_type"), std::string::npos) << msg;
}

TEST(ConfigParse, UnknownModelType) {
  json j = base_llama();
  j["model_type"] = "gpt2";
  std::string msg = parse_error(j);
  EXPECT_NE(msg.find(kOrigin), std::string::npos) << msg;
  EXPECT_NE(msg.find("'model_type'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gpt2"), std::string::npos) << msg;
  for (const char* supported : {"llama", "mistral", "qwen2"})
    EXPECT_NE(msg.find(supported), std::string::npos) << msg;
}

TEST(ConfigParse, EachRequiredFieldMissing) {
  for (const char* field : {"model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "vocab_size", "max_position_embeddings",
                            "rms_norm_eps"}) {
    json j = base_llama();
    j.erase(field);
    std::string msg = parse_error(j);
    EXPECT_NE(msg.find(kOrigin), std::string::npos) << field << ": " << msg;
    EXPECT_NE(msg.find(std::string("field '") + field + "' is missing"), std::string::npos)
        << field << ": " << msg;
  }
}

TEST(ConfigParse, RequiredFieldNullIsMissing) {
  json j = base_llama();
  j["vocab_size"] = nullptr;
  EXPECT_NE(parse_error(j).find("'vocab_size' is missing"), std::string::npos);
}

TEST(ConfigParse, WrongTypes) {
  struct Case { const char* field; json value; };
  const Case cases[] = {
      {"hidden_size", "abc"},     {"hidden_size", 256.5},        {"num_hidden_layers", true},
      {"vocab_size", json::array()}, {"rms_norm_eps", "1e-5"},   {"model_type", 3},
      {"tie_word_embeddings", 1}, {"num_key_value_heads", "2"}, {"head_dim", 64.5},
      {"rope_theta", "big"},      {"rope_scaling", "llama3"},   {"bos_token_id", "0"},
      {"eos_token_id", {1, "2"}}, {"dtype", 16},
  };
  for (const Case& c : cases) {
    json j = base_llama();
    j[c.field] = c.value;
    std::string msg = parse_error(j);
    EXPECT_NE(msg.find(kOrigin), std::string::npos) << c.field << ": " << msg;
    EXPECT_NE(msg.find(std::string("'") + c.field + "'"), std::string::npos) << c.field << ": " << msg;
  }
  json j = base_llama();
  j["hidden_size"] = "abc";
  EXPECT_EQ(parse_error(j),
            std::string(kOrigin) + ": field 'hidden_size' is \"abc\" (expected a positive integer)");
}

TEST(ConfigParse, NonPositiveSizes) {
  for (const char* field : {"hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "num_key_value_heads", "vocab_size",
                            "max_position_embeddings", "head_dim"}) {
    for (int v : {0, -4}) {
      json j = base_llama();
      j[field] = v;
      std::string msg = parse_error(j);
      EXPECT_NE(msg.find(std::string("'") + field + "'"), std::string::npos) << field << ": " << msg;
    }
  }
  json j = base_llama();
  j["rms_norm_eps"] = 0;
  EXPECT_NE(parse_error(j).find("'rms_norm_eps'"), std::string::npos);
  j = base_llama();
  j["hidden_size"] = 1LL << 40;
  EXPECT_NE(parse_error(j).find("'hidden_size'"), std::string::npos);
}

TEST(ConfigParse, HeadsNotDivisibleByKvHeads) {
  json j = base_llama();
  j["num_key_value_heads"] = 3;
  std::string msg = parse_error(j);
  EXPECT_NE(msg.find("num_attention_heads (4)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("num_key_value_heads (3)"), std::string::npos) << msg;
}

TEST(ConfigParse, KvHeadsAbsentMeansMha) {
  json j = base_llama();
  j.erase("num_key_value_heads");
  EXPECT_EQ(parse(j).n_kv_heads, 4);
  j["num_key_value_heads"] = nullptr;
  EXPECT_EQ(parse(j).n_kv_heads, 4);
}

TEST(ConfigParse, HeadDim) {
  json j = base_llama();
  j["head_dim"] = 128;  // explicit head_dim need not be hidden / heads
  EXPECT_EQ(parse(j).head_dim, 128);
  j["head_dim"] = nullptr;
  EXPECT_EQ(parse(j).head_dim, 64);
  j["head_dim"] = 63;
  EXPECT_NE(parse_error(j).find("odd"), std::string::npos);
  j.erase("head_dim");
  j["num_attention_heads"] = 3;
  j["num_key_value_heads"] = 1;
  std::string msg = parse_error(j);
  EXPECT_NE(msg.find("hidden_size (256)"), std::string::npos) << msg;
}

TEST(ConfigParse, TokenIds) {
  json j = base_llama();
  j["vocab_size"] = 128256;
  j["eos_token_id"] = {128001, 128008, 128009};
  j["bos_token_id"] = 128000;
  ModelConfig c = parse(j);
  EXPECT_EQ(c.bos_id, 128000);
  EXPECT_EQ(c.eos_ids, (std::vector<int32_t>{128001, 128008, 128009}));
  j.erase("bos_token_id");
  j["eos_token_id"] = nullptr;
  c = parse(j);
  EXPECT_EQ(c.bos_id, -1);
  EXPECT_TRUE(c.eos_ids.empty());
  j["eos_token_id"] = -1;
  EXPECT_NE(parse_error(j).find("'eos_token_id'"), std::string::npos);
}

// Every id names a row of the embedding: bos/eos ids at or past vocab_size are refused, in
// config.json and in generation_config.json.
TEST(ConfigParse, TokenIdsBelowVocabSize) {
  json j = base_llama();  // vocab_size 8192
  j["eos_token_id"] = {1, 8192};
  std::string msg = parse_error(j);
  EXPECT_CONTAINS(msg, "'eos_token_id' holds token id 8192");
  EXPECT_CONTAINS(msg, "vocab_size 8192");
  j = base_llama();
  j["bos_token_id"] = 4294967296LL;
  msg = parse_error(j);
  EXPECT_CONTAINS(msg, "'bos_token_id'");
  EXPECT_CONTAINS(msg, "4294967296");
  j["bos_token_id"] = 8191;
  EXPECT_EQ(parse(j).bos_id, 8191);
}

TEST_F(ConfigFolder, GenerationConfigIdsBelowVocabSize) {
  write("config.json", base_llama().dump());
  write("generation_config.json", R"({"eos_token_id": [1, 200000000]})");
  const std::string msg = error_of([&] { load_model_config(dir_.string()); });
  EXPECT_CONTAINS(msg, "generation_config.json");
  EXPECT_CONTAINS(msg, "'eos_token_id' holds token id 200000000");
}

// Issue 13: num_hidden_layers 2147483647 allocated without bound (4.7 GB before it was
// killed). Every size is bounded before anything is sized from it, and the error names the
// field and the bound.
TEST(ConfigParse, SizesAboveTheirBoundsAreRefused) {
  struct Case { const char* field; int64_t max; };
  const Case cases[] = {
      {"num_hidden_layers", 1024},       {"hidden_size", 131072},      {"intermediate_size", 1 << 20},
      {"num_attention_heads", 1024},     {"num_key_value_heads", 1024}, {"head_dim", 1024},
      {"vocab_size", 1 << 24},           {"max_position_embeddings", 1 << 26},
  };
  for (const Case& c : cases) {
    for (const int64_t v : {c.max + 1, int64_t(2147483647), int64_t(1) << 62}) {
      json j = base_llama();
      j[c.field] = v;
      const std::string msg = parse_error(j);
      EXPECT_CONTAINS(msg, std::string(kOrigin) + ": field '" + c.field + "' is " + std::to_string(v));
      EXPECT_CONTAINS(msg, "no larger than " + std::to_string(c.max));
    }
  }
  json j = base_llama();
  j["num_hidden_layers"] = 18446744073709551615ULL;
  EXPECT_CONTAINS(parse_error(j), "'num_hidden_layers' is 18446744073709551615");
}

TEST(ConfigParse, SizesAtTheirBoundsAreAccepted) {
  json j = base_llama();
  j["num_hidden_layers"] = 1024;
  j["max_position_embeddings"] = 1 << 26;
  j["vocab_size"] = 1 << 24;
  j["num_attention_heads"] = 1024;
  j["num_key_value_heads"] = 1024;
  j["hidden_size"] = 131072;
  j["head_dim"] = 1024;
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.n_layers, 1024);
  EXPECT_EQ(c.n_kv_heads, 1024);
  EXPECT_EQ(c.kv_bytes_per_token(4), int64_t(1024) * 1024 * 1024 * 2 * 4);
}

// Other sizes that set lengths: the derived head_dim, the sliding window, the llama3 RoPE
// context, and float fields that a float would turn into infinity.
TEST(ConfigParse, DerivedAndSecondarySizesAreBounded) {
  json j = base_llama();
  j["hidden_size"] = 4096;
  j["num_attention_heads"] = 2;
  j["num_key_value_heads"] = 1;
  std::string msg = parse_error(j);
  EXPECT_CONTAINS(msg, "4096 / 2 = 2048");
  EXPECT_CONTAINS(msg, "head_dim");

  j = base_llama();
  j["model_type"] = "mistral";
  j["sliding_window"] = 2147483647;
  EXPECT_CONTAINS(parse_error(j), "'sliding_window' is 2147483647");

  j = base_llama();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 1LL << 40}};
  EXPECT_CONTAINS(parse_error(j), "'rope_scaling.original_max_position_embeddings'");

  for (const double v : {1e300, 1e-300}) {
    j = base_llama();
    j["rope_theta"] = v;
    msg = parse_error(j);
    EXPECT_CONTAINS(msg, "'rope_theta'");
    EXPECT_CONTAINS(msg, "32-bit float");
  }
}

TEST(ConfigParse, DtypeKeys) {
  json j = base_llama();
  j["torch_dtype"] = "float16";
  EXPECT_EQ(parse(j).torch_dtype, "float16");
  j["dtype"] = "bfloat16";  // transformers 5's key wins
  EXPECT_EQ(parse(j).torch_dtype, "bfloat16");
}

TEST(ConfigParse, TieWordEmbeddings) {
  json j = base_llama();
  j["tie_word_embeddings"] = true;
  EXPECT_TRUE(parse(j).tie_word_embeddings);
}

TEST(ConfigParse, UnsupportedFeatures) {
  json j = base_llama();
  j["mlp_bias"] = true;
  EXPECT_NE(parse_error(j).find("'mlp_bias'"), std::string::npos);
  j = base_llama();
  j["hidden_act"] = "gelu";
  std::string msg = parse_error(j);
  EXPECT_NE(msg.find("'hidden_act'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gelu"), std::string::npos) << msg;
}

TEST(ConfigParse, Gemma3UnknownLayerType) {
  json j = test::load_json(test::model_dir("parity/gemma3") + "/config.json");
  j["layer_types"][2] = "global_attention";
  const std::string msg = parse_error(j);
  EXPECT_NE(msg.find("'layer_types'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("entry 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("global_attention"), std::string::npos) << msg;
}

TEST(ConfigParse, MoeTopKAboveExperts) {
  json j = test::load_json(test::model_dir("parity/mixtral") + "/config.json");
  j["num_experts_per_tok"] = 5;
  const std::string msg = parse_error(j);
  EXPECT_NE(msg.find("'num_experts_per_tok' is 5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at most num_local_experts = 4"), std::string::npos) << msg;
}

// ---- per-layer widths (docs/PER_LAYER_WIDTHS.md) ----------------------------------------------

TEST(ConfigParse, LayerWidthsAbsentMeansUniform) {
  const ModelConfig c = parse(base_llama());
  EXPECT_TRUE(c.layer_n_heads.empty() && c.layer_n_kv_heads.empty() && c.layer_d_ff.empty());
  EXPECT_FALSE(c.non_uniform());
  for (int64_t il = 0; il < c.n_layers; ++il) {
    EXPECT_EQ(c.heads_of(il), 4);
    EXPECT_EQ(c.kv_heads_of(il), 2);
    EXPECT_EQ(c.d_ff_of(il), 576);
  }
  EXPECT_EQ(c.kv_bytes_per_token(2), 6 * 2 * 64 * 2 * 2);
}

TEST(ConfigParse, LayerWidthsPerLayer) {
  json j = base_llama();
  j["layer_num_attention_heads"] = {4, 2, 4, 1, 4, 2};
  j["layer_num_key_value_heads"] = {2, 2, 2, 1, 1, 1};
  j["layer_intermediate_size"] = {576, 448, 320, 576, 64, 1};
  const ModelConfig c = parse(j);
  EXPECT_TRUE(c.non_uniform());
  EXPECT_EQ(c.n_heads, 4);  // the scalars stay as written (head_dim derives from them)
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.heads_of(3), 1);
  EXPECT_EQ(c.kv_heads_of(4), 1);
  EXPECT_EQ(c.d_ff_of(5), 1);
  EXPECT_EQ(c.kv_heads_per_layer(), (std::vector<int64_t>{2, 2, 2, 1, 1, 1}));
  EXPECT_EQ(c.kv_bytes_per_token(2), (2 + 2 + 2 + 1 + 1 + 1) * 64 * 2 * 2);  // summed over the layers
  // Arrays equal to the scalars: uniform.
  j = base_llama();
  j["layer_num_attention_heads"] = std::vector<int>(6, 4);
  j["layer_intermediate_size"] = std::vector<int>(6, 576);
  EXPECT_FALSE(parse(j).non_uniform());
  EXPECT_TRUE(parse(j).kv_heads_per_layer().empty());
}

TEST(ConfigParse, LayerWidthsErrorsNameTheFieldAndLayer) {
  struct Case {
    const char* key;
    json value;
    const char* expect;
  };
  const Case cases[] = {
      {"layer_num_attention_heads", {4, 4, 4}, "one positive integer per layer (6)"},
      {"layer_num_attention_heads", 4, "one positive integer per layer (6)"},
      {"layer_num_attention_heads", {4, 4, 0, 4, 4, 4}, "entry 2 (layer 2) is 0"},
      {"layer_num_key_value_heads", {2, 2, 2, 2, -1, 2}, "entry 4 (layer 4) is -1"},
      {"layer_intermediate_size", {576, 576, 576, 576, 576, 1.5}, "entry 5 (layer 5) is 1.5"},
      {"layer_intermediate_size", {576, "576", 576, 576, 576, 576}, "entry 1 (layer 1) is \"576\""},
      {"layer_intermediate_size", {576, 576, 576, 576, 576, ConfigLimits::kMaxIntermediate + 1},
       "no larger than 1048576"},
      {"layer_num_attention_heads", {4, 4, 4, 4, 4, ConfigLimits::kMaxHeads + 1}, "no larger than 1024"},
      {"layer_num_attention_heads", {4, 4, 4, 3, 4, 4},
       "layer 3 has 3 query heads (layer_num_attention_heads), not a multiple of its 2 key/value heads "
       "(num_key_value_heads)"},
      {"layer_num_key_value_heads", {2, 2, 3, 2, 2, 2},
       "layer 2 has 4 query heads (num_attention_heads), not a multiple of its 3 key/value heads "
       "(layer_num_key_value_heads)"},
  };
  for (const Case& k : cases) {
    json j = base_llama();
    j[k.key] = k.value;
    const std::string msg = parse_error(j);
    EXPECT_CONTAINS(msg, kOrigin);
    EXPECT_CONTAINS(msg, k.key);
    EXPECT_CONTAINS(msg, k.expect);
  }
}

TEST(ConfigParse, LayerIntermediateSizeRefusedForExperts) {
  json j = test::load_json(test::model_dir("parity/mixtral") + "/config.json");
  j["layer_intermediate_size"] = std::vector<int>(size_t(j["num_hidden_layers"].get<int>()), 32);
  EXPECT_CONTAINS(parse_error(j), "'layer_intermediate_size'");
  EXPECT_CONTAINS(parse_error(j), "mixture-of-experts");
}

// Phi-3's LongRoPE: short factors up to original_max_position_embeddings, long ones from
// there, cos/sin scaled by sqrt(1 + ln(factor) / ln(original)) (transformers'
// _compute_longrope_parameters), over the rotated dims only.
TEST(ConfigParse, Phi3LongRope) {
  json j = test::load_json(test::model_dir("parity/phi3") + "/config.json");
  j["max_position_embeddings"] = 2048;
  j["original_max_position_embeddings"] = 512;
  j["rope_theta"] = 10000.0;
  std::vector<double> shrt, lng;
  for (int i = 0; i < 12; ++i) {  // rotary_dim 24: 12 factors
    shrt.push_back(1.0 + 0.1 * i);
    lng.push_back(2.0 + 0.5 * i);
  }
  j["rope_scaling"] = {{"type", "longrope"}, {"short_factor", shrt}, {"long_factor", lng}};
  const ModelConfig c = parse(j);
  const RopeFrequencies f = rope_frequencies(c);
  ASSERT_EQ(f.inv_freq.size(), 12u);
  ASSERT_EQ(f.inv_freq_long.size(), 12u);
  EXPECT_EQ(f.long_from, 512);
  EXPECT_FLOAT_EQ(f.mscale, float(std::sqrt(1.0 + std::log(4.0) / std::log(512.0))));
  for (size_t i = 0; i < 12; ++i) {
    const double base = std::pow(10000.0, -2.0 * double(i) / 24.0);
    EXPECT_NEAR(f.inv_freq[i], base / shrt[i], 1e-6 * base) << i;
    EXPECT_NEAR(f.inv_freq_long[i], base / lng[i], 1e-6 * base) << i;
  }
  j["rope_scaling"]["long_factor"] = std::vector<double>(11, 1.0);
  EXPECT_NE(parse_error(j).find("'rope_scaling.long_factor'"), std::string::npos) << parse_error(j);
}

TEST(ConfigParse, NotJson) {
  std::string msg = error_of([] { parse_model_config("{\"hidden_size\": ", kOrigin); });
  EXPECT_NE(msg.find(kOrigin), std::string::npos) << msg;
  EXPECT_NE(msg.find("JSON"), std::string::npos) << msg;
  msg = error_of([] { parse_model_config("[1, 2]", kOrigin); });
  EXPECT_NE(msg.find(kOrigin), std::string::npos) << msg;
}

}  // namespace
}  // namespace tf

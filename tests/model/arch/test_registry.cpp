// The architecture registry: every row reads a config, builds a consistent weight table, and
// loads through load_model (random weights on the CPU backend), whose resident weights are
// what the table says.
#include "model/arch/registry.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "test_util.h"

namespace tf {
namespace {

// A small config every row accepts (Qwen2's and Mistral's own fields left at their defaults).
std::string small_config(std::string_view model_type) {
  return nlohmann::json{{"model_type", model_type},  {"hidden_size", 64},      {"intermediate_size", 96},
                        {"num_hidden_layers", 2},    {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                        {"vocab_size", 256},         {"max_position_embeddings", 128}, {"rms_norm_eps", 1e-5}}
      .dump();
}

TEST(Registry, EveryRowReadsItsConfigAndBuildsAConsistentTable) {
  ASSERT_FALSE(arch_registry().empty());
  for (const ArchEntry& a : arch_registry()) {
    SCOPED_TRACE(std::string(a.model_type));
    const ModelConfig c = parse_model_config(small_config(a.model_type), "test/config.json");
    EXPECT_EQ(c.model_type, a.model_type);
    EXPECT_EQ(&arch_of(c), &a);
    const WeightTable t = weight_table(c);  // check_table asserts consistency
    EXPECT_EQ(t.arch, a.model_type);
    // every layer's fused q|k|v and gate|up weights, with the shapes of the config
    for (int il = 0; il < 2; ++il) {
      const WeightSpec* qkv = t.find({WeightRole::Wqkv, il});
      ASSERT_NE(qkv, nullptr);
      int64_t rows = 0;
      for (const WeightPart& p : qkv->parts) rows += p.shape[0];
      EXPECT_EQ(rows, (4 + 2 * 2) * 16);
      ASSERT_NE(t.find({WeightRole::WgateUp, il}), nullptr);
    }
  }
}

TEST(Registry, UnknownModelTypeListsTheSupportedOnes) {
  const std::string msg = test::error_of([] { parse_model_config(small_config("gpt2"), "test/config.json"); });
  EXPECT_CONTAINS(msg, "test/config.json");
  EXPECT_CONTAINS(msg, "gpt2");
  EXPECT_CONTAINS(msg, supported_model_types());
  ModelConfig c;
  c.model_type = "gpt2";
  EXPECT_CONTAINS(test::error_of([&] { arch_of(c); }), "model_type 'gpt2' is not supported");
}

TEST(Registry, LoadModelHoldsWhatTheTableSays) {
  for (const char* m : {"tiny-main", "tiny-draft", "parity/qwen2"}) {
    SCOPED_TRACE(m);
    const std::string dir = test::model_dir(m);
    const WeightTable t = weight_table(load_model_config(dir));
    auto be = make_backend(BackendKind::Ref);
    const auto model = load_model(dir, *be, LoadOptions{.dummy_weights = true});
    EXPECT_EQ(model->config().model_type, t.arch);
    EXPECT_EQ(model->n_params(), t.n_params());       // a tied LM head is uploaded once
    EXPECT_EQ(model->weight_bytes(), 2 * t.n_params());  // random weights are BF16
  }
}

}  // namespace
}  // namespace tf

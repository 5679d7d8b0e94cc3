// A pruned folder (docs/PER_LAYER_WIDTHS.md: tiny-main with heads, KV groups and channels
// removed unevenly, tests/model/arch/cut_model.h) through the CLI: `generate` gives the
// zeroed uniform model's greedy text, `info` lists each layer's widths, `kv-plan` sums each
// layer's KV heads, and a folder whose tensor does not match its arrays fails naming the layer
// and the tensor.
#include <gtest/gtest.h>

#include "model/arch/cut_model.h"
#include "tools/cli_util.h"

namespace tf {
namespace {

using nlohmann::json;
using test::run_twofold;
using test::shell_quote;

class CliLayerWidths : public test::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    test::write_cut_model(test::model_dir("tiny-main"), dir_ / "removed", test::tiny_main_cut(), test::CutMode::Remove);
    test::write_cut_model(test::model_dir("tiny-main"), dir_ / "zeroed", test::tiny_main_cut(), test::CutMode::Zero);
  }
  std::string removed() const { return (dir_ / "removed").string(); }
};

TEST_F(CliLayerWidths, GenerateEqualsTheZeroedModel) {
  const auto g = test::load_golden("tiny-main")[1];
  const std::string args = " -p " + shell_quote(g.text) + " -n 24 --temp 0 --ignore-eos --json";
  const auto a = run_twofold("generate -m " + removed() + args);
  const auto b = run_twofold("generate -m " + (dir_ / "zeroed").string() + args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(json::parse(a.out)["output_ids"], json::parse(b.out)["output_ids"]);
  EXPECT_EQ(json::parse(a.out)["output_ids"].size(), 24u);
}

TEST_F(CliLayerWidths, InfoAndKvPlanPerLayer) {
  const auto info = run_twofold("info -m " + removed());
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_CONTAINS(info.out, "per-layer widths: layer  query heads  kv heads  intermediate  (kept of 4 / 2 / 576)");
  EXPECT_CONTAINS(info.out, "                      2            2         1           384");
  EXPECT_CONTAINS(info.out, "                      4            2         1           288");
  // 16 of 24 query heads, 2,712 of 3,456 channels
  EXPECT_CONTAINS(info.out, "kept: 66.7% of the query heads, 78.5% of the intermediate channels");
  // KV heads 2 + 2 + 1 + 2 + 1 + 2 = 10, x 2 (K, V) x 64 x 2 bytes
  EXPECT_CONTAINS(info.out, "KV bytes/token:   5120 (f32), 2560 (bf16/f16)");
  const auto plan = run_twofold("kv-plan -m " + removed() + " --gpu-mem 1 --kv-dtype bf16 --json");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const json p = json::parse(plan.out);
  EXPECT_EQ(p["kv_bytes_per_token"], 2560);
  EXPECT_EQ(p["kv_heads_per_layer"], json({2, 2, 1, 2, 1, 2}));
  const auto text = run_twofold("kv-plan -m " + removed() + " --gpu-mem 1 --kv-dtype bf16");
  EXPECT_CONTAINS(text.out, "KV heads per layer [2, 2, 1, 2, 1, 2]");
  EXPECT_CONTAINS(text.out, "= 10 x 2 x 64 x 2 = 2560 bytes");
}

TEST_F(CliLayerWidths, TensorOfAnotherShapeNamesLayerAndTensor) {
  json cfg = test::load_json(removed() + "/config.json");
  cfg["layer_intermediate_size"][2] = 400;
  std::ofstream(dir_ / "removed" / "config.json") << cfg.dump();
  const auto r = run_twofold("generate -m " + removed() + " -p 'Hello' -n 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_CONTAINS(r.err, "tensor 'model.layers.2.mlp.gate_proj.weight' (layer 2) has shape [384, 256], but the "
                         "config expects [400, 256]");
}

}  // namespace
}  // namespace tf

// The parity models (Qwen3, Gemma 3, Phi-3, Mixtral, Qwen3-MoE: models/README.md) end to end
// through the Engine with backend "cuda", against their golden files from Hugging Face
// transformers (float32), with test_cuda_engine.cpp's tolerances for BF16 activations:
// last-position logits within kLogitTol relative L2, greedy ids equal to the golden ids up to
// the first golden near-tie (margin < kTieTol). The parity models' weights are F32 in the
// checkpoint and BF16 on the GPU, which adds one rounding per weight (~1e-3 relative per
// matmul output) to tiny-main's budget over their 4 layers; kLogitTol stays 3e-2.
//
// All prompts run at once (max_seqs 4), so the backend sees batches mixing prefills and
// decodes, with CUDA Graphs recording the decode steps.
//
// The models are read from $TF_PARITY_DIR/<name> when TF_PARITY_DIR is set (a copy carried
// next to a checkout that leaves models/parity out), else from models/parity/<name>. A
// missing model folder fails the test and names the path it looked at.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "cuda_test_report.h"
#include "engine/golden_util.h"
#include "model/config.h"
#include "model/tokenizer/tokenizer.h"
#include "twofold/engine.h"

namespace tf {
namespace {

constexpr double kLogitTol = 3e-2;
constexpr double kTieTol = 0.25;

std::string parity_dir(const std::string& model) {
  const char* env = std::getenv("TF_PARITY_DIR");
  return env && *env ? (std::filesystem::path(env) / model).string() : test::model_dir("parity/" + model);
}

class CudaParity : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaParity, LogitsAndGreedyMatchTransformers) {
  TF_REQUIRE_CUDA_DEVICE();
  const std::string model = GetParam();
  const std::string dir = parity_dir(model);
  ASSERT_TRUE(std::filesystem::exists(std::filesystem::path(dir) / "model.safetensors"))
      << "parity model '" << model << "' not found at " << dir
      << " (set TF_PARITY_DIR to a folder holding a copy of models/parity)";
  Engine engine(EngineOptions{.model_dir = dir, .backend = "cuda", .max_seqs = 4});
  const int64_t n_vocab = engine.config().n_vocab;
  const std::vector<test::GoldenPrompt> golden = test::load_golden(model);

  for (const test::GoldenPrompt& g : golden) {
    SCOPED_TRACE(model + "/" + g.name);
    EXPECT_EQ(engine.tokenizer().encode(g.text), g.input_ids);
    const std::vector<float> logits = engine.score(g.input_ids, /*all_positions=*/false);
    ASSERT_EQ(logits.size(), size_t(n_vocab));
    const double err = test::rel_l2(logits.data(), g.last_logits.data(), size_t(n_vocab));
    EXPECT_LE(err, kLogitTol) << "last-position logits";
    test::record("parity " + model + ": last logits", "rel L2", err, kLogitTol, err <= kLogitTol);
    std::printf("[ note ] %s/%s: last logits rel L2 %.3g\n", model.c_str(), g.name.c_str(), err);
  }

  std::map<RequestId, const test::GoldenPrompt*> ids;
  for (const test::GoldenPrompt& g : golden)
    ids[engine.add_request(
        {.prompt_ids = g.input_ids,
         .sampling = {.temperature = 0, .max_tokens = int32_t(g.greedy_ids.size()), .ignore_eos = true}})] = &g;
  while (engine.has_unfinished()) engine.step();
  for (const auto& [id, gp] : ids) {
    const test::GoldenPrompt& g = *gp;
    SCOPED_TRACE(model + "/" + g.name);
    const std::vector<int32_t>& out = engine.output_ids(id);
    ASSERT_EQ(out.size(), g.greedy_ids.size());
    size_t first_diff = 0;
    while (first_diff < out.size() && out[first_diff] == g.greedy_ids[first_diff]) ++first_diff;
    const bool ok = first_diff == out.size() || g.greedy_margins[first_diff] < kTieTol;
    EXPECT_TRUE(ok) << "greedy step " << first_diff << " differs (got " << out[first_diff] << ", golden "
                    << g.greedy_ids[first_diff] << ") where the golden margin " << g.greedy_margins[first_diff]
                    << " is not a near-tie";
    test::record("parity " + model + ": greedy ids", "wrong prompts", !ok, 0, ok);
    std::printf("[ note ] %s/%s: greedy ids equal golden for %zu of %zu steps\n", model.c_str(), g.name.c_str(),
                first_diff, out.size());
    engine.release(id);
  }
  EXPECT_EQ(engine.n_kv_blocks_free(), engine.n_kv_blocks_total());
}

INSTANTIATE_TEST_SUITE_P(Models, CudaParity, ::testing::Values("qwen3", "gemma3", "phi3", "mixtral", "qwen3-moe"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace tf

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
// Mixture-of-experts models (Mixtral, Qwen3-MoE) first run each prompt as a routing-pinned
// twin (tests/engine/route_twin.h): CUDA and the CPU backend (F32) in lockstep, the CPU's
// expert choices pinned to CUDA's, over the prefill and the greedy steps. Asserted: the logits
// of every step within kLogitTol of the pinned CPU's, greedy ids equal up to the CPU's own
// near-ties, and every expert choice CUDA makes that the CPU would not make is a near-tie in
// the CPU's F32 router logits (gap < kRouteTieTol). Such a flip changes that token's MLP
// output by O(1) and everything after it, so a prompt whose CUDA routes flipped is not
// comparable with the golden file: its golden checks are reported, not asserted (the twin's
// checks cover it). The parity models' random routers leave the k-th and (k+1)-th expert's
// logits within 1e-2 of each other here and there, where BF16 weights and activations, about
// 1e-2 off in router logits, may choose either. On the H200 (2026-12-01) Mixtral's third
// prompt flipped at three tokens of its prefill (F32 gaps 0.0197, 0.0040, 0.0030), which is
// its last logits' 0.355 relative L2 against the golden file; tests/engine/test_route_twin.cpp
// reproduces the same miss on the CPU with BF16 weights.
//
// The models are read from $TF_PARITY_DIR/<name> when TF_PARITY_DIR is set (a copy carried
// next to a checkout that leaves models/parity out), else from models/parity/<name>. A
// missing model folder fails the test and names the path it looked at.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "backend/backend.h"
#include "param_name.h"
#include "batched_vs_alone.h"
#include "cuda_test_report.h"
#include "engine/golden_util.h"
#include "engine/route_twin.h"
#include "model/arch/registry.h"
#include "model/config.h"
#include "model/tokenizer/tokenizer.h"
#include "twofold/engine.h"

namespace tf {
namespace {

constexpr double kLogitTol = 3e-2;
constexpr double kTieTol = 0.25;
// Router logits of the parity models have an RMS of about 0.7; BF16 weights and activations
// put them about 1e-2 off (measured with the routes pinned), a difference of two about 1.4e-2;
// 0.05 is ~3.5 of those.
constexpr double kRouteTieTol = 0.05;

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
  const std::vector<test::GoldenPrompt> golden = test::load_golden(model);
  // Per prompt: whether CUDA's routes flipped in the prefill, or anywhere (MoE models only).
  std::map<std::string, std::pair<bool, bool>> flipped;
  if (load_model_config(dir).n_experts > 0) {
    auto cuda = make_backend(BackendKind::Cuda);
    auto cpu = make_backend(BackendKind::Cpu);
    for (const test::GoldenPrompt& g : golden) {
      SCOPED_TRACE(model + "/" + g.name + " (routing-pinned twin)");
      const test::TwinResult t = test::route_pinned_twin(dir, *cuda, DType::BF16, *cpu, g.input_ids,
                                                         int(g.greedy_ids.size()));
      double worst_l2 = 0, worst_gap = 0;
      int n_bad_greedy = 0;
      for (size_t s = 0; s < t.steps.size(); ++s) {
        const test::TwinStep& st = t.steps[s];
        worst_l2 = std::max(worst_l2, st.rel_l2);
        EXPECT_LE(st.rel_l2, kLogitTol) << "step " << s << ": logits vs the routing-pinned CPU";
        const bool greedy_ok = st.test_top1 == st.ref_top1 || st.ref_margin < kTieTol;
        n_bad_greedy += !greedy_ok;
        EXPECT_TRUE(greedy_ok) << "step " << s << ": CUDA picks " << st.test_top1 << ", the pinned CPU "
                               << st.ref_top1 << " with margin " << st.ref_margin;
      }
      bool in_prefill = false;
      for (const test::RouteFlip& f : t.flips) {
        worst_gap = std::max(worst_gap, f.gap);
        in_prefill |= f.step == 0;
        EXPECT_LT(f.gap, kRouteTieTol) << "step " << f.step << ", expert layer " << f.call << ", row " << f.row
                                       << ": CUDA's experts are " << f.gap << " below the CPU's in its F32 logits";
        std::printf("[ note ] %s/%s: routing flip at step %d, expert layer %d, row %lld, F32 gap %.3g\n",
                    model.c_str(), g.name.c_str(), f.step, f.call, (long long)f.row, f.gap);
      }
      flipped[g.name] = {in_prefill, !t.flips.empty()};
      test::record("parity " + model + ": pinned-route logits", "rel L2", worst_l2, kLogitTol, worst_l2 <= kLogitTol);
      test::record("parity " + model + ": route flips", "worst F32 gap", worst_gap, kRouteTieTol,
                   worst_gap < kRouteTieTol);
      test::record("parity " + model + ": pinned-route greedy", "non-tie diffs", n_bad_greedy, 0, n_bad_greedy == 0);
      std::printf("[ note ] %s/%s: routing-pinned twin: %zu steps, worst rel L2 %.3g, %zu of %lld expert choices "
                  "flipped (worst F32 gap %.3g)\n",
                  model.c_str(), g.name.c_str(), t.steps.size(), worst_l2, t.flips.size(), (long long)t.n_choices,
                  worst_gap);
    }
  }

  Engine engine(EngineOptions{.model_dir = dir, .backend = "cuda", .max_seqs = 4});
  const int64_t n_vocab = engine.config().n_vocab;
  for (const test::GoldenPrompt& g : golden) {
    SCOPED_TRACE(model + "/" + g.name);
    EXPECT_EQ(engine.tokenizer().encode(g.text), g.input_ids);
    const std::vector<float> logits = engine.score(g.input_ids, /*all_positions=*/false);
    ASSERT_EQ(logits.size(), size_t(n_vocab));
    const double err = test::rel_l2(logits.data(), g.last_logits.data(), size_t(n_vocab));
    const bool routed_apart = flipped[g.name].first;
    if (!routed_apart) {
      EXPECT_LE(err, kLogitTol) << "last-position logits";
      test::record("parity " + model + ": last logits", "rel L2", err, kLogitTol, err <= kLogitTol);
    }
    std::printf("[ note ] %s/%s: last logits rel L2 %.3g%s\n", model.c_str(), g.name.c_str(), err,
                routed_apart ? " (not asserted: a routing near-tie flipped in the prefill, see the twin above)" : "");
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
    const bool ok = first_diff == out.size() || g.greedy_margins[first_diff] < kTieTol || flipped[g.name].second;
    EXPECT_TRUE(ok) << "greedy step " << first_diff << " differs (got " << out[first_diff] << ", golden "
                    << g.greedy_ids[first_diff] << ") where the golden margin " << g.greedy_margins[first_diff]
                    << " is not a near-tie";
    test::record("parity " + model + ": greedy ids", "wrong prompts", !ok, 0, ok);
    std::printf("[ note ] %s/%s: greedy ids equal golden for %zu of %zu steps%s\n", model.c_str(), g.name.c_str(),
                first_diff, out.size(), flipped[g.name].second ? " (routes flipped at a near-tie: not asserted)" : "");
    engine.release(id);
  }
  EXPECT_EQ(engine.n_kv_blocks_free(), engine.n_kv_blocks_total());
}

// Each parity model through the batching engine: batched == alone up to BF16 near-ties
// (batched_vs_alone.h), CUDA Graphs on.
TEST_P(CudaParity, BatchedEqualsAloneUpToNearTies) {
  TF_REQUIRE_CUDA_DEVICE();
  const std::string model = GetParam();
  const std::string dir = parity_dir(model);
  ASSERT_TRUE(std::filesystem::exists(std::filesystem::path(dir) / "model.safetensors"))
      << "parity model '" << model << "' not found at " << dir;
  test::expect_batched_equals_alone(EngineOptions{.model_dir = dir, .backend = "cuda"}, test::load_golden(model),
                                    "parity " + model + ": batched vs alone", /*require_preemption=*/false);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaParity,
                         ::testing::Values("qwen3", "gemma3", "phi3", "mixtral", "qwen3-moe", "qwen3-moe-sparse",
                                           "llama3-rope"),
                         test::ParamName());

}  // namespace
}  // namespace tf

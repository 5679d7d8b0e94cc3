// The routing-pinned twin (route_twin.h) on the CPU backends, and the arithmetic behind
// Mixtral's third golden prompt on CUDA (last logits 0.355 off in relative L2 while the other
// prompts and the CPU are right), reproduced without a GPU: the CPU backend with the weights
// rounded to BF16 (as the CUDA backend stores them) and F32 activations. At layer 0, token
// 14 of that prompt the router's second and third experts are 0.0039 apart in F32 logits;
// rounding the weights moves router logits by about 1e-2, the choice flips, and that token's
// MLP output (an unrelated expert) and everything after it change by O(1). With the routes
// pinned to the BF16 run's, the two runs agree within the rounding budget, and every flip is
// a near-tie: no kernel computes the wrong thing.
#include <gtest/gtest.h>

#include <cstdio>

#include "backend/backend.h"
#include "engine/golden_util.h"
#include "engine/route_twin.h"

namespace tf {
namespace {

constexpr double kRouteTieTol = 0.05;  // test_cuda_parity.cpp's: BF16 noise of a router logit difference
constexpr double kBf16LogitTol = 3e-2;  // test_cuda_parity.cpp's kLogitTol

TEST(RouteTwin, GapIsTheLargestInversion) {
  const float l[] = {0.5f, 0.1f, 0.45f, -1.0f};
  const int32_t own[] = {0, 2}, same[] = {2, 0}, one_off[] = {0, 1}, both_off[] = {1, 3};
  EXPECT_EQ(test::route_gap(l, own, same, 2), 0.0);
  EXPECT_NEAR(test::route_gap(l, own, one_off, 2), 0.45 - 0.1, 1e-6);
  EXPECT_NEAR(test::route_gap(l, own, both_off, 2), 0.5 + 1.0, 1e-6);
}

// Pinned to its own routes, the reference computes exactly what it computes unpinned: the
// weights RouteSpy sets are the backend's own, bit for bit.
TEST(RouteTwin, PinnedToItselfIsExact) {
  const std::string dir = test::golden_model_dir("mixtral");
  const auto golden = test::load_golden("mixtral");
  auto a = make_backend(BackendKind::Cpu), b = make_backend(BackendKind::Cpu);
  const test::TwinResult t = test::route_pinned_twin(dir, *a, DType::F32, *b, golden[2].input_ids, 3);
  EXPECT_TRUE(t.flips.empty());
  EXPECT_GT(t.n_choices, 4 * 88);
  ASSERT_EQ(t.steps.size(), 4u);
  for (const test::TwinStep& s : t.steps) {
    EXPECT_EQ(s.rel_l2, 0.0);
    EXPECT_EQ(s.test_top1, s.ref_top1);
  }
}

// Two F32 backends route every token alike (their router logits differ by ~1e-6, the
// smallest F32 gap in these prompts is 3e-4) and agree to 1e-4.
TEST(RouteTwin, RefAndCpuRouteAlike) {
  for (const std::string model : {"mixtral", "qwen3-moe"}) {
    const auto golden = test::load_golden(model);
    for (const test::GoldenPrompt& g : golden) {
      SCOPED_TRACE(model + "/" + g.name);
      auto ref = make_backend(BackendKind::Ref), cpu = make_backend(BackendKind::Cpu);
      const test::TwinResult t =
          test::route_pinned_twin(test::golden_model_dir(model), *ref, DType::F32, *cpu, g.input_ids, 2);
      EXPECT_TRUE(t.flips.empty()) << t.flips.size() << " flips";
      for (const test::TwinStep& s : t.steps) EXPECT_LE(s.rel_l2, 1e-4);
    }
  }
}

// BF16 weights on the CPU: Mixtral's third prompt flips in the prefill (at near-ties only),
// its last logits then miss the golden ones by far more than BF16 rounding, and with the
// routes pinned the F32 run follows the BF16 one within the BF16 budget at every step.
TEST(RouteTwin, Bf16WeightsFlipMixtralsThirdPromptAtNearTiesOnly) {
  const std::string dir = test::golden_model_dir("mixtral");
  const auto golden = test::load_golden("mixtral");
  const LoadOptions bf16{.keep_stored_dtype = false, .weight_dtype = DType::BF16};
  for (const test::GoldenPrompt& g : golden) {
    SCOPED_TRACE(g.name);
    auto a = make_backend(BackendKind::Cpu), b = make_backend(BackendKind::Cpu);
    const test::TwinResult t = test::route_pinned_twin(dir, *a, DType::F32, *b, g.input_ids, 4, bf16);
    bool prefill_flip = false;
    for (const test::RouteFlip& f : t.flips) {
      EXPECT_LT(f.gap, kRouteTieTol) << "step " << f.step << ", expert layer " << f.call << ", row " << f.row;
      prefill_flip |= f.step == 0;
    }
    for (const test::TwinStep& s : t.steps) EXPECT_LE(s.rel_l2, kBf16LogitTol);
    // the BF16 run's own last logits against the golden file
    const double golden_l2 =
        test::rel_l2(t.test_prompt_logits.data(), g.last_logits.data(), t.test_prompt_logits.size());
    std::printf("[ note ] mixtral/%s with BF16 weights: %zu of %lld expert choices flipped, last logits rel L2 %.3g "
                "against the golden file\n", g.name.c_str(), t.flips.size(), (long long)t.n_choices, golden_l2);
    if (g.name == "p3") {
      EXPECT_TRUE(prefill_flip) << "the near-tie at layer 0, token 14 was expected to flip";
      EXPECT_GT(golden_l2, kBf16LogitTol) << "a flip in the prefill changes the last logits by O(1)";
    } else if (!prefill_flip) {
      EXPECT_LE(golden_l2, kBf16LogitTol);
    }
  }
}

}  // namespace
}  // namespace tf

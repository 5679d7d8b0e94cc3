// Per-layer widths (docs/PER_LAYER_WIDTHS.md) on the CUDA backend: tiny-main with heads,
// whole KV groups and MLP channels removed unevenly across layers (tests/model/arch/
// cut_model.h), with o_proj and down_proj biases on two layers, through the engine with and
// without CUDA Graphs, against the reference backend (F32) and the zeroed uniform model.
//
// Tolerances are test_cuda_engine.cpp's: BF16 activations and KV put logits about 1e-2 off
// in relative L2 (kLogitTol 3e-2); greedy ids equal the reference's up to the first step
// whose reference top-1/top-2 margin is a BF16 near-tie (< kTieTol).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cuda_test_report.h"
#include "engine/golden_util.h"
#include "model/arch/cut_model.h"
#include "twofold/engine.h"

namespace tf {
namespace {

namespace fs = std::filesystem;

constexpr double kLogitTol = 3e-2;
constexpr double kTieTol = 0.25;

// Biases on layers 1 and 3 of both projections.
std::vector<test::RawTensor> biases() {
  std::vector<test::RawTensor> out;
  for (int il : {1, 3})
    for (const char* name : {"self_attn.o_proj.bias", "mlp.down_proj.bias"}) {
      std::vector<float> b(256);
      for (size_t i = 0; i < b.size(); ++i) b[i] = 0.05f * std::sin(0.37f * float(i) + float(il));
      out.push_back(test::bf16_vector("model.layers." + std::to_string(il) + "." + name, b));
    }
  return out;
}

// Parameter: "graphs" (decode steps recorded and replayed) or "eager".
class CudaLayerWidths : public test::TempDirTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(CudaLayerWidths, PrunedModelMatchesTheReference) {
  TF_REQUIRE_CUDA_DEVICE();
  const std::string tiny = test::model_dir("tiny-main");
  test::write_cut_model(tiny, dir_ / "removed", test::tiny_main_cut(), test::CutMode::Remove, biases());
  test::write_cut_model(tiny, dir_ / "zeroed", test::tiny_main_cut(), test::CutMode::Zero, biases());
  auto options = [&](const std::string& name, const std::string& backend) {
    return EngineOptions{.model_dir = (dir_ / name).string(), .backend = backend, .max_seqs = 4,
                         .kernels = {.cuda_graphs = GetParam() == "graphs"}};
  };
  Engine cuda(options("removed", "cuda")), zeroed(options("zeroed", "cuda")), ref(options("removed", "ref"));
  const int64_t n_vocab = cuda.config().n_vocab;
  const std::vector<test::GoldenPrompt> prompts = test::load_golden("tiny-main");

  for (const test::GoldenPrompt& g : prompts) {
    SCOPED_TRACE(g.name);
    const std::vector<float> got = cuda.score(g.input_ids, /*all_positions=*/false);
    const std::vector<float> want = ref.score(g.input_ids, false);
    const std::vector<float> zero = zeroed.score(g.input_ids, false);
    const double err = test::rel_l2(got.data(), want.data(), size_t(n_vocab));
    const double err_zeroed = test::rel_l2(zero.data(), want.data(), size_t(n_vocab));
    EXPECT_LE(err, kLogitTol);
    EXPECT_LE(err_zeroed, kLogitTol);
    test::record("layer widths: pruned logits vs ref", "rel L2", err, kLogitTol, err <= kLogitTol);
    std::printf("[ note ] %s %s: pruned vs ref rel L2 %.3g, zeroed uniform vs ref %.3g\n", GetParam().c_str(),
                g.name.c_str(), err, err_zeroed);
  }

  // Greedy continuations of all prompts at once (batched decode steps, recorded when "graphs").
  std::vector<RequestId> ids;
  for (const test::GoldenPrompt& g : prompts)
    ids.push_back(cuda.add_request({.prompt_ids = g.input_ids,
                                    .sampling = {.temperature = 0, .max_tokens = 16, .ignore_eos = true}}));
  while (cuda.has_unfinished()) cuda.step();
  for (size_t p = 0; p < prompts.size(); ++p) {
    SCOPED_TRACE(prompts[p].name);
    const std::vector<int32_t>& out = cuda.output_ids(ids[p]);
    ASSERT_EQ(out.size(), 16u);
    // The reference's own greedy path, step by step, with its margins.
    std::vector<int32_t> seq = prompts[p].input_ids;
    size_t step = 0;
    double margin = 0;
    for (; step < out.size(); ++step) {
      const std::vector<float> l = ref.score(seq, false);
      margin = test::top2_margin(l.data(), n_vocab);
      const int32_t want = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
      if (want != out[step]) break;
      seq.push_back(want);
    }
    const bool ok = step == out.size() || margin < kTieTol;
    EXPECT_TRUE(ok) << "greedy step " << step << " differs where the reference margin " << margin
                    << " is not a near-tie";
    test::record("layer widths: greedy ids", "wrong prompts", !ok, 0, ok);
    std::printf("[ note ] %s %s: greedy ids equal the reference's for %zu of %zu steps\n", GetParam().c_str(),
                prompts[p].name.c_str(), step, out.size());
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaLayerWidths, ::testing::Values("graphs", "eager"));

}  // namespace
}  // namespace tf

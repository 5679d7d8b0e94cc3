// End-to-end correctness against Hugging Face transformers: prompt ids, last-position
// logits (relative L2 error <= 1e-4), argmax at every prompt position, and greedy
// continuations, through the same Engine that `twofold generate` uses; the cpu backend at
// each ISA level its kernels are built for and the machine runs.
#include <gtest/gtest.h>

#include "backend/cpu/isa.h"
#include "engine/golden_util.h"
#include "model/config.h"
#include "model/tokenizer/tokenizer.h"
#include "sample/sampler.h"
#include "twofold/engine.h"

namespace tf {
namespace {

struct Case {
  std::string model;
  std::string backend;
  cpu::Isa isa = cpu::Isa::Baseline;  // cpu backend: the kernels' ISA level (forced for the test)
};

// Every model on the cpu backend at every ISA level this build and machine have; tiny-main,
// qwen2 and the parity models of the other architectures on the reference backend.
std::vector<Case> cases() {
  std::vector<Case> v;
  for (cpu::Isa isa : cpu::supported_isas())
    for (const char* model :
         {"tiny-main", "tiny-draft", "llama-mha", "llama3-rope", "qwen2", "qwen3", "gemma3", "phi3", "mixtral",
          "qwen3-moe", "qwen3-moe-sparse"})
      v.push_back({model, "cpu", isa});
  for (const char* model : {"tiny-main", "llama3-rope", "qwen2", "qwen3", "gemma3", "phi3", "mixtral", "qwen3-moe",
                            "qwen3-moe-sparse"})
    v.push_back({model, "ref"});
  return v;
}

class GoldenTest : public ::testing::TestWithParam<Case> {};

// F32 compute over the stored weights; the goldens are float32 (TF32 off) and rounded to 6
// significant digits, so 1e-4 relative L2 leaves room only for summation order.
constexpr double kLogitTol = 1e-4;
// Margins smaller than this may flip under a different summation order.
constexpr double kTieTol = 1e-3;

TEST_P(GoldenTest, LogitsAndGreedyMatchTransformers) {
  const Case c = GetParam();
  if (c.backend == "cpu") cpu::set_active_isa(c.isa);
  Engine engine(EngineOptions{.model_dir = test::golden_model_dir(c.model), .backend = c.backend,
                              .max_seqs = 4});
  const int64_t n_vocab = engine.config().n_vocab;
  for (const test::GoldenPrompt& g : test::load_golden(c.model)) {
    SCOPED_TRACE(c.model + "/" + g.name);
    EXPECT_EQ(engine.tokenizer().encode(g.text), g.input_ids);

    // Logits at every prompt position: the last row against the golden logits, every row's
    // argmax against the golden argmax.
    const std::vector<float> all = engine.score(g.input_ids, /*all_positions=*/true);
    ASSERT_EQ(all.size(), g.input_ids.size() * size_t(n_vocab));
    const float* last = all.data() + (g.input_ids.size() - 1) * size_t(n_vocab);
    ASSERT_EQ(g.last_logits.size(), size_t(n_vocab));
    EXPECT_LE(test::rel_l2(last, g.last_logits.data(), size_t(n_vocab)), kLogitTol);
    for (size_t i = 0; i < g.input_ids.size(); ++i)
      EXPECT_EQ(argmax({all.data() + i * size_t(n_vocab), size_t(n_vocab)}), g.argmax_per_position[i])
          << "position " << i;

    const RequestId id = engine.add_request(
        {.prompt_ids = g.input_ids,
         .sampling = {.temperature = 0, .max_tokens = int32_t(g.greedy_ids.size()), .ignore_eos = true}});
    while (engine.has_unfinished()) engine.step();
    const std::vector<int32_t>& out = engine.output_ids(id);
    ASSERT_EQ(out.size(), g.greedy_ids.size());
    const size_t n_cmp = test::greedy_steps_to_compare(g, kTieTol);
    for (size_t i = 0; i < n_cmp; ++i) ASSERT_EQ(out[i], g.greedy_ids[i]) << "greedy step " << i;
    if (n_cmp < g.greedy_ids.size())
      std::printf("[ note ] %s/%s: compared the first %zu of %zu greedy steps (golden margin %.2g at step %zu)\n",
                  c.model.c_str(), g.name.c_str(), n_cmp, g.greedy_ids.size(), g.greedy_margins[n_cmp], n_cmp);
    engine.release(id);
  }
  EXPECT_EQ(engine.n_kv_blocks_free(), engine.n_kv_blocks_total());
}

INSTANTIATE_TEST_SUITE_P(
    Models, GoldenTest,
    ::testing::ValuesIn(cases()),
    [](const auto& info) {
      std::string n = info.param.model + "_" + info.param.backend;
      if (info.param.backend == "cpu") {
        n += '_';
        n += cpu::isa_name(info.param.isa);
      }
      for (char& ch : n) if (ch == '-') ch = '_';
      return n;
    });

}  // namespace
}  // namespace tf

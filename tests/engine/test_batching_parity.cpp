// The batching engine on every parity model (models/parity: the architectures beyond Llama)
// gives each request exactly the greedy ids it gets alone, as test_batching.cpp checks for
// tiny-main: the golden prompts and three sharing a system prompt, staggered arrivals,
// prefill chunked at 64 tokens, and a pool small enough to preempt. On the CPU backend every
// op computes each row with the same summation order whatever else is in the batch (the
// experts of MoE models included: each assignment is computed alone), so equality is exact.
#include <gtest/gtest.h>

#include <map>

#include "engine/golden_util.h"
#include "param_name.h"
#include "model/tokenizer/tokenizer.h"
#include "twofold/engine.h"

namespace tf {
namespace {

constexpr int32_t kNew = 8;

GenerateRequest greedy(const std::vector<int32_t>& ids) {
  return {.prompt_ids = ids, .sampling = {.temperature = 0, .max_tokens = kNew, .ignore_eos = true}};
}

class BatchingParity : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchingParity, BatchedEqualsAlone) {
  const std::string model = GetParam();
  const std::string dir = test::golden_model_dir(model);
  const auto golden = test::load_golden(model);
  std::vector<std::vector<int32_t>> prompts, alone;
  {
    Engine e(EngineOptions{.model_dir = dir, .max_seqs = 1});
    std::string system;
    for (const auto& g : golden) {
      prompts.push_back(g.input_ids);
      system += g.text + "\n";
    }
    for (size_t i = 0; i < 3 && i < golden.size(); ++i) prompts.push_back(e.tokenizer().encode(system + golden[i].text));
    for (const auto& p : prompts) {
      const RequestId id = e.add_request(greedy(p));
      while (e.has_unfinished()) e.step();
      alone.push_back(e.output_ids(id));
      ASSERT_EQ(int32_t(alone.back().size()), kNew);
    }
  }
  // A pool of 24 blocks of 16 holds two of the long requests (~170 tokens) at once, so the
  // later ones preempt.
  for (const int32_t n_blocks : {0, 24}) {
    SCOPED_TRACE(model + (n_blocks ? " (24-block pool)" : " (default pool)"));
    Engine e(EngineOptions{.model_dir = dir, .n_kv_blocks = n_blocks, .max_batch_tokens = 64, .max_seqs = 16});
    std::map<size_t, RequestId> ids;
    for (int step = 0; ids.size() < prompts.size() || e.has_unfinished(); ++step) {
      for (size_t i = 0; i < prompts.size(); ++i)
        if (!ids.count(i) && int(i % 3) * 2 <= step) ids[i] = e.add_request(greedy(prompts[i]));
      e.step();
      ASSERT_LT(step, 5000) << "no progress";
    }
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(e.output_ids(ids[i]), alone[i]) << "request " << i;
    const EngineMetrics m = e.metrics();
    EXPECT_EQ(m.kv_blocks_used, 0);
    EXPECT_GT(m.prefix_hit_tokens, 0) << "the shared system prompt was meant to hit the prefix cache";
    if (n_blocks) {
      EXPECT_GT(m.n_preemptions, 0) << "the 24-block pool was meant to force preemption";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, BatchingParity, ::testing::Values("qwen3", "gemma3", "phi3", "mixtral", "qwen3-moe"),
                         test::ParamName());

}  // namespace
}  // namespace tf

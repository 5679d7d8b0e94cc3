// The end-to-end check against transformers' golden vectors (golden_util.h) that every model
// source passes through the Engine `twofold generate` uses: the tokenizer gives the golden
// prompt ids, the last logits are within `logit_tol` relative L2, the argmax at every prompt
// position agrees, and the greedy continuation agrees up to the first golden near-tie (margin
// below `tie_tol`).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "engine/golden_util.h"
#include "model/config.h"
#include "model/tokenizer/tokenizer.h"
#include "sample/sampler.h"
#include "twofold/engine.h"

namespace tf::test {

inline void expect_matches_golden(Engine& engine, const std::string& model, double logit_tol, double tie_tol) {
  const int64_t n_vocab = engine.config().n_vocab;
  for (const GoldenPrompt& g : load_golden(model)) {
    SCOPED_TRACE(model + "/" + g.name);
    EXPECT_EQ(engine.tokenizer().encode(g.text), g.input_ids);
    // Logits at every prompt position: the last row against the golden logits, every row's
    // argmax against the golden argmax.
    const std::vector<float> all = engine.score(g.input_ids, /*all_positions=*/true);
    ASSERT_EQ(all.size(), g.input_ids.size() * size_t(n_vocab));
    const float* last = all.data() + (g.input_ids.size() - 1) * size_t(n_vocab);
    ASSERT_EQ(g.last_logits.size(), size_t(n_vocab));
    EXPECT_LE(rel_l2(last, g.last_logits.data(), size_t(n_vocab)), logit_tol);
    for (size_t i = 0; i < g.input_ids.size(); ++i)
      EXPECT_EQ(argmax({all.data() + i * size_t(n_vocab), size_t(n_vocab)}), g.argmax_per_position[i])
          << "position " << i;

    const RequestId id = engine.add_request(
        {.prompt_ids = g.input_ids,
         .sampling = {.temperature = 0, .max_tokens = int32_t(g.greedy_ids.size()), .ignore_eos = true}});
    while (engine.has_unfinished()) engine.step();
    const std::vector<int32_t>& out = engine.output_ids(id);
    ASSERT_EQ(out.size(), g.greedy_ids.size());
    const size_t n_cmp = greedy_steps_to_compare(g, tie_tol);
    for (size_t i = 0; i < n_cmp; ++i) ASSERT_EQ(out[i], g.greedy_ids[i]) << "greedy step " << i;
    if (n_cmp < g.greedy_ids.size())
      std::printf("[ note ] %s/%s: compared the first %zu of %zu greedy steps (golden margin %.2g at step %zu)\n",
                  model.c_str(), g.name.c_str(), n_cmp, g.greedy_ids.size(), g.greedy_margins[n_cmp], n_cmp);
    engine.release(id);
  }
  EXPECT_EQ(engine.n_kv_blocks_free(), engine.n_kv_blocks_total());
}

}  // namespace tf::test

// Greedy continuations of the golden prompts through the batching engine, for tests that
// compare two engines (sharded and not, pruned and zeroed, ...).
#pragma once

#include <vector>

#include "engine/golden_util.h"
#include "twofold/engine.h"

namespace tf::test {

// Greedy continuations (max_tokens each, eos ignored) of every prompt, all admitted at once:
// the engine runs them together in mixed prefill and decode steps.
inline std::vector<std::vector<int32_t>> greedy_batched(Engine& engine, const std::vector<GoldenPrompt>& prompts,
                                                        int32_t max_tokens = 16) {
  std::vector<RequestId> ids;
  for (const GoldenPrompt& g : prompts)
    ids.push_back(engine.add_request({.prompt_ids = g.input_ids,
                                      .sampling = {.temperature = 0, .max_tokens = max_tokens, .ignore_eos = true}}));
  while (engine.has_unfinished()) engine.step();
  std::vector<std::vector<int32_t>> out;
  for (RequestId id : ids) out.push_back(engine.output_ids(id));
  return out;
}

}  // namespace tf::test

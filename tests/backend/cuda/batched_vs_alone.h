// The batching engine on CUDA: every request's greedy ids through a batch (staggered
// arrivals, chunked prefill, a shared system prompt hitting the prefix cache, and a pool so
// small that sequences are preempted and recomputed) equal its ids run alone, except where
// a BF16 near-tie flips: at the first differing step, the alone run's own top-1/top-2
// margin (recomputed with score() along its trajectory) must be below kBatchTieTol. cuBLAS may
// pick another algorithm for another batch size, so bitwise equality is not promised.
// Requests: the golden prompts, then three that share a system prompt (all golden texts)
// ahead of the first three golden texts.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "cuda_test_report.h"
#include "engine/golden_util.h"
#include "model/config.h"
#include "model/tokenizer/tokenizer.h"
#include "twofold/engine.h"

namespace tf::test {

constexpr double kBatchTieTol = 0.25;  // test_cuda_engine.cpp's kTieTol: BF16 noise of a logit difference

// `base`: the model and backend options; `label` names the case in the report. With
// `require_preemption`, the 40-block pool must preempt and the system prompt hit the prefix
// cache (models whose KV fits the pool, or whose layers keep fewer blocks, only report them).
inline void expect_batched_equals_alone(const EngineOptions& base, const std::vector<GoldenPrompt>& golden,
                                        const std::string& label, bool require_preemption) {
  std::vector<std::vector<int32_t>> prompts;
  std::string system;
  for (const auto& g : golden) {
    prompts.push_back(g.input_ids);
    system += g.text + "\n";
  }
  constexpr int32_t kNew = 24;

  std::vector<std::vector<int32_t>> alone;
  std::vector<std::vector<double>> alone_margins;
  {
    EngineOptions opt = base;
    opt.max_seqs = 1;
    Engine e(opt);
    for (size_t i = 0; i < 3 && i < golden.size(); ++i) prompts.push_back(e.tokenizer().encode(system + golden[i].text));
    const int64_t n_vocab = e.config().n_vocab;
    for (const auto& p : prompts) {
      const RequestId id = e.add_request(
          {.prompt_ids = p, .sampling = {.temperature = 0, .max_tokens = kNew, .ignore_eos = true}});
      while (e.has_unfinished()) e.step();
      alone.push_back(e.output_ids(id));
      std::vector<int32_t> seq = p;
      seq.insert(seq.end(), alone.back().begin(), alone.back().end() - 1);
      const std::vector<float> logits = e.score(seq, /*all_positions=*/true);
      std::vector<double> m;
      for (int32_t d = 0; d < kNew; ++d)
        m.push_back(top2_margin(logits.data() + (p.size() - 1 + size_t(d)) * size_t(n_vocab), n_vocab));
      alone_margins.push_back(m);
    }
  }

  EngineOptions opt = base;
  opt.n_kv_blocks = 40;
  opt.max_batch_tokens = 64;
  opt.max_seqs = 16;
  Engine e(opt);
  std::map<size_t, RequestId> ids;
  for (int step = 0; ids.size() < prompts.size() || e.has_unfinished(); ++step) {
    for (size_t i = 0; i < prompts.size(); ++i)
      if (!ids.count(i) && int(i % 4) * 2 <= step)
        ids[i] = e.add_request(
            {.prompt_ids = prompts[i], .sampling = {.temperature = 0, .max_tokens = kNew, .ignore_eos = true}});
    e.step();
    ASSERT_LT(step, 10000) << "no progress";
  }
  const EngineMetrics m = e.metrics();
  if (require_preemption) {
    EXPECT_GT(m.n_preemptions, 0) << "the 40-block pool was meant to force preemption";
    EXPECT_GT(m.prefix_hit_tokens, 0) << "the shared system prompt was meant to hit the prefix cache";
  }
  EXPECT_EQ(m.kv_blocks_used, 0);
  int n_flips = 0, n_bad = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t>& got = e.output_ids(ids[i]);
    ASSERT_EQ(got.size(), alone[i].size());
    size_t d = 0;
    while (d < got.size() && got[d] == alone[i][d]) ++d;
    if (d == got.size()) continue;
    const bool ok = alone_margins[i][d] < kBatchTieTol;
    n_flips += ok;
    n_bad += !ok;
    EXPECT_TRUE(ok) << "request " << i << " differs at step " << d << " where the margin " << alone_margins[i][d]
                    << " is not a near-tie";
    std::printf("[ note ] %s, request %zu: first difference at step %zu, margin %.3g (%s)\n", label.c_str(), i, d,
                alone_margins[i][d], ok ? "near-tie" : "NOT a near-tie");
  }
  std::printf("[ note ] %s: %zu requests, %d near-tie flips, %lld preemptions, %lld prefix-hit tokens\n",
              label.c_str(), prompts.size(), n_flips, (long long)m.n_preemptions, (long long)m.prefix_hit_tokens);
  record(label, "non-tie diffs", n_bad > 0, 0, n_bad == 0);
}

}  // namespace tf::test

// The batching engine gives every request exactly the ids it gets when run alone (greedy):
// mixed prompt lengths, staggered arrivals, shared prefixes, chunked prefill, and preemption
// forced by a tiny block pool. CPU matmul and attention compute each row with the same
// summation order whatever else is in the batch, so equality is exact, not approximate.
#include <gtest/gtest.h>

#include <map>

#include "engine/golden_util.h"
#include "model/tokenizer/tokenizer.h"
#include "twofold/engine.h"

namespace tf {
namespace {

const std::string kTiny = test::model_dir("tiny-main");

struct Prompt {
  std::vector<int32_t> ids;
  int32_t max_tokens;
};

// Golden prompts plus longer ones built from them (lengths 5 to ~300 tokens), some sharing
// a long common prefix (a "system prompt").
std::vector<Prompt> make_prompts(const Tokenizer& tok) {
  std::vector<Prompt> ps;
  const auto golden = test::load_golden("tiny-main");
  for (size_t i = 0; i < golden.size(); ++i) ps.push_back({golden[i].input_ids, int32_t(6 + 3 * i)});
  std::string system;
  for (const auto& g : golden) system += g.text + "\n";
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> ids = tok.encode(system + system.substr(0, size_t(40 * i)));
    ps.push_back({ids, 10 + i});
  }
  std::string very_long;
  for (int i = 0; i < 3; ++i) very_long += system;
  ps.push_back({tok.encode(very_long), 12});
  return ps;
}

GenerateRequest greedy(const Prompt& p) {
  return {.prompt_ids = p.ids, .sampling = {.temperature = 0, .max_tokens = p.max_tokens, .ignore_eos = true}};
}

std::vector<std::vector<int32_t>> run_alone(const std::vector<Prompt>& ps) {
  Engine e(EngineOptions{.model_dir = kTiny, .max_seqs = 1});
  std::vector<std::vector<int32_t>> out;
  for (const Prompt& p : ps) {
    const RequestId id = e.add_request(greedy(p));
    while (e.has_unfinished()) e.step();
    out.push_back(e.output_ids(id));
    EXPECT_EQ(int32_t(out.back().size()), p.max_tokens);
  }
  return out;
}

class Batching : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Engine e(EngineOptions{.model_dir = kTiny, .max_seqs = 1});
    prompts_ = make_prompts(e.tokenizer());
    alone_ = run_alone(prompts_);
  }
  // Runs all prompts through one engine; request i is added at step arrival[i].
  std::vector<std::vector<int32_t>> run_batched(const EngineOptions& opt, const std::vector<int>& arrival,
                                                EngineMetrics* metrics = nullptr) {
    Engine e(opt);
    std::map<size_t, RequestId> ids;
    int step = 0;
    while (ids.size() < prompts_.size() || e.has_unfinished()) {
      for (size_t i = 0; i < prompts_.size(); ++i)
        if (!ids.count(i) && arrival[i] <= step) ids[i] = e.add_request(greedy(prompts_[i]));
      e.step();
      ++step;
      EXPECT_LT(step, 5000) << "engine made no progress";
      if (step >= 5000) break;
    }
    std::vector<std::vector<int32_t>> out;
    for (size_t i = 0; i < prompts_.size(); ++i) out.push_back(e.output_ids(ids[i]));
    EXPECT_EQ(e.n_kv_blocks_free(), e.n_kv_blocks_total()) << "blocks leaked";
    const EngineMetrics m = e.metrics();
    EXPECT_EQ(m.kv_blocks_used, 0);
    EXPECT_EQ(m.kv_blocks_free + m.kv_blocks_cached, m.kv_blocks_total);
    if (metrics) *metrics = m;
    return out;
  }
  void expect_same_as_alone(const std::vector<std::vector<int32_t>>& got) {
    ASSERT_EQ(got.size(), alone_.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], alone_[i]) << "request " << i;
  }
  static std::vector<Prompt> prompts_;
  static std::vector<std::vector<int32_t>> alone_;
};
std::vector<Prompt> Batching::prompts_;
std::vector<std::vector<int32_t>> Batching::alone_;

TEST_F(Batching, AllAtOnce) {
  expect_same_as_alone(run_batched({.model_dir = kTiny, .max_seqs = 64}, std::vector<int>(prompts_.size(), 0)));
}

TEST_F(Batching, SharedPrefixesHitTheCacheAndGiveTheSameIds) {
  // Arrivals one step apart: the first "system prompt" request computes the shared blocks,
  // the later ones reuse them.
  std::vector<int> arrival;
  for (size_t i = 0; i < prompts_.size(); ++i) arrival.push_back(int(i) * 4);
  EngineMetrics m;
  expect_same_as_alone(run_batched({.model_dir = kTiny, .max_seqs = 64}, arrival, &m));
  EXPECT_GT(m.prefix_hit_tokens, 200) << "shared system prompt should be served from cached blocks";
  EngineMetrics off;
  expect_same_as_alone(run_batched({.model_dir = kTiny, .max_seqs = 64, .enable_prefix_caching = false}, arrival, &off));
  EXPECT_EQ(off.prefix_hit_tokens, 0);
}

TEST_F(Batching, StaggeredArrivalsWithChunkedPrefill) {
  std::vector<int> arrival;
  for (size_t i = 0; i < prompts_.size(); ++i) arrival.push_back(int(i * 3 % 11));
  // A small token budget splits the long prompts into chunks that run beside decodes.
  expect_same_as_alone(run_batched({.model_dir = kTiny, .max_batch_tokens = 64, .max_seqs = 64}, arrival));
}

TEST_F(Batching, FewRunningSlots) {
  expect_same_as_alone(run_batched({.model_dir = kTiny, .max_batch_tokens = 96, .max_seqs = 3},
                                   std::vector<int>(prompts_.size(), 0)));
}

TEST_F(Batching, PreemptionForcedByTinyPool) {
  // The longest request needs ~60 blocks of 8 tokens; 80 blocks cannot hold everything that
  // wants to run, so sequences are preempted and recomputed.
  EngineMetrics m;
  expect_same_as_alone(run_batched({.model_dir = kTiny, .block_size = 8, .n_kv_blocks = 80,
                                    .max_batch_tokens = 128, .max_seqs = 64},
                                   std::vector<int>(prompts_.size(), 0), &m));
  EXPECT_GT(m.n_preemptions, 0) << "the pool was meant to be too small";
}

TEST_F(Batching, AbortFreesBlocksAtOnceAndOthersAreUnaffected) {
  Engine e(EngineOptions{.model_dir = kTiny, .max_seqs = 64, .enable_prefix_caching = false});
  std::vector<RequestId> ids;
  for (size_t i = 0; i < 3; ++i) ids.push_back(e.add_request(greedy(prompts_[8 + i])));
  for (int s = 0; s < 3; ++s) e.step();
  const int32_t used_before = e.metrics().kv_blocks_used;
  const int32_t victim_blocks = int32_t((prompts_[9].ids.size() + 3 + 15) / 16);
  e.abort(ids[1]);
  EXPECT_LE(e.metrics().kv_blocks_used, used_before - victim_blocks + 1) << "blocks not freed at abort";
  bool saw_abort = false;
  while (e.has_unfinished())
    for (const RequestOutput& o : e.step())
      if (o.id == ids[1]) {
        EXPECT_TRUE(o.finished);
        EXPECT_EQ(o.finish_reason, FinishReason::Abort);
        saw_abort = true;
      }
  EXPECT_TRUE(saw_abort);
  EXPECT_EQ(e.output_ids(ids[0]), alone_[8]);
  EXPECT_EQ(e.output_ids(ids[2]), alone_[10]);
  EXPECT_EQ(e.metrics().kv_blocks_used, 0);
}

TEST_F(Batching, HigherPriorityFinishesFirstWhenOnlyOneRuns) {
  Engine e(EngineOptions{.model_dir = kTiny, .max_seqs = 1});
  const RequestId low = e.add_request({.prompt_ids = prompts_[0].ids, .sampling = {.temperature = 0, .max_tokens = 4}, .priority = 0});
  const RequestId high = e.add_request({.prompt_ids = prompts_[1].ids, .sampling = {.temperature = 0, .max_tokens = 4}, .priority = 5});
  std::vector<RequestId> finish_order;
  while (e.has_unfinished())
    for (const RequestOutput& o : e.step())
      if (o.finished) finish_order.push_back(o.id);
  EXPECT_EQ(finish_order, (std::vector<RequestId>{high, low}));
}

}  // namespace
}  // namespace tf

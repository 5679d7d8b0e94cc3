// The draft-model proposer on tiny-draft: greedy proposals are the draft's own greedy
// continuation (computed here by an engine running tiny-draft alone), also after a
// verification kept only some of them (the draft's KV past the kept ones is rolled back);
// sampled proposals come with the draft's distribution q; blocks are released with the
// sequences.
#include <gtest/gtest.h>

#include "engine/golden_util.h"
#include "model/config.h"
#include "spec/draft_proposer.h"
#include "twofold/engine.h"

namespace tf {
namespace {

const std::string kDraft = test::model_dir("tiny-draft");

// The draft's greedy continuation of `ids`, n tokens.
std::vector<int32_t> draft_greedy(const std::vector<int32_t>& ids, int32_t n) {
  static Engine e(EngineOptions{.model_dir = kDraft, .max_seqs = 1});
  const RequestId id = e.add_request({.prompt_ids = ids, .sampling = {.temperature = 0, .max_tokens = n, .ignore_eos = true}});
  while (e.has_unfinished()) e.step();
  std::vector<int32_t> out = e.output_ids(id);
  e.release(id);
  return out;
}

DraftProposer make_proposer(int32_t max_batch_tokens = 512) {
  return DraftProposer(DraftParams{.model_dir = kDraft, .n_blocks = 64, .block_size = 16,
                                   .max_batch_tokens = max_batch_tokens, .n_vocab = 8192});
}

TEST(DraftProposer, GreedyProposalsAreTheDraftsContinuationAlsoAfterARollback) {
  // A small token budget splits the longest prompt's catch-up over several forwards.
  DraftProposer p = make_proposer(/*max_batch_tokens=*/24);
  const auto golden = test::load_golden("tiny-main");
  std::vector<std::vector<int32_t>> tokens;
  for (size_t i = 0; i < 3; ++i) tokens.push_back(golden[i].input_ids);
  const SamplingParams greedy{.temperature = 0};
  std::vector<ProposeRequest> reqs;
  for (size_t i = 0; i < tokens.size(); ++i)
    reqs.push_back({.seq = int64_t(i), .tokens = &tokens[i], .k = 4, .sampling = &greedy});
  for (size_t i = 0; i < tokens.size(); ++i)
    EXPECT_EQ(p.backlog(int64_t(i), tokens[i]), int32_t(tokens[i].size())) << "a new sequence: its whole prompt";
  std::vector<Proposal> out;
  p.propose(reqs, out);
  ASSERT_EQ(p.check_invariants(), "");
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(out[i].tokens, draft_greedy(tokens[i], 4)) << "prompt " << i;
    EXPECT_TRUE(out[i].q.empty());
  }
  // Verification kept 2, 0 and 4 proposals, then a token of the target's (here: 7).
  const int32_t kept[] = {2, 0, 4};
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i].insert(tokens[i].end(), out[i].tokens.begin(), out[i].tokens.begin() + kept[i]);
    tokens[i].push_back(7);
  }
  // The draft wrote proposals 1-3 (4 came from the last forward): the kept ones among them
  // need no forward, so the backlog is the target's token (and proposal 4, where all 4 were
  // kept).
  EXPECT_EQ(p.backlog(0, tokens[0]), 1);
  EXPECT_EQ(p.backlog(1, tokens[1]), 1);
  EXPECT_EQ(p.backlog(2, tokens[2]), 2);
  {  // Steps without proposals add their tokens to the backlog.
    std::vector<int32_t> idle = tokens[0];
    idle.insert(idle.end(), {5, 6, 7});
    EXPECT_EQ(p.backlog(0, idle), 4);
  }
  reqs[1].k = 2;
  p.propose(reqs, out);
  ASSERT_EQ(p.check_invariants(), "");
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(out[i].tokens, draft_greedy(tokens[i], reqs[i].k)) << "prompt " << i << " after the rollback";
    // The table covers the positions this step wrote and no more: len - 1 + k.
    EXPECT_EQ(int32_t(p.kv().table(int64_t(i)).size()),
              KvManager::blocks_for(int32_t(tokens[i].size()) - 1 + reqs[i].k, 16));
  }
  for (size_t i = 0; i < tokens.size(); ++i) p.release(int64_t(i));
  EXPECT_EQ(p.kv().pool().n_blocks_used(), 0);
  EXPECT_EQ(p.check_invariants(), "");
}

TEST(DraftProposer, SampledProposalsComeWithTheDraftsDistribution) {
  DraftProposer p = make_proposer();
  const auto golden = test::load_golden("tiny-main");
  const std::vector<int32_t> prompt = golden[0].input_ids;
  const SamplingParams sp{.temperature = 0.9f, .top_k = 20, .repetition_penalty = 1.1f, .seed = 5};
  Rng rng(5);
  const std::vector<ProposeRequest> reqs = {{.seq = 0, .tokens = &prompt, .k = 3, .sampling = &sp, .rng = &rng}};
  std::vector<Proposal> out;
  p.propose(reqs, out);
  ASSERT_EQ(out[0].tokens.size(), 3u);
  ASSERT_EQ(out[0].q.size(), 3u);
  // q_1 is the sampler's distribution over the draft's logits after the prompt.
  Engine e(EngineOptions{.model_dir = kDraft, .max_seqs = 1});
  const std::vector<float> logits = e.score(prompt, /*all_positions=*/false);
  const std::vector<float> want = Sampler(sp).distribution(logits, prompt);
  ASSERT_EQ(out[0].q[0].size(), want.size());
  for (size_t t = 0; t < want.size(); ++t) ASSERT_NEAR(out[0].q[0][t], want[t], 1e-6) << "token " << t;
  for (size_t i = 0; i < 3; ++i) {
    int32_t kept = 0;
    double sum = 0;
    for (float x : out[0].q[i]) kept += x > 0, sum += x;
    EXPECT_NEAR(sum, 1.0, 1e-5);
    EXPECT_LE(kept, 20) << "top-k applies to q as to p";
    EXPECT_GT(out[0].q[i][size_t(out[0].tokens[i])], 0.0f) << "each proposal was drawn from its q";
  }
  p.release(0);
  EXPECT_EQ(p.kv().pool().n_blocks_used(), 0);
}

TEST(DraftProposer, SharedPromptsHitTheDraftsPrefixCacheAndMeasuringLeavesNothingHeld) {
  DraftProposer p = make_proposer();
  std::vector<int32_t> a, b;
  for (int32_t i = 0; i < 40; ++i) a.push_back(300 + i);
  b = a;
  b.back() = 999;
  const SamplingParams greedy{.temperature = 0};
  std::vector<Proposal> out;
  p.propose(std::vector<ProposeRequest>{{.seq = 0, .tokens = &a, .k = 2, .sampling = &greedy}}, out);
  p.propose(std::vector<ProposeRequest>{{.seq = 1, .tokens = &b, .k = 2, .sampling = &greedy}}, out);
  EXPECT_EQ(p.kv().prefix_stats().n_hit_tokens, 32) << "two full blocks of the shared 39 tokens";
  EXPECT_EQ(out[0].tokens, draft_greedy(b, 2));
  EXPECT_EQ(p.check_invariants(), "");
  const int32_t used = p.kv().pool().n_blocks_used();
  EXPECT_GT(p.measure_step_seconds(4), 0.0);
  EXPECT_EQ(p.kv().pool().n_blocks_used(), used);
  EXPECT_THROW(DraftProposer(DraftParams{.model_dir = kDraft, .n_blocks = 8, .n_vocab = 1000}), Error);
}

// Three sequences: the prompts (chunked by a 24-token budget), then a step after each kept
// some proposals and had some tokens of its own; returns the proposals of both steps.
std::vector<std::vector<int32_t>> two_steps(DraftProposer& p) {
  const auto golden = test::load_golden("tiny-main");
  std::vector<std::vector<int32_t>> tokens;
  for (size_t i = 0; i < 3; ++i) tokens.push_back(golden[i].input_ids);
  const SamplingParams greedy{.temperature = 0};
  std::vector<ProposeRequest> reqs;
  for (size_t i = 0; i < tokens.size(); ++i)
    reqs.push_back({.seq = int64_t(i), .tokens = &tokens[i], .k = 3, .sampling = &greedy});
  std::vector<std::vector<int32_t>> all;
  std::vector<Proposal> out;
  p.propose(reqs, out);
  for (const Proposal& o : out) all.push_back(o.tokens);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i].insert(tokens[i].end(), out[i].tokens.begin(), out[i].tokens.begin() + int32_t(i));
    tokens[i].insert(tokens[i].end(), {7, 9});
  }
  p.propose(reqs, out);
  for (const Proposal& o : out) all.push_back(o.tokens);
  for (size_t i = 0; i < tokens.size(); ++i) p.release(int64_t(i));
  return all;
}

// warm_catch_up runs a forward of every row count up to the token budget, with logits for up
// to max_seqs sequences; afterwards no catch-up forward meets a shape it did not run, and
// the proposals are those of a proposer never warmed.
TEST(DraftProposer, WarmingCoversEveryCatchUpShape) {
  DraftProposer cold = make_proposer(/*max_batch_tokens=*/24);
  const auto expected = two_steps(cold);
  EXPECT_GE(cold.n_cold_catch_ups(), 2) << "the prompts' chunks and the second step";

  DraftProposer warm = make_proposer(/*max_batch_tokens=*/24);
  EXPECT_EQ(warm.warm_catch_up(/*max_seqs=*/3), 24) << "one forward per row count 1..24";
  EXPECT_EQ(warm.warm_catch_up(3), 0) << "warmed already";
  EXPECT_EQ(warm.kv().pool().n_blocks_used(), 0);
  EXPECT_EQ(warm.check_invariants(), "");
  EXPECT_EQ(two_steps(warm), expected);
  EXPECT_EQ(warm.n_cold_catch_ups(), 0);

  // Warmed for 2 sequences, a forward with 3 sequences' logits rows is not covered.
  DraftProposer two = make_proposer(/*max_batch_tokens=*/24);
  EXPECT_EQ(two.warm_catch_up(2), 24);
  EXPECT_EQ(two_steps(two), expected);
  EXPECT_GT(two.n_cold_catch_ups(), 0);
}

}  // namespace
}  // namespace tf

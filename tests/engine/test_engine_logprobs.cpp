// SamplingParams::logprobs: each sampled token comes with its log-probability under the raw
// model distribution and the n most likely alternatives. Checked against Engine::score (the
// same forward outside the scheduler) and against the greedy rule (the greedy token is the
// most likely one), and with a repetition penalty (which must not change the reported values).
// SamplingParams::prompt_logprobs: the same for every prompt token after the first, against
// score() at every position, whatever the prefill's chunks, the prefix cache, the other
// requests of the batch, or max_tokens 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "model/config.h"
#include "test_util.h"
#include "tiny_engine_suite.h"
#include "twofold/engine.h"

namespace tf {
namespace {


// log softmax(logits)[id], in double.
double reference_logprob(const std::vector<float>& logits, int32_t id) {
  double m = logits[0];
  for (float l : logits) m = std::max(m, double(l));
  double sum = 0;
  for (float l : logits) sum += std::exp(double(l) - m);
  return double(logits[size_t(id)]) - m - std::log(sum);
}

struct Generated {
  std::vector<int32_t> prompt, output;
  std::vector<SampledLogprobs> logprobs;
};

Generated generate(Engine& e, SamplingParams sp) {
  const RequestId id = e.add_request({.prompt = "The LORD is my shepherd;", .sampling = sp});
  Generated r;
  while (e.has_unfinished())
    for (const RequestOutput& o : e.step()) {
      EXPECT_EQ(o.logprobs.size(), sp.logprobs >= 0 ? o.new_token_ids.size() : 0u);
      r.logprobs.insert(r.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
    }
  r.prompt = e.prompt_ids(id);
  r.output = e.output_ids(id);
  e.release(id);
  return r;
}

class Logprobs : public test::TinyEngineSuite {};

TEST_F(Logprobs, OffByDefault) {
  const Generated r = generate(*engine_, {.temperature = 0, .max_tokens = 4, .ignore_eos = true});
  EXPECT_EQ(r.output.size(), 4u);
  EXPECT_TRUE(r.logprobs.empty());
}

TEST_F(Logprobs, GreedyTokenIsTheMostLikelyAndMatchesScore) {
  const int32_t n_top = 5;
  const Generated r = generate(*engine_, {.temperature = 0, .max_tokens = 6, .ignore_eos = true, .logprobs = n_top});
  ASSERT_EQ(r.logprobs.size(), r.output.size());
  std::vector<int32_t> seq = r.prompt;
  for (size_t i = 0; i < r.output.size(); ++i) {
    const SampledLogprobs& lp = r.logprobs[i];
    EXPECT_EQ(lp.sampled.id, r.output[i]);
    ASSERT_EQ(int32_t(lp.top.size()), n_top);
    EXPECT_EQ(lp.top[0].id, lp.sampled.id) << "token " << i;
    EXPECT_DOUBLE_EQ(lp.top[0].logprob, lp.sampled.logprob);
    double mass = 0;
    for (size_t k = 0; k < lp.top.size(); ++k) {
      EXPECT_LE(lp.top[k].logprob, 0.0);
      if (k > 0) {
        EXPECT_LE(lp.top[k].logprob, lp.top[k - 1].logprob);
      }
      mass += std::exp(lp.top[k].logprob);
    }
    EXPECT_LE(mass, 1.0 + 1e-9);
    EXPECT_GT(mass, 0.0);
    // The same prefix scored alone gives the same distribution (CPU rows are batch-invariant).
    const std::vector<float> logits = engine_->score(seq, /*all_positions=*/false);
    for (const LogprobEntry& t : lp.top) EXPECT_NEAR(t.logprob, reference_logprob(logits, t.id), 1e-4);
    seq.push_back(r.output[i]);
  }
}

TEST_F(Logprobs, ZeroAlternativesStillReportsTheSampledToken) {
  const Generated r = generate(*engine_, {.temperature = 0, .max_tokens = 3, .ignore_eos = true, .logprobs = 0});
  ASSERT_EQ(r.logprobs.size(), 3u);
  for (const SampledLogprobs& lp : r.logprobs) {
    EXPECT_TRUE(lp.top.empty());
    EXPECT_LE(lp.sampled.logprob, 0.0);
    EXPECT_TRUE(std::isfinite(lp.sampled.logprob));
  }
}

// A strong repetition penalty and a temperature change what is sampled but not the reported
// distribution: each reported value is the raw model's, so it matches score() of the prefix.
TEST_F(Logprobs, ReportsTheRawDistributionNotThePenalisedOne) {
  const Generated r = generate(*engine_, {.temperature = 0.7f, .repetition_penalty = 3.0f, .seed = 7, .max_tokens = 6,
                               .ignore_eos = true, .logprobs = 2});
  ASSERT_EQ(r.logprobs.size(), r.output.size());
  std::vector<int32_t> seq = r.prompt;
  for (size_t i = 0; i < r.output.size(); ++i) {
    const std::vector<float> logits = engine_->score(seq, /*all_positions=*/false);
    EXPECT_NEAR(r.logprobs[i].sampled.logprob, reference_logprob(logits, r.output[i]), 1e-4);
    EXPECT_NEAR(r.logprobs[i].top[0].logprob, reference_logprob(logits, r.logprobs[i].top[0].id), 1e-4);
    seq.push_back(r.output[i]);
  }
}

TEST_F(Logprobs, NegativeBelowMinusOneIsRejected) {
  const std::string msg = test::error_of(
      [] { engine_->add_request({.prompt = "x", .sampling = {.max_tokens = 2, .logprobs = -2}}); });
  EXPECT_CONTAINS(msg, "logprobs");
  EXPECT_CONTAINS(test::error_of([] {
                    engine_->add_request({.prompt = "x", .sampling = {.max_tokens = 2, .prompt_logprobs = -3}});
                  }),
                  "prompt_logprobs must be -1 (off) or at least 0");
  EXPECT_CONTAINS(test::error_of([] { engine_->add_request({.prompt = "x", .sampling = {.max_tokens = 0}}); }),
                  "max_tokens must be at least 1");
}

const std::string kLongPrompt =
    "In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
    "darkness was upon the face of the deep.";

// Each request's prompt logprobs (from its first output) and its output ids.
struct Scored {
  std::vector<SampledLogprobs> prompt_logprobs;
  std::vector<int32_t> prompt, output;
  int n_outputs_with_prompt_logprobs = 0;
  FinishReason finish = FinishReason::None;
};

std::vector<Scored> run_all(Engine& e, const std::vector<GenerateRequest>& reqs) {
  std::vector<RequestId> ids;
  for (const GenerateRequest& r : reqs) ids.push_back(e.add_request(r));
  std::vector<Scored> out(reqs.size());
  while (e.has_unfinished())
    for (const RequestOutput& o : e.step()) {
      const size_t i = size_t(std::find(ids.begin(), ids.end(), o.id) - ids.begin());
      if (!o.prompt_logprobs.empty()) {
        out[i].prompt_logprobs = o.prompt_logprobs;
        ++out[i].n_outputs_with_prompt_logprobs;
      }
      if (o.finished) out[i].finish = o.finish_reason;
    }
  for (size_t i = 0; i < ids.size(); ++i) {
    out[i].prompt = e.prompt_ids(ids[i]);
    out[i].output = e.output_ids(ids[i]);
    e.release(ids[i]);
  }
  return out;
}

// prompt[i + 1]'s logprob and the top n against log softmax of score()'s row i.
void expect_matches_score(Engine& e, const Scored& s, int32_t n_top) {
  ASSERT_EQ(s.n_outputs_with_prompt_logprobs, 1);
  ASSERT_EQ(s.prompt_logprobs.size(), s.prompt.size() - 1);
  const std::vector<float> all = e.score(s.prompt, /*all_positions=*/true);
  const size_t n_vocab = size_t(e.config().n_vocab);
  for (size_t i = 0; i + 1 < s.prompt.size(); ++i) {
    const std::vector<float> row(all.begin() + long(i * n_vocab), all.begin() + long((i + 1) * n_vocab));
    const SampledLogprobs& lp = s.prompt_logprobs[i];
    EXPECT_EQ(lp.sampled.id, s.prompt[i + 1]) << "position " << i;
    EXPECT_NEAR(lp.sampled.logprob, reference_logprob(row, s.prompt[i + 1]), 1e-4) << "position " << i;
    ASSERT_EQ(int32_t(lp.top.size()), n_top);
    for (const LogprobEntry& t : lp.top) EXPECT_NEAR(t.logprob, reference_logprob(row, t.id), 1e-4);
  }
}

TEST_F(Logprobs, PromptLogprobsMatchScoreAtEveryPosition) {
  const SamplingParams sp{.temperature = 0, .max_tokens = 3, .ignore_eos = true, .prompt_logprobs = 2};
  const std::vector<Scored> r = run_all(*engine_, {{.prompt = kLongPrompt, .sampling = sp}});
  ASSERT_GT(r[0].prompt.size(), 20u);
  expect_matches_score(*engine_, r[0], 2);
  // The output is the plain request's.
  const std::vector<Scored> plain =
      run_all(*engine_, {{.prompt = kLongPrompt, .sampling = {.temperature = 0, .max_tokens = 3, .ignore_eos = true}}});
  EXPECT_EQ(r[0].output, plain[0].output);
}

TEST_F(Logprobs, PromptLogprobsWithChunksCachedPrefixesAndOtherRequests) {
  // Small chunks (8 tokens a step) and a prefix cache that already holds the prompt: every
  // position is still computed and reported.
  Engine e(EngineOptions{.model_dir = test::model_dir("tiny-main"), .block_size = 4, .max_batch_tokens = 8});
  run_all(e, {{.prompt = kLongPrompt, .sampling = {.temperature = 0, .max_tokens = 1}}});
  const std::vector<Scored> r = run_all(
      e, {{.prompt = kLongPrompt, .sampling = {.temperature = 0, .max_tokens = 2, .prompt_logprobs = 0}},
          {.prompt = "The LORD is my shepherd;", .sampling = {.temperature = 0, .max_tokens = 5, .ignore_eos = true}},
          {.prompt = kLongPrompt + " And God said", .sampling = {.temperature = 0.8f, .seed = 3, .max_tokens = 4,
                                                                 .prompt_logprobs = 3}}});
  expect_matches_score(e, r[0], 0);
  expect_matches_score(e, r[2], 3);
  EXPECT_EQ(r[1].n_outputs_with_prompt_logprobs, 0);
  EXPECT_EQ(r[1].output.size(), 5u);
  EXPECT_EQ(e.n_kv_blocks_free(), e.n_kv_blocks_total());
}

TEST_F(Logprobs, MaxTokensZeroScoresThePromptOnly) {
  const std::vector<Scored> r = run_all(
      *engine_, {{.prompt = kLongPrompt, .sampling = {.temperature = 0, .max_tokens = 0, .prompt_logprobs = 1}},
                 {.prompt = "x", .sampling = {.max_tokens = 0, .prompt_logprobs = 0}}});
  EXPECT_TRUE(r[0].output.empty());
  EXPECT_EQ(r[0].finish, FinishReason::Length);
  expect_matches_score(*engine_, r[0], 1);
  EXPECT_TRUE(r[1].output.empty());  // one prompt token: nothing to report, nothing generated
  EXPECT_EQ(r[1].finish, FinishReason::Length);
  EXPECT_TRUE(r[1].prompt_logprobs.empty());
  EXPECT_EQ(engine_->n_kv_blocks_free(), engine_->n_kv_blocks_total());
}

}  // namespace
}  // namespace tf

// SamplingParams::logprobs: each sampled token comes with its log-probability under the raw
// model distribution and the n most likely alternatives. Checked against Engine::score (the
// same forward outside the scheduler) and against the greedy rule (the greedy token is the
// most likely one), and with a repetition penalty (which must not change the reported values).
#include <gtest/gtest.h>

#include <cmath>

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
}

}  // namespace
}  // namespace tf

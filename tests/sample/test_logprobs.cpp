#include "sample/logprobs.h"

#include <gtest/gtest.h>

#include <cmath>

#include "sample/sampler.h"

namespace tf {
namespace {

TEST(SampleLogprobs, TopLogprobsOrderedWithTiesByIdAndExactValues) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f, 0.0f};
  const double lse = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0) + 1.0);
  EXPECT_NEAR(logsumexp(logits), lse, 1e-12);
  const std::vector<TokenLogprob> top = top_logprobs(logits, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].id, 1);
  EXPECT_EQ(top[1].id, 2);
  EXPECT_EQ(top[2].id, 3);
  EXPECT_NEAR(top[0].logprob, 3.0 - lse, 1e-12);
  EXPECT_NEAR(top[2].logprob, 2.0 - lse, 1e-12);
  for (const TokenLogprob& t : top) EXPECT_NEAR(t.logprob, log_softmax_at(logits, t.id), 1e-12);
}

TEST(SampleLogprobs, ClampsCountAndSumsToOne) {
  const std::vector<float> logits = {-2.0f, 0.5f, 7.0f, -INFINITY};
  EXPECT_TRUE(top_logprobs(logits, 0).empty());
  const std::vector<TokenLogprob> all = top_logprobs(logits, 10);
  ASSERT_EQ(all.size(), 4u);
  double sum = 0.0;
  for (const TokenLogprob& t : all) sum += std::exp(t.logprob);
  EXPECT_NEAR(sum, 1.0, 1e-12);
  EXPECT_EQ(all[3].id, 3);
  EXPECT_EQ(all[3].logprob, -INFINITY);
  // Large logits do not overflow (max subtracted).
  const std::vector<float> big = {1000.0f, 1000.0f};
  EXPECT_NEAR(log_softmax_at(big, 0), std::log(0.5), 1e-12);
}

}  // namespace
}  // namespace tf

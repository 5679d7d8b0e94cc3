// The benchmark's synthetic workload: deterministic long-tailed lengths, and both schedules
// count exactly the real output tokens (padding of the static schedule excluded).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "bench/workload.h"
#include "test_util.h"

namespace tf {
namespace {

TEST(Workload, LengthsAreDeterministicLongTailedAndClamped) {
  const bench::WorkloadParams p{.n_requests = 2001, .max_len = 1024};
  const auto a = bench::make_workload(p), b = bench::make_workload(p);
  ASSERT_EQ(a.size(), 2001u);
  std::vector<int32_t> prompts, outputs;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt_len, b[i].prompt_len);
    EXPECT_EQ(a[i].output_len, b[i].output_len);
    EXPECT_GE(a[i].prompt_len, 8);
    EXPECT_LE(a[i].prompt_len, 1024);
    EXPECT_GE(a[i].output_len, 8);
    EXPECT_LE(a[i].output_len, 1024);
    prompts.push_back(a[i].prompt_len);
    outputs.push_back(a[i].output_len);
  }
  // Log-normal: the median is the given one (within sampling noise of 2,001 draws, sigma 0.6:
  // ~2.5% standard error), the mean above it (exp(sigma^2 / 2) = 1.197 times).
  std::nth_element(prompts.begin(), prompts.begin() + 1000, prompts.end());
  std::nth_element(outputs.begin(), outputs.begin() + 1000, outputs.end());
  EXPECT_NEAR(prompts[1000], 256, 256 * 0.1);
  EXPECT_NEAR(outputs[1000], 128, 128 * 0.1);
  const double mean_out = std::accumulate(outputs.begin(), outputs.end(), 0.0) / double(outputs.size());
  EXPECT_GT(mean_out, 1.1 * 128);
  EXPECT_LT(mean_out, 1.3 * 128);
  const auto c = bench::make_workload(bench::WorkloadParams{.n_requests = 2001, .max_len = 1024, .seed = 8});
  int n_same = 0;
  for (size_t i = 0; i < a.size(); ++i) n_same += a[i].prompt_len == c[i].prompt_len;
  EXPECT_LT(n_same, 200) << "another seed should give other lengths";
}

TEST(Workload, BothSchedulesCountOnlyRealTokensAndFreeTheCache) {
  Engine engine(EngineOptions{.model_dir = test::model_dir("tiny-main"), .max_seqs = 3});
  const std::vector<bench::WorkloadRequest> reqs = {{12, 5}, {30, 9}, {8, 3}, {20, 7}, {9, 11}};
  int64_t want = 0;
  for (const auto& r : reqs) want += r.output_len;
  for (bool is_static : {true, false}) {
    SCOPED_TRACE(is_static ? "static" : "continuous");
    const bench::WorkloadResult r = bench::run_workload(engine, reqs, 3, is_static, 42);
    EXPECT_EQ(r.useful_tokens, want);
    EXPECT_GT(r.tokens_per_s, 0);
    EXPECT_GT(r.peak_kv_blocks_used, 0);
    EXPECT_LE(r.itl_p50_s, r.itl_p99_s);
    EXPECT_EQ(engine.metrics().kv_blocks_used, 0);
    EXPECT_FALSE(engine.has_unfinished());
  }
}

}  // namespace
}  // namespace tf

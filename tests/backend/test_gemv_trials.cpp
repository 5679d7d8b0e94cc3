// Which kernels a recorded step is recorded again with (src/backend/cuda/gemv_trials.h), a
// host-only function: the candidates within the margin of the fastest cold time, the current
// pick left out, fastest first, at most the limit; none where every other candidate is slower
// than the margin or there is only one. It lives here, not in tests/backend/cuda, whose tests
// are built only with TF_CUDA.
#include <gtest/gtest.h>

#include "backend/cuda/gemv_trials.h"

namespace tf::cuda {
namespace {

using Times = std::vector<std::pair<int, double>>;

TEST(GemvTrials, NearTiesFastestFirstWithoutTheCurrentPick) {
  // The INT4 o projection's cold times of one H100 run (us): -3 (10.3) was picked.
  const Times t{{-2, 12.0}, {-3, 10.3}, {-4, 11.7}, {-5, 12.4}, {-6, 10.4}, {-7, 10.9}, {-8, 11.1}, {-9, 11.2}};
  EXPECT_EQ(gemv_trial_kernels(t, -3), (std::vector<int>{-6, -7, -8}));  // up to 11.33; the limit: 3
  EXPECT_EQ(gemv_trial_kernels(t, -3, 0.10, 2), (std::vector<int>{-6, -7}));
  EXPECT_EQ(gemv_trial_kernels(t, -3, 0.05), (std::vector<int>{-6}));  // up to 10.815
}

TEST(GemvTrials, TheMarginIsAgainstTheFastestEvenWhenTheCurrentPickIsSlower) {
  // A pick made by another recording's trial may not be the fastest alone.
  const Times t{{1, 10.0}, {2, 10.5}, {3, 12.0}};
  EXPECT_EQ(gemv_trial_kernels(t, 2), (std::vector<int>{1}));
  EXPECT_EQ(gemv_trial_kernels(t, 3), (std::vector<int>{1, 2}));
}

TEST(GemvTrials, NoneWithoutANearTie) {
  EXPECT_TRUE(gemv_trial_kernels({{-1, 20.0}, {-2, 10.0}}, -2).empty());
  EXPECT_TRUE(gemv_trial_kernels({{-2, 10.0}}, -2).empty());
  EXPECT_TRUE(gemv_trial_kernels({}, -1).empty());
}

TEST(GemvTrials, EqualTimesKeepTheTimingOrderAndRepeatsCountOnce) {
  const Times t{{5, 3.0}, {4, 3.0}, {6, 3.0}, {4, 3.1}};
  EXPECT_EQ(gemv_trial_kernels(t, 6), (std::vector<int>{5, 4}));
}

}  // namespace
}  // namespace tf::cuda

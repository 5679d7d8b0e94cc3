// RankThreads: every rank runs each job once, on its own thread, repeatedly; an exception
// on one rank reaches the caller after the others finished, and the threads stay usable.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "dist/rank_threads.h"
#include "test_util.h"

namespace tf {
namespace {

TEST(RankThreads, RunsEveryRankOncePerJobOnDistinctThreads) {
  RankThreads t(4, nullptr);
  for (int job = 0; job < 50; ++job) {
    std::mutex mu;
    std::multiset<int> ranks;
    std::set<std::thread::id> ids;
    t.run([&](int r) {
      std::lock_guard lock(mu);
      ranks.insert(r);
      ids.insert(std::this_thread::get_id());
    });
    EXPECT_EQ(ranks, (std::multiset<int>{0, 1, 2, 3}));
    EXPECT_EQ(ids.size(), 4u);
    EXPECT_EQ(ids.count(std::this_thread::get_id()), 0u);
  }
}

TEST(RankThreads, RethrowsARanksErrorAfterAllFinishedAndCallsOnError) {
  std::atomic<int> on_error{0};
  RankThreads t(3, [&] { ++on_error; });
  std::atomic<int> finished{0};
  EXPECT_CONTAINS(test::error_of([&] {
                    t.run([&](int r) {
                      if (r == 1) fail("rank {} broke", r);
                      ++finished;
                    });
                  }),
                  "rank 1 broke");
  EXPECT_EQ(finished, 2);
  EXPECT_EQ(on_error, 1);
  std::atomic<int> ran{0};
  t.run([&](int) { ++ran; });  // still usable
  EXPECT_EQ(ran, 3);
}

TEST(RankThreads, SharesTheHostThreads) {
  set_host_threads(8);
  RankThreads t(3, nullptr);
  EXPECT_EQ(t.threads_per_rank(), 2);
  std::atomic<int> bad{0};
  t.run([&](int) { bad += host_threads() != 2; });
  EXPECT_EQ(bad, 0);
  RankThreads many(16, nullptr);
  EXPECT_EQ(many.threads_per_rank(), 1);
}

}  // namespace
}  // namespace tf

// ThreadPool: every chunk of every op runs exactly once whatever the pool size and chunk
// count; thread indices stay in range; an exception reaches the caller after the other
// chunks ran; idle workers sleep instead of spinning. Host thread counts: the default and
// the per-thread override.
#include "core/thread_pool.h"

#include <gtest/gtest.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/host_threads.h"

namespace tf {
namespace {

TEST(ThreadPool, EveryChunkRunsOnceAtEverySize) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {int64_t(1), int64_t(2), int64_t(3), int64_t(7), int64_t(64), int64_t(1000), int64_t(20000)}) {
      for (int rep = 0; rep < 5; ++rep) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> bad_thread{0};
        pool.parallel_for(n, [&](int64_t c, int t) {
          hits[size_t(c)].fetch_add(1, std::memory_order_relaxed);
          if (t < 0 || t >= threads) bad_thread.fetch_add(1);
        });
        int wrong = 0;
        for (auto& h : hits) wrong += h.load() != 1;
        ASSERT_EQ(wrong, 0) << threads << " threads, " << n << " chunks";
        ASSERT_EQ(bad_thread.load(), 0);
      }
    }
  }
}

TEST(ThreadPool, ManySmallOpsInARow) {
  // The pattern of a decode step: thousands of short ops back to back, each read by the next.
  ThreadPool pool(3);
  std::vector<int64_t> v(64, 0);
  for (int op = 0; op < 20000; ++op)
    pool.parallel_for(int64_t(v.size()), [&](int64_t c, int) { v[size_t(c)] += c + op; });
  for (size_t c = 0; c < v.size(); ++c) EXPECT_EQ(v[c], int64_t(c) * 20000 + int64_t(20000) * 19999 / 2);
}

TEST(ThreadPool, ExceptionReachesCallerAfterOtherChunks) {
  ThreadPool pool(3);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.parallel_for(100,
                                 [&](int64_t c, int) {
                                   if (c == 17) throw std::runtime_error("chunk 17");
                                   ran.fetch_add(1);
                                 }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 99);
  std::atomic<int> again{0};
  pool.parallel_for(10, [&](int64_t, int) { again.fetch_add(1); });  // still usable
  EXPECT_EQ(again.load(), 10);
}

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

TEST(ThreadPool, IdleWorkersSleep) {
  // After an op, workers poll for kSpinMicros (100 us) and then block: 300 ms of idleness
  // must cost next to no CPU time. Workers spinning throughout would burn up to 3 x 300 ms
  // (less on a loaded machine, but far above the bound).
  ThreadPool pool(4);
  pool.parallel_for(16, [](int64_t, int) {});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the spin
  const double before = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_LT(process_cpu_seconds() - before, 0.02);
  std::atomic<int> ran{0};
  pool.parallel_for(16, [&](int64_t, int) { ran.fetch_add(1); });  // sleeping workers wake for work
  EXPECT_EQ(ran.load(), 16);
}

TEST(ThreadPool, ChunksForSplitsAboutFourPerThread) {
  ThreadPool pool(2);
  EXPECT_EQ(pool.chunks_for(1000, 1), 8);
  EXPECT_EQ(pool.chunks_for(1000, 500), 2);
  EXPECT_EQ(pool.chunks_for(3, 1), 3);
  EXPECT_EQ(pool.chunks_for(10, 100), 1);
  EXPECT_EQ(pool.chunks_for(0, 1), 1);
}

TEST(HostThreads, DefaultIsPhysicalCoresCappedAndOverridesArePerThread) {
  const int d = default_host_threads();
  EXPECT_GE(d, 1);
  EXPECT_LE(d, kMaxDefaultHostThreads);
  EXPECT_LE(d, int(std::max(1u, std::thread::hardware_concurrency())));
  EXPECT_EQ(host_threads(), d);
  set_default_host_threads(3);
  EXPECT_EQ(host_threads(), 3);
  set_host_threads(5);
  EXPECT_EQ(host_threads(), 5);
  EXPECT_EQ(host_thread_share(2), 2);
  int other = 0;
  std::thread([&] { other = host_threads(); }).join();
  EXPECT_EQ(other, 3);  // a new thread sees the process default, not this thread's override
  set_host_threads(0);
  EXPECT_EQ(host_threads(), 3);
  set_default_host_threads(0);
  EXPECT_EQ(host_threads(), d);
}

// Past the limit both setters raise an error naming the count and leave the counts as they were
// (100,000 threads once aborted the process inside the OpenMP runtime).
TEST(HostThreads, CountsPastTheLimitAreAnError) {
  const int d = host_threads();
  for (auto* set : {&set_default_host_threads, &set_host_threads}) {
    try {
      set(100000);
      ADD_FAILURE() << "100000 threads taken";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("100000"), std::string::npos) << e.what();
    }
    EXPECT_EQ(host_threads(), d);
  }
  set_host_threads(kMaxHostThreads);
  EXPECT_EQ(host_threads(), kMaxHostThreads);
  set_host_threads(0);
}

}  // namespace
}  // namespace tf

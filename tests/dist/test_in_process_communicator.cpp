// The in-process communicator against what each collective must compute, for several
// group sizes and buffer sizes (odd ones included, smaller than the group too), with every
// rank on its own thread as the tensor-parallel model runs them.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "dist/in_process_communicator.h"
#include "test_util.h"

namespace tf {
namespace {

// Runs fn(rank) on `n` threads at once; failures inside are recorded by gtest.
void on_ranks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) ts.emplace_back(fn, r);
  for (std::thread& t : ts) t.join();
}

// A rank-dependent value, exactly representable, so sums are exact in any order.
float value(int rank, int64_t i) { return float((rank + 1) * 1000 + i % 977) * 0.25f; }

struct Case {
  int ranks;
  int64_t n;
};
const Case kCases[] = {{1, 7}, {2, 1}, {2, 8}, {2, 1001}, {3, 2}, {3, 999}, {4, 3}, {4, 4096}, {5, 37}, {8, 12345}};

TEST(InProcessCommunicator, AllReduceSumsOverRanksOnEveryRank) {
  for (const Case c : kCases) {
    InProcessGroup g(c.ranks);
    on_ranks(c.ranks, [&](int r) {
      std::vector<float> buf(size_t(c.n));
      for (int64_t i = 0; i < c.n; ++i) buf[size_t(i)] = value(r, i);
      for (int rep = 0; rep < 3; ++rep) {  // reuse: the shared state must be reset each time
        std::vector<float> b = buf;
        g.communicator(r).all_reduce_sum(make_view(b.data(), DType::F32, {c.n}));
        for (int64_t i = 0; i < c.n; ++i) {
          float want = 0;
          for (int k = 0; k < c.ranks; ++k) want += value(k, i);
          ASSERT_EQ(b[size_t(i)], want) << c.ranks << " ranks, n " << c.n << ", rank " << r << ", i " << i;
        }
      }
    });
  }
}

TEST(InProcessCommunicator, AllGatherConcatenatesInRankOrder) {
  for (const Case c : kCases) {
    InProcessGroup g(c.ranks);
    on_ranks(c.ranks, [&](int r) {
      std::vector<float> send(size_t(c.n));
      for (int64_t i = 0; i < c.n; ++i) send[size_t(i)] = value(r, i);
      std::vector<float> recv(size_t(c.n * c.ranks), -1.0f);
      g.communicator(r).all_gather(make_view(send.data(), DType::F32, {c.n}),
                                   make_view(recv.data(), DType::F32, {c.ranks, c.n}));
      for (int k = 0; k < c.ranks; ++k)
        for (int64_t i = 0; i < c.n; ++i)
          ASSERT_EQ(recv[size_t(k * c.n + i)], value(k, i)) << c.ranks << " ranks, rank " << r;
    });
  }
}

TEST(InProcessCommunicator, AllGatherOfIntegers) {
  InProcessGroup g(3);
  on_ranks(3, [&](int r) {
    int32_t send[2] = {r, -r};
    int32_t recv[6] = {};
    g.communicator(r).all_gather(make_view(send, DType::I32, {2}), make_view(recv, DType::I32, {6}));
    EXPECT_EQ(std::vector<int32_t>(recv, recv + 6), (std::vector<int32_t>{0, 0, 1, -1, 2, -2}));
  });
}

TEST(InProcessCommunicator, BroadcastCopiesTheRootsBuffer) {
  for (const Case c : kCases) {
    for (int root : {0, c.ranks - 1}) {
      InProcessGroup g(c.ranks);
      on_ranks(c.ranks, [&](int r) {
        std::vector<float> buf(size_t(c.n));
        for (int64_t i = 0; i < c.n; ++i) buf[size_t(i)] = value(r, i);
        g.communicator(r).broadcast(make_view(buf.data(), DType::F32, {c.n}), root);
        for (int64_t i = 0; i < c.n; ++i) ASSERT_EQ(buf[size_t(i)], value(root, i)) << "rank " << r;
      });
    }
  }
}

TEST(InProcessCommunicator, MismatchedSizesFailOnEveryRank) {
  InProcessGroup g(2);
  std::atomic<int> failures{0};
  on_ranks(2, [&](int r) {
    std::vector<float> buf(size_t(4 + r));
    const std::string msg = test::error_of([&] { g.communicator(r).all_reduce_sum(make_view(buf.data(), DType::F32, {4 + r})); });
    EXPECT_CONTAINS(msg, "rank 1 passed 20 bytes but rank 0 passed 16");
    ++failures;
  });
  EXPECT_EQ(failures, 2);
}

TEST(InProcessCommunicator, AbortWakesRanksWaitingForAFailedOne) {
  InProcessGroup g(3);
  std::atomic<int> aborted{0};
  on_ranks(3, [&](int r) {
    if (r == 2) {  // this rank "fails" before its collective
      g.abort();
      return;
    }
    float x = 1;
    const std::string msg = test::error_of([&] { g.communicator(r).all_reduce_sum(make_view(&x, DType::F32, {1})); });
    EXPECT_CONTAINS(msg, "another rank of the tensor-parallel group failed");
    ++aborted;
  });
  EXPECT_EQ(aborted, 2);
  g.reset();  // usable again
  on_ranks(3, [&](int r) {
    float x = float(r);
    g.communicator(r).all_reduce_sum(make_view(&x, DType::F32, {1}));
    EXPECT_EQ(x, 3.0f);
  });
}

TEST(InProcessCommunicator, RejectsBadArguments) {
  EXPECT_CONTAINS(test::error_of([] { InProcessGroup g(0); }), "at least one rank");
  InProcessGroup g(1);
  uint16_t h = 0;
  EXPECT_CONTAINS(test::error_of([&] { g.communicator(0).all_reduce_sum(make_view(&h, DType::BF16, {1})); }), "F32 only");
  float x = 0, y[3] = {};
  EXPECT_CONTAINS(test::error_of([&] { g.communicator(0).all_gather(make_view(&x, DType::F32, {1}), make_view(y, DType::F32, {3})); }),
                  "does not hold 1 x 1");
  EXPECT_CONTAINS(test::error_of([&] { g.communicator(0).broadcast(make_view(&x, DType::F32, {1}), 1); }), "root 1");
}

}  // namespace
}  // namespace tf

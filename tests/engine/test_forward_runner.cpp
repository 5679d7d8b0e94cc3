#include "engine/forward_runner.h"

#include <gtest/gtest.h>

namespace tf {
namespace {

// Short contexts get strides of 16 and 32 blocks, longer ones multiples of 64; every stride
// holds the batch's tables, and strides only grow with the context (one recording a bucket).
TEST(GraphBlockStride, FineBucketsThenMultiplesOf64) {
  EXPECT_EQ(graph_block_stride(1), 16);
  EXPECT_EQ(graph_block_stride(16), 16);
  EXPECT_EQ(graph_block_stride(17), 32);
  EXPECT_EQ(graph_block_stride(32), 32);
  EXPECT_EQ(graph_block_stride(33), 64);
  EXPECT_EQ(graph_block_stride(64), 64);
  EXPECT_EQ(graph_block_stride(65), 128);
  EXPECT_EQ(graph_block_stride(257), 320);
  int32_t prev = 0, buckets = 0;
  for (int32_t b = 1; b <= 4096; ++b) {
    const int32_t s = graph_block_stride(b);
    EXPECT_GE(s, b);
    EXPECT_GE(s, prev);
    buckets += s != prev;
    prev = s;
  }
  EXPECT_EQ(buckets, 2 + 4096 / 64);
}

// The sequence buckets are ascending and end at the largest batch that records.
TEST(RecordedBatchSizes, AscendingUpTo256) {
  const std::vector<int32_t> b = recorded_batch_sizes(1000);
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(b.front(), 1);
  EXPECT_EQ(b.back(), 256);
  for (size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i - 1], b[i]);
  EXPECT_EQ(recorded_batch_sizes(3), (std::vector<int32_t>{1, 2, 4}));
}

}  // namespace
}  // namespace tf

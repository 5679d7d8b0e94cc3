// BlockPool: the three block states (free, used, cached), reference counts, the hash
// registry and LRU eviction, with the invariants checked after every operation.
#include <gtest/gtest.h>

#include "kv/block_pool.h"

namespace tf {
namespace {

BlockHash h(uint64_t x) { return BlockHash{.lo = x, .hi = ~x}; }

void expect_counts(const BlockPool& p, int32_t n_free, int32_t n_used, int32_t n_cached) {
  EXPECT_EQ(p.n_blocks_free(), n_free);
  EXPECT_EQ(p.n_blocks_used(), n_used);
  EXPECT_EQ(p.n_blocks_cached(), n_cached);
  EXPECT_EQ(p.n_blocks_free() + p.n_blocks_used() + p.n_blocks_cached(), p.n_blocks_total());
  EXPECT_EQ(p.check_invariants(), "");
}

TEST(BlockPool, FreshPoolHandsOutLowIdsFirst) {
  BlockPool p(4);
  expect_counts(p, 4, 0, 0);
  EXPECT_EQ(p.allocate(), 0);
  EXPECT_EQ(p.allocate(), 1);
  EXPECT_EQ(p.ref_count(0), 1);
  expect_counts(p, 2, 2, 0);
}

TEST(BlockPool, RefCountsAndUnhashedRelease) {
  BlockPool p(3);
  const int32_t a = p.allocate();
  p.retain(a);
  p.retain(a);
  EXPECT_EQ(p.ref_count(a), 3);
  expect_counts(p, 2, 1, 0);
  p.release(a);
  p.release(a);
  EXPECT_EQ(p.ref_count(a), 1);
  expect_counts(p, 2, 1, 0);
  p.release(a);  // no hash: back to the free list, not cached
  EXPECT_EQ(p.ref_count(a), 0);
  EXPECT_FALSE(p.is_cached(a));
  expect_counts(p, 3, 0, 0);
  EXPECT_EQ(p.allocate(), a) << "the most recently freed block is reused first";
}

TEST(BlockPool, HashedBlockIsCachedAtZeroAndRevivedByRetain) {
  BlockPool p(3);
  const int32_t a = p.allocate();
  ASSERT_TRUE(p.register_hash(a, h(7)));
  EXPECT_EQ(p.lookup(h(7)), a);
  EXPECT_EQ(p.lookup(h(8)), -1);
  p.release(a);
  EXPECT_TRUE(p.is_cached(a));
  EXPECT_EQ(p.lookup(h(7)), a) << "a cached block stays hittable";
  expect_counts(p, 2, 0, 1);
  EXPECT_EQ(p.cached_lru_order(), std::vector<int32_t>{a});

  p.retain(a);  // prefix hit: cached -> used
  EXPECT_EQ(p.ref_count(a), 1);
  EXPECT_FALSE(p.is_cached(a));
  EXPECT_TRUE(p.cached_lru_order().empty());
  expect_counts(p, 2, 1, 0);
  p.retain(a);  // a second sharer
  EXPECT_EQ(p.ref_count(a), 2);
  p.release(a);
  expect_counts(p, 2, 1, 0);
  p.release(a);
  expect_counts(p, 2, 0, 1);
}

TEST(BlockPool, DuplicateHashIsRefusedAndStaysUnhashed) {
  BlockPool p(2);
  const int32_t a = p.allocate(), b = p.allocate();
  ASSERT_TRUE(p.register_hash(a, h(1)));
  EXPECT_FALSE(p.register_hash(b, h(1)));
  EXPECT_FALSE(p.has_hash(b));
  EXPECT_EQ(p.lookup(h(1)), a);
  p.release(b);  // the duplicate goes to the free list
  p.release(a);  // the registered one is cached
  expect_counts(p, 1, 0, 1);
  EXPECT_TRUE(p.is_cached(a));
}

// Cached blocks are evicted only when no free block is left, least recently released
// first; an evicted block loses its hash, and a revived block leaves the eviction order.
TEST(BlockPool, EvictsLeastRecentlyUsedOnlyWhenNoFreeBlockIsLeft) {
  BlockPool p(5);
  std::vector<int32_t> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(p.allocate());  // 0..3; block 4 stays free
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(p.register_hash(ids[size_t(i)], h(uint64_t(100 + i))));
  // Release in the order 2, 0, 3, 1: that is the LRU order.
  for (int32_t id : {2, 0, 3, 1}) p.release(id);
  expect_counts(p, 1, 0, 4);
  EXPECT_EQ(p.cached_lru_order(), (std::vector<int32_t>{2, 0, 3, 1}));

  // Revive block 0 from the middle of the list and release it again: it moves to the end.
  p.retain(0);
  EXPECT_EQ(p.cached_lru_order(), (std::vector<int32_t>{2, 3, 1}));
  p.release(0);
  EXPECT_EQ(p.cached_lru_order(), (std::vector<int32_t>{2, 3, 1, 0}));

  EXPECT_EQ(p.allocate(), 4) << "a free block is taken before any cached one is evicted";
  EXPECT_EQ(p.n_evictions(), 0);
  expect_counts(p, 0, 1, 4);

  EXPECT_EQ(p.allocate(), 2);
  EXPECT_EQ(p.lookup(h(102)), -1) << "an evicted block's prefix is forgotten";
  EXPECT_FALSE(p.has_hash(2));
  EXPECT_EQ(p.allocate(), 3);
  EXPECT_EQ(p.n_evictions(), 2);
  EXPECT_EQ(p.cached_lru_order(), (std::vector<int32_t>{1, 0}));
  expect_counts(p, 0, 3, 2);
  EXPECT_EQ(p.lookup(h(101)), 1);
  EXPECT_EQ(p.lookup(h(100)), 0);

  // The evicted block was reused unhashed: released, it is free, not cached.
  p.release(2);
  expect_counts(p, 1, 2, 2);
  EXPECT_EQ(p.allocate(), 2);
  EXPECT_EQ(p.allocate(), 1);
  EXPECT_EQ(p.allocate(), 0);
  expect_counts(p, 0, 5, 0);
  EXPECT_EQ(p.n_blocks_available(), 0);
}

TEST(BlockPool, InvariantsHoldOverAMixedSequenceOfOperations) {
  BlockPool p(8);
  std::vector<int32_t> held;
  uint64_t next_hash = 1;
  // A deterministic interleaving: allocate, share, hash some, release in varying order.
  for (int round = 0; round < 50; ++round) {
    if (p.n_blocks_available() > 0 && (round % 3 != 2 || held.empty())) {
      const int32_t id = p.allocate();
      held.push_back(id);
      if (round % 2 == 0) {
        EXPECT_TRUE(p.register_hash(id, h(next_hash++)));
      }
      if (round % 5 == 0) {
        p.retain(id);
        held.push_back(id);
      }
    } else {
      const size_t k = size_t(round) % held.size();
      p.release(held[k]);
      held.erase(held.begin() + std::ptrdiff_t(k));
    }
    ASSERT_EQ(p.check_invariants(), "") << "round " << round;
    int32_t refs = 0;
    for (int32_t id = 0; id < p.n_blocks_total(); ++id) refs += p.ref_count(id);
    EXPECT_EQ(refs, int32_t(held.size()));
  }
}

using BlockPoolDeathTest = ::testing::Test;

TEST_F(BlockPoolDeathTest, DoubleFreeAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  BlockPool p(2);
  const int32_t a = p.allocate();
  p.release(a);
  EXPECT_DEATH(p.release(a), "double free of block");
  const int32_t b = p.allocate();
  ASSERT_TRUE(p.register_hash(b, h(3)));
  p.release(b);  // cached now: a second release is still a double free
  EXPECT_DEATH(p.release(b), "double free of block");
}

TEST_F(BlockPoolDeathTest, RetainOfFreeBlockAndAllocateWhenExhaustedAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  BlockPool p(1);
  EXPECT_DEATH(p.retain(0), "retain of free block");
  p.allocate();
  EXPECT_DEATH(p.allocate(), "no free or cached block");
  EXPECT_DEATH(p.release(5), "outside");
}

}  // namespace
}  // namespace tf

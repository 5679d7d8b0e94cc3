// KvManager: block tables, prefix caching (chain hashes, sharing, the "at least one token is
// computed" cap, LRU eviction through the pool) and sliding-window release. No model: the
// sequences are plain token vectors.
#include <gtest/gtest.h>

#include <algorithm>

#include "kv/kv_manager.h"
#include "kv/token_runs.h"

namespace tf {
namespace {

using test::cat;
using test::head;
using test::toks;

constexpr int32_t kBs = 4;

// Starts `seq` over all of *tokens with whatever prefix is cached, and marks it computed.
std::vector<int32_t> run_seq(KvManager& kv, int64_t seq, const std::vector<int32_t>* tokens) {
  const PrefixHit hit = kv.find_prefix(*tokens);
  EXPECT_TRUE(kv.start(seq, tokens, hit, int32_t(tokens->size())));
  kv.on_computed(seq, int32_t(tokens->size()));
  EXPECT_EQ(kv.check_invariants(), "");
  return kv.table(seq);
}

void expect_counts(const KvManager& kv, int32_t n_free, int32_t n_used, int32_t n_cached) {
  const BlockPool& p = kv.pool();
  EXPECT_EQ(p.n_blocks_free(), n_free);
  EXPECT_EQ(p.n_blocks_used(), n_used);
  EXPECT_EQ(p.n_blocks_cached(), n_cached);
  EXPECT_EQ(p.n_blocks_free() + p.n_blocks_used() + p.n_blocks_cached(), p.n_blocks_total());
  EXPECT_EQ(kv.check_invariants(), "");
}

TEST(BlockHash, ChainDependsOnParentAndEveryToken) {
  const std::vector<int32_t> a = toks(4, 10);
  const BlockHash h0 = hash_block(kRootHash, a.data(), 4);
  EXPECT_EQ(h0, hash_block(kRootHash, a.data(), 4));
  EXPECT_FALSE(h0 == hash_block(h0, a.data(), 4)) << "same tokens after another prefix";
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> b = a;
    b[size_t(i)] += 1;
    EXPECT_FALSE(h0 == hash_block(kRootHash, b.data(), 4)) << "token " << i;
  }
  EXPECT_FALSE(h0.hi == 0 && h0.lo == 0);
  EXPECT_NE(h0.hi, h0.lo) << "both halves of the 128-bit hash are filled";
}

TEST(KvManager, RegistersOnlyFullComputedBlocks) {
  KvManager kv({.n_blocks = 8, .block_size = kBs});
  const std::vector<int32_t> a = toks(10, 100);
  ASSERT_TRUE(kv.start(1, &a, {}, 10));
  ASSERT_EQ(kv.table(1).size(), 3u);
  expect_counts(kv, 5, 3, 0);
  const std::vector<int32_t> probe = cat(a, toks(6, 500));  // long enough to hit every block of a
  EXPECT_EQ(kv.find_prefix(probe).n_tokens, 0) << "allocated but not computed: nothing to share";

  kv.on_computed(1, 6);  // block 0 full, block 1 half
  EXPECT_EQ(kv.find_prefix(probe).n_tokens, 4);
  EXPECT_EQ(kv.find_prefix(probe).blocks, std::vector<int32_t>{kv.table(1)[0]});
  kv.on_computed(1, 10);  // blocks 0 and 1 full, block 2 holds 2 of 4
  const PrefixHit hit = kv.find_prefix(probe);
  EXPECT_EQ(hit.n_tokens, 8);
  EXPECT_EQ(hit.blocks, head(kv.table(1), 2));
  EXPECT_TRUE(kv.pool().has_hash(kv.table(1)[1]));
  EXPECT_FALSE(kv.pool().has_hash(kv.table(1)[2]));
  expect_counts(kv, 5, 3, 0);
}

// Two sequences with the same first 3 blocks share those block ids (ref count 2), also
// while both run; when both finish the blocks stay cached and a third sequence hits them.
TEST(KvManager, SequencesWithACommonPrefixShareItsBlocks) {
  KvManager kv({.n_blocks = 16, .block_size = kBs});
  const std::vector<int32_t> system = toks(12, 1000);  // 3 full blocks
  const std::vector<int32_t> a = cat(system, toks(2, 1));
  const std::vector<int32_t> b = cat(system, toks(5, 50));
  const std::vector<int32_t> ta = run_seq(kv, 1, &a);
  ASSERT_EQ(ta.size(), 4u);
  expect_counts(kv, 12, 4, 0);

  const std::vector<int32_t> tb = run_seq(kv, 2, &b);  // a is still running
  ASSERT_EQ(tb.size(), 5u);
  EXPECT_EQ(head(tb, 3), head(ta, 3));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(kv.pool().ref_count(ta[size_t(i)]), 2) << "block " << i;
  EXPECT_NE(tb[3], ta[3]);
  EXPECT_EQ(kv.pool().ref_count(ta[3]), 1);
  expect_counts(kv, 10, 6, 0);  // 3 shared + a's tail + b's 2 own
  EXPECT_EQ(kv.prefix_stats().n_query_tokens, 14 + 17);
  EXPECT_EQ(kv.prefix_stats().n_hit_tokens, 12);

  kv.free(1);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(kv.pool().ref_count(ta[size_t(i)]), 1);
  EXPECT_EQ(kv.pool().ref_count(ta[3]), 0);
  EXPECT_FALSE(kv.pool().is_cached(ta[3])) << "a's partial tail block is not hashed: free";
  expect_counts(kv, 11, 5, 0);
  kv.free(2);
  // b's 4 full blocks are cached (3 shared + its block 3), its partial block 4 is free.
  expect_counts(kv, 12, 0, 4);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(kv.pool().is_cached(tb[size_t(i)]));

  const std::vector<int32_t> c = cat(system, toks(3, 7000));
  const PrefixHit hit = kv.find_prefix(c);
  EXPECT_EQ(hit.n_tokens, 12);
  EXPECT_EQ(hit.blocks, head(ta, 3));
  const std::vector<int32_t> tc = run_seq(kv, 3, &c);
  EXPECT_EQ(head(tc, 3), head(ta, 3));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(kv.pool().ref_count(ta[size_t(i)]), 1);
  expect_counts(kv, 11, 4, 1);  // b's block 3 still cached
}

TEST(KvManager, NeverReusesTheWholePrompt) {
  KvManager kv({.n_blocks = 16, .block_size = kBs});
  const std::vector<int32_t> a = toks(12, 300);  // exactly 3 full blocks
  const std::vector<int32_t> ta = run_seq(kv, 1, &a);
  kv.free(1);
  expect_counts(kv, 13, 0, 3);

  const PrefixHit same = kv.find_prefix(a);
  EXPECT_EQ(same.n_tokens, 8) << "the block holding the final token is recomputed";
  EXPECT_EQ(same.blocks, head(ta, 2));
  EXPECT_EQ(kv.find_prefix(cat(a, {9})).n_tokens, 12);
  EXPECT_EQ(kv.find_prefix(head(a, 9)).n_tokens, 8);
  EXPECT_EQ(kv.find_prefix(head(a, 8)).n_tokens, 4);
  EXPECT_EQ(kv.find_prefix(head(a, 5)).n_tokens, 4);
  EXPECT_EQ(kv.find_prefix(head(a, 4)).n_tokens, 0);
  EXPECT_EQ(kv.find_prefix(head(a, 1)).n_tokens, 0);
}

TEST(KvManager, AMismatchEndsTheChainEvenIfLaterBlocksAreEqual) {
  KvManager kv({.n_blocks = 16, .block_size = kBs});
  const std::vector<int32_t> a = toks(13, 0);
  const std::vector<int32_t> ta = run_seq(kv, 1, &a);
  std::vector<int32_t> b = a;
  b[5] = 999;  // block 1 differs; block 2's tokens are a's, but after another prefix
  const PrefixHit hit = kv.find_prefix(b);
  EXPECT_EQ(hit.n_tokens, 4);
  EXPECT_EQ(hit.blocks, head(ta, 1));
  const std::vector<int32_t> tb = run_seq(kv, 2, &b);
  EXPECT_NE(tb[2], ta[2]);
  EXPECT_FALSE(kv.pool().hash_of(tb[2]) == kv.pool().hash_of(ta[2]));
}

// A sequence releases its table tail first, so a cached chain loses its end before its
// start; cached blocks go only when no free block is left, least recently released first.
TEST(KvManager, EvictionIsLruAndTakesAChainFromItsEnd) {
  KvManager kv({.n_blocks = 6, .block_size = kBs});
  const std::vector<int32_t> a = toks(12, 0);
  const std::vector<int32_t> b = toks(8, 500);
  const std::vector<int32_t> ta = run_seq(kv, 1, &a);  // 3 blocks
  const std::vector<int32_t> tb = run_seq(kv, 2, &b);  // 2 blocks
  kv.free(1);  // a released first: older
  kv.free(2);
  expect_counts(kv, 1, 0, 5);
  EXPECT_EQ(kv.pool().cached_lru_order(), (std::vector<int32_t>{ta[2], ta[1], ta[0], tb[1], tb[0]}));

  const std::vector<int32_t> a_probe = cat(a, {1});
  const std::vector<int32_t> b_probe = cat(b, {1});
  // A sequence without tokens (never hashed) takes 3 blocks: the free one, then a's last two.
  ASSERT_TRUE(kv.grow(9, 12));
  EXPECT_EQ(kv.pool().n_evictions(), 2);
  expect_counts(kv, 0, 3, 3);
  EXPECT_EQ(kv.find_prefix(a_probe).n_tokens, 4) << "a keeps its first block";
  EXPECT_EQ(kv.find_prefix(b_probe).n_tokens, 8) << "b, released later, is untouched";
  ASSERT_TRUE(kv.grow(9, 16));
  EXPECT_EQ(kv.find_prefix(a_probe).n_tokens, 0);
  EXPECT_EQ(kv.find_prefix(b_probe).n_tokens, 8);
  EXPECT_FALSE(kv.grow(9, 32)) << "needs 4 more blocks, only 2 cached";
  expect_counts(kv, 0, 4, 2);
  kv.free(9);
  expect_counts(kv, 4, 0, 2);
}

// Reviving a cached hit block takes it out of the evictable set: start() must not count it
// as available for the sequence's new blocks (it would evict its own prefix).
TEST(KvManager, StartCountsCachedHitBlocksAgainstCapacity) {
  KvManager kv({.n_blocks = 4, .block_size = kBs});
  const std::vector<int32_t> a = toks(8, 0);
  const std::vector<int32_t> ta = run_seq(kv, 1, &a);
  kv.free(1);
  expect_counts(kv, 2, 0, 2);
  const std::vector<int32_t> b = cat(a, toks(9, 100));  // 17 tokens: 5 blocks
  const PrefixHit hit = kv.find_prefix(b);
  ASSERT_EQ(hit.n_tokens, 8);
  EXPECT_FALSE(kv.start(2, &b, hit, 17)) << "2 hit + 3 new > 4 blocks";
  EXPECT_FALSE(kv.has(2));
  expect_counts(kv, 2, 0, 2);
  EXPECT_EQ(kv.prefix_stats().n_query_tokens, 8) << "a refused start counts nothing";
  EXPECT_EQ(kv.find_prefix(b).n_tokens, 8);

  ASSERT_TRUE(kv.start(2, &b, hit, 16));  // 2 hit + 2 new
  EXPECT_EQ(head(kv.table(2), 2), head(ta, 2));
  EXPECT_EQ(kv.pool().n_evictions(), 0);
  expect_counts(kv, 0, 4, 0);
  EXPECT_EQ(kv.prefix_stats().n_hit_tokens, 8);
  EXPECT_EQ(kv.prefix_stats().n_query_tokens, 8 + 17);
}

TEST(KvManager, SlidingWindowReleasesBlocksWhollyOutsideIt) {
  constexpr int32_t kWindow = 6;
  KvManager kv({.n_blocks = 16, .block_size = kBs, .sliding_window = kWindow});
  const std::vector<int32_t> t = toks(40, 0);
  ASSERT_TRUE(kv.start(1, &t, {}, 1));
  for (int32_t n = 1; n <= 39; ++n) {
    ASSERT_TRUE(kv.grow(1, n));
    kv.on_computed(1, n);
    // The next token (position n) attends to positions [n - window + 1, n].
    const int32_t first_needed = std::max(0, n - kWindow + 1);
    const std::vector<int32_t>& table = kv.table(1);
    int32_t n_held = 0;
    for (int32_t ib = 0; ib < int32_t(table.size()); ++ib) {
      const bool wholly_before = (ib + 1) * kBs <= first_needed;
      EXPECT_EQ(table[size_t(ib)] < 0, wholly_before) << "n " << n << " block " << ib;
      n_held += table[size_t(ib)] >= 0;
    }
    EXPECT_LE(n_held, KvManager::blocks_for(kWindow, kBs) + 1) << "n " << n;
    EXPECT_EQ(kv.pool().n_blocks_used(), n_held);
    ASSERT_EQ(kv.check_invariants(), "") << "n " << n;
  }
  // The dropped blocks were full and hashed: they are cached, not lost.
  EXPECT_GT(kv.pool().n_blocks_cached(), 0);
  kv.free(1);
  expect_counts(kv, 16 - kv.pool().n_blocks_cached(), 0, kv.pool().n_blocks_cached());
}

TEST(KvManager, PrefixCachingOffNeverHashesOrHits) {
  KvManager kv({.n_blocks = 8, .block_size = kBs, .enable_prefix_caching = false});
  const std::vector<int32_t> a = toks(12, 0);
  run_seq(kv, 1, &a);
  run_seq(kv, 2, &a);
  EXPECT_NE(kv.table(1)[0], kv.table(2)[0]);
  kv.free(1);
  kv.free(2);
  expect_counts(kv, 8, 0, 0);
  EXPECT_EQ(kv.find_prefix(cat(a, {1})).n_tokens, 0);
  EXPECT_EQ(kv.prefix_stats().n_query_tokens, 0);
  EXPECT_EQ(kv.prefix_stats().n_hit_tokens, 0);
}

TEST(KvManager, SequencesGrownWithoutTokensAreNeverHashed) {
  KvManager kv({.n_blocks = 8, .block_size = kBs});
  ASSERT_TRUE(kv.grow(-1, 12));  // as Engine::score does
  kv.on_computed(-1, 12);
  for (int32_t id : kv.table(-1)) EXPECT_FALSE(kv.pool().has_hash(id));
  kv.free(-1);
  expect_counts(kv, 8, 0, 0);
  kv.free(-1);  // unknown: no-op
  expect_counts(kv, 8, 0, 0);
}

// Speculative rollback: a sequence grown for unverified tokens keeps only what its computed
// tokens and its next tokens need; the released tail blocks were never hashed, so nothing
// unverified can be hit by a later prompt, and blocks shared with another sequence stay.
TEST(KvManager, TruncateReleasesTheTailOfUnverifiedSlots) {
  KvManager kv({.n_blocks = 12, .block_size = kBs});
  std::vector<int32_t> a = toks(6, 100);
  ASSERT_TRUE(kv.start(1, &a, {}, 6));
  kv.on_computed(1, 5);           // the last prompt token is still to compute
  ASSERT_TRUE(kv.grow(1, 5 + 9)); // it and 8 proposed tokens: positions 5..13, 4 blocks
  ASSERT_EQ(kv.table(1).size(), 4u);
  expect_counts(kv, 8, 4, 0);
  // Verification kept 2 proposals and sampled one token: 6 + 2 + 1 tokens, 8 computed.
  for (int32_t t : {7, 8, 9}) a.push_back(t);
  kv.on_computed(1, 8);
  const std::vector<int32_t> before = kv.table(1);
  kv.truncate(1, int32_t(a.size()));  // 9 tokens: 3 blocks
  ASSERT_EQ(kv.table(1).size(), 3u);
  EXPECT_EQ(kv.table(1), head(before, 3));
  EXPECT_EQ(kv.pool().ref_count(before[3]), 0);
  EXPECT_FALSE(kv.pool().has_hash(before[3]));
  expect_counts(kv, 9, 3, 0);
  // Blocks 0 and 1 are full of computed tokens and registered; block 2 holds one computed
  // token and one pending: not registered, so a probe hits 2 blocks, not 3.
  EXPECT_TRUE(kv.pool().has_hash(before[0]) && kv.pool().has_hash(before[1]));
  EXPECT_FALSE(kv.pool().has_hash(before[2]));
  EXPECT_EQ(kv.find_prefix(cat(a, toks(8, 900))).n_tokens, 8);
  kv.truncate(1, 9);  // not longer: no-op
  expect_counts(kv, 9, 3, 0);
  kv.truncate(1, 8);  // down to exactly the 8 computed tokens: 2 full blocks
  EXPECT_EQ(kv.table(1).size(), 2u);
  expect_counts(kv, 10, 2, 0);
  kv.free(1);
  expect_counts(kv, 10, 0, 2);
}

using KvManagerDeathTest = ::testing::Test;

TEST_F(KvManagerDeathTest, PreconditionsAreAsserted) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  KvManager kv({.n_blocks = 2, .block_size = kBs});
  const std::vector<int32_t> a = toks(8, 0);
  ASSERT_TRUE(kv.start(1, &a, {}, 8));
  EXPECT_DEATH(kv.start(1, &a, {}, 8), "already has blocks");
  kv.on_computed(1, 8);
  EXPECT_DEATH(kv.on_computed(1, 4), "goes back");
  EXPECT_DEATH(kv.on_computed(7, 4), "unknown sequence");
  EXPECT_DEATH(kv.truncate(1, 7), "drops computed tokens");
  EXPECT_DEATH(kv.truncate(7, 4), "unknown sequence");
  const PrefixHit hit = kv.find_prefix(cat(a, {1}));
  ASSERT_EQ(hit.n_tokens, 8);
  kv.free(1);
  ASSERT_TRUE(kv.grow(9, 8));  // evicts both cached blocks: the hit is stale now
  kv.free(9);
  const std::vector<int32_t> b = cat(a, {1});
  EXPECT_DEATH(kv.start(2, &b, hit, 9), "stale prefix hit");
}

}  // namespace
}  // namespace tf

namespace tf {
namespace {

// Two KV groups (Gemma 3): group 0 full attention over 8 blocks, group 1 a window of 6
// tokens over 4 blocks. Every sequence has one table per group, grown together; only group
// 1 releases blocks as its window moves on, so a sequence far longer than group 1's pool
// runs as long as group 0 has blocks; a start that does not fit one group changes nothing.
TEST(KvManagerGroups, SlidingGroupReleasesWhileFullGroupKeeps) {
  KvManager kv(KvManagerParams{.n_blocks = 8, .block_size = kBs, .more_groups = {{.n_blocks = 4, .sliding_window = 6}}});
  ASSERT_EQ(kv.n_groups(), 2);
  EXPECT_EQ(kv.sliding_window(0), 0);
  EXPECT_EQ(kv.sliding_window(1), 6);
  const std::vector<int32_t> t = toks(28, 100);
  ASSERT_TRUE(kv.start(1, &t, PrefixHit{}, 8));
  kv.on_computed(1, 8);
  EXPECT_EQ(kv.tables(1)[0].size(), 2u);
  EXPECT_EQ(kv.tables(1)[1].size(), 2u);
  for (int32_t n = 12; n <= 28; n += 4) {  // decode-sized steps past group 1's 16 tokens of pool
    ASSERT_TRUE(kv.grow(1, n)) << n;
    kv.on_computed(1, n);
    EXPECT_EQ(kv.check_invariants(), "");
  }
  const auto tables = kv.tables(1);
  EXPECT_EQ(tables[0].size(), 7u);
  EXPECT_EQ(std::count(tables[0].begin(), tables[0].end(), -1), 0) << "the full group keeps every block";
  ASSERT_EQ(tables[1].size(), 7u);
  // next position 28, window 6: keys from 23 on are read, so blocks 0..4 (tokens 0..19) are released
  EXPECT_EQ(std::count(tables[1].begin(), tables[1].end(), -1), 5);
  EXPECT_EQ(kv.pool(1).n_blocks_used(), 2);
  EXPECT_EQ(kv.pool(0).n_blocks_used(), 7);
  // Another sequence takes group 0's last block; growing it needs one more block in each
  // group, which group 1 has and group 0 has not: nothing changes in either.
  const std::vector<int32_t> u = toks(4, 500);
  ASSERT_TRUE(kv.start(2, &u, PrefixHit{}, 4));
  EXPECT_EQ(kv.pool(1).n_blocks_free() + kv.pool(1).n_blocks_cached(), 1);
  EXPECT_FALSE(kv.grow(2, 8));
  EXPECT_EQ(kv.tables(2)[0].size(), 1u);
  EXPECT_EQ(kv.tables(2)[1].size(), 1u);
  EXPECT_EQ(kv.check_invariants(), "");
  kv.free(1);
  kv.free(2);
  EXPECT_EQ(kv.pool(0).n_blocks_used(), 0);
  EXPECT_EQ(kv.pool(1).n_blocks_used(), 0);
}

}  // namespace
}  // namespace tf

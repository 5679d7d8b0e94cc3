// pad_decode_batch: the padded batch keeps every real row as it was and adds padding
// sequences that only touch the padding block.
#include <gtest/gtest.h>

#include "core/batch.h"

namespace tf {
namespace {

Batch decode_batch() {
  BatchBuilder bb(16, 3);
  const int32_t ids[3] = {5, 6, 7};
  const std::vector<int32_t> t0 = {4, 9}, t1 = {2, 8, 3}, t2 = {1};
  bb.add(SeqChunk{.ids = &ids[0], .n_ids = 1, .start_pos = 20, .blocks = t0.data(), .n_blocks = 2});
  bb.add(SeqChunk{.ids = &ids[1], .n_ids = 1, .start_pos = 40, .blocks = t1.data(), .n_blocks = 3});
  bb.add(SeqChunk{.ids = &ids[2], .n_ids = 1, .start_pos = 3, .blocks = t2.data(), .n_blocks = 1});
  return bb.take();
}

TEST(PadDecodeBatch, KeepsRealRowsAndPadsToTheBucket) {
  const Batch b = decode_batch();
  const int32_t pad[] = {100};
  const Batch p = pad_decode_batch(b, 8, 64, pad, /*block_size=*/16);
  ASSERT_EQ(p.n_seqs(), 8);
  ASSERT_EQ(p.n_tokens(), 8);
  ASSERT_EQ(p.n_out(), 8);
  EXPECT_EQ(p.max_blocks, 64);
  ASSERT_EQ(p.block_tables.size(), size_t(8 * 64));
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(p.token_ids[size_t(s)], b.token_ids[size_t(s)]);
    EXPECT_EQ(p.positions[size_t(s)], b.positions[size_t(s)]);
    EXPECT_EQ(p.slot_mapping[size_t(s)], b.slot_mapping[size_t(s)]);
    EXPECT_EQ(p.context_lens[size_t(s)], b.context_lens[size_t(s)]);
    EXPECT_EQ(p.logits_rows[size_t(s)], b.logits_rows[size_t(s)]);
    for (int j = 0; j < 64; ++j)
      EXPECT_EQ(p.block_tables[size_t(s * 64 + j)], j < 3 ? b.block_tables[size_t(s * 3 + j)] : -1);
  }
  for (int s = 3; s < 8; ++s) {
    EXPECT_EQ(p.positions[size_t(s)], 0);
    EXPECT_EQ(p.slot_mapping[size_t(s)], 100 * 16);
    EXPECT_EQ(p.context_lens[size_t(s)], 1);
    EXPECT_EQ(p.seq_starts[size_t(s) + 1], s + 1);
    EXPECT_EQ(p.logits_rows[size_t(s)], s);
    EXPECT_EQ(p.block_tables[size_t(s * 64)], 100);
    for (int j = 1; j < 64; ++j) EXPECT_EQ(p.block_tables[size_t(s * 64 + j)], -1);
  }
}

// Preconditions are assertions (a caller bug, not bad input): the process stops naming them.
TEST(PadDecodeBatchDeathTest, RejectsPrefillChunksAndOverflows) {
  BatchBuilder bb(16, 1);
  const int32_t ids[2] = {1, 2};
  const int32_t table = 0;
  bb.add(SeqChunk{.ids = ids, .n_ids = 2, .start_pos = 0, .blocks = &table, .n_blocks = 1});
  const Batch prefill = bb.take();
  const int32_t pad[] = {10}, two_pads[] = {10, 11};
  EXPECT_DEATH(pad_decode_batch(prefill, 4, 64, pad, 16), "decode only");
  EXPECT_DEATH(pad_decode_batch(decode_batch(), 2, 64, pad, 16), "3 sequences / 3 blocks / 1 KV groups into 2 / 64");
  EXPECT_DEATH(pad_decode_batch(decode_batch(), 4, 2, pad, 16), "into 4 / 2");
  EXPECT_DEATH(pad_decode_batch(decode_batch(), 4, 64, two_pads, 16), "1 KV groups into 4 / 64 / 2 pad blocks");
}

// Two KV groups (a model mixing sliding-window and full layers): every sequence brings one
// table per group; the batch holds group 0's tables and slots, then group 1's, and padding
// pads each group with its own pad block.
TEST(BatchBuilder, KvGroupsStoreOneTableAndSlotPerGroup) {
  BatchBuilder bb(4, 3, /*n_kv_groups=*/2);
  const int32_t ids[3] = {5, 6, 7};
  const std::vector<std::vector<int32_t>> s0 = {{4, 9, 1}, {-1, 0, 2}}, s1 = {{3}, {5}};
  bb.add(SeqChunk{.ids = &ids[0], .n_ids = 2, .start_pos = 7, .tables = s0});  // positions 7, 8
  bb.add(SeqChunk{.ids = &ids[2], .n_ids = 1, .start_pos = 2, .tables = s1});
  const Batch b = bb.take();
  EXPECT_EQ(b.n_kv_groups, 2);
  EXPECT_EQ(b.block_tables, (std::vector<int32_t>{4, 9, 1, 3, -1, -1, /*group 1:*/ -1, 0, 2, 5, -1, -1}));
  EXPECT_EQ(b.slot_mapping, (std::vector<int32_t>{9 * 4 + 3, 1 * 4 + 0, 3 * 4 + 2, /*group 1:*/ 0 * 4 + 3, 2 * 4 + 0,
                                                  5 * 4 + 2}));

  BatchBuilder decode(4, 3, 2);
  decode.add(SeqChunk{.ids = &ids[0], .n_ids = 1, .start_pos = 8, .tables = s0});
  const int32_t pads[] = {50, 60};
  const Batch p = pad_decode_batch(decode.take(), 2, 4, pads, 4);
  EXPECT_EQ(p.block_tables, (std::vector<int32_t>{4, 9, 1, -1, 50, -1, -1, -1, /*group 1:*/ -1, 0, 2, -1, 60, -1, -1, -1}));
  EXPECT_EQ(p.slot_mapping, (std::vector<int32_t>{1 * 4, 50 * 4, /*group 1:*/ 2 * 4, 60 * 4}));
}

}  // namespace
}  // namespace tf

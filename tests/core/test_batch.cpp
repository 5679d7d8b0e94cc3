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
  const Batch p = pad_decode_batch(b, 8, 64, /*pad_block=*/100, /*block_size=*/16);
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
  EXPECT_DEATH(pad_decode_batch(prefill, 4, 64, 10, 16), "decode only");
  EXPECT_DEATH(pad_decode_batch(decode_batch(), 2, 64, 10, 16), "3 sequences / 3 blocks into 2 / 64");
  EXPECT_DEATH(pad_decode_batch(decode_batch(), 4, 2, 10, 16), "into 4 / 2");
}

}  // namespace
}  // namespace tf

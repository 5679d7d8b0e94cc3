// uniform_width and pad_uniform_batch: the padded batch keeps every real row as it was and
// adds padding sequences of the same width that only touch the padding block.
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

TEST(PadUniformBatch, KeepsRealRowsAndPadsToTheBucket) {
  const Batch b = decode_batch();
  EXPECT_EQ(uniform_width(b), 1);
  const int32_t pad[] = {100};
  const Batch p = pad_uniform_batch(b, 8, 64, pad, /*block_size=*/16);
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

// A verification step: 2 sequences of 3 tokens (the last token and 2 proposals) with logits
// for every token, padded to 4 sequences of 3 tokens with 3 logits rows each.
TEST(PadUniformBatch, VerificationStepsPadWithTheirWidthAndRows) {
  BatchBuilder bb(16, 2);
  const int32_t ids[3] = {5, 6, 7};
  const std::vector<int32_t> t0 = {4, 9}, t1 = {2};
  bb.add(SeqChunk{.ids = ids, .n_ids = 3, .start_pos = 20, .blocks = t0.data(), .n_blocks = 2, .all_logits = true});
  bb.add(SeqChunk{.ids = ids, .n_ids = 3, .start_pos = 5, .blocks = t1.data(), .n_blocks = 1, .all_logits = true});
  const Batch b = bb.take();
  ASSERT_EQ(uniform_width(b), 3);
  const int32_t pad[] = {100};
  const Batch p = pad_uniform_batch(b, 4, 64, pad, /*block_size=*/16);
  ASSERT_EQ(p.n_seqs(), 4);
  ASSERT_EQ(p.n_tokens(), 12);
  ASSERT_EQ(p.n_out(), 12);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(p.token_ids[size_t(i)], b.token_ids[size_t(i)]);
    EXPECT_EQ(p.slot_mapping[size_t(i)], b.slot_mapping[size_t(i)]);
    EXPECT_EQ(p.logits_rows[size_t(i)], i);
  }
  for (int s = 2; s < 4; ++s) {
    EXPECT_EQ(p.seq_starts[size_t(s) + 1], 3 * (s + 1));
    EXPECT_EQ(p.context_lens[size_t(s)], 3);
    for (int t = 0; t < 3; ++t) {
      EXPECT_EQ(p.positions[size_t(3 * s + t)], t);
      EXPECT_EQ(p.slot_mapping[size_t(3 * s + t)], 100 * 16 + t);
      EXPECT_EQ(p.logits_rows[size_t(3 * s + t)], 3 * s + t);
    }
    EXPECT_EQ(p.block_tables[size_t(s * 64)], 100);
  }
}

TEST(PadUniformBatch, OtherBatchesHaveNoUniformWidth) {
  const int32_t ids[3] = {1, 2, 3};
  const int32_t table = 0;
  BatchBuilder prefill(16, 1);  // logits for the last token of a 3-token chunk
  prefill.add(SeqChunk{.ids = ids, .n_ids = 3, .start_pos = 0, .blocks = &table, .n_blocks = 1});
  EXPECT_EQ(uniform_width(prefill.take()), 0);
  BatchBuilder mixed(16, 1);  // a verification beside a decode
  mixed.add(SeqChunk{.ids = ids, .n_ids = 2, .start_pos = 0, .blocks = &table, .n_blocks = 1, .all_logits = true});
  mixed.add(SeqChunk{.ids = ids, .n_ids = 1, .start_pos = 4, .blocks = &table, .n_blocks = 1});
  EXPECT_EQ(uniform_width(mixed.take()), 0);
  BatchBuilder partial(16, 1);  // a chunk without logits beside one with
  partial.add(SeqChunk{.ids = ids, .n_ids = 1, .start_pos = 0, .blocks = &table, .n_blocks = 1, .want_logits = false});
  partial.add(SeqChunk{.ids = ids, .n_ids = 1, .start_pos = 0, .blocks = &table, .n_blocks = 1});
  EXPECT_EQ(uniform_width(partial.take()), 0);
}

// Preconditions are assertions (a caller bug, not bad input): the process stops naming them.
TEST(PadUniformBatchDeathTest, RejectsPrefillChunksAndOverflows) {
  BatchBuilder bb(16, 1);
  const int32_t ids[2] = {1, 2};
  const int32_t table = 0;
  bb.add(SeqChunk{.ids = ids, .n_ids = 2, .start_pos = 0, .blocks = &table, .n_blocks = 1});
  const Batch prefill = bb.take();
  const int32_t pad[] = {10}, two_pads[] = {10, 11};
  EXPECT_DEATH(pad_uniform_batch(prefill, 4, 64, pad, 16), "not a batch of uniform width");
  EXPECT_DEATH(pad_uniform_batch(decode_batch(), 2, 64, pad, 16), "3 sequences / 3 blocks / 1 KV groups into 2 / 64");
  EXPECT_DEATH(pad_uniform_batch(decode_batch(), 4, 2, pad, 16), "into 4 / 2");
  EXPECT_DEATH(pad_uniform_batch(decode_batch(), 4, 64, two_pads, 16), "1 KV groups into 4 / 64 / 2 pad blocks");
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
  const Batch p = pad_uniform_batch(decode.take(), 2, 4, pads, 4);
  EXPECT_EQ(p.block_tables, (std::vector<int32_t>{4, 9, 1, -1, 50, -1, -1, -1, /*group 1:*/ -1, 0, 2, -1, 60, -1, -1, -1}));
  EXPECT_EQ(p.slot_mapping, (std::vector<int32_t>{1 * 4, 50 * 4, /*group 1:*/ 2 * 4, 60 * 4}));

  // A verification step of width 2 (positions 7, 8) padded to 2 sequences: each group's
  // padding tokens go to the first 2 slots of its own pad block.
  BatchBuilder verify(4, 3, 2);
  verify.add(SeqChunk{.ids = &ids[0], .n_ids = 2, .start_pos = 7, .tables = s0, .all_logits = true});
  const Batch v = pad_uniform_batch(verify.take(), 2, 3, pads, 4);
  EXPECT_EQ(v.n_tokens(), 4);
  EXPECT_EQ(v.positions, (std::vector<int32_t>{7, 8, 0, 1}));
  EXPECT_EQ(v.block_tables, (std::vector<int32_t>{4, 9, 1, 50, -1, -1, /*group 1:*/ -1, 0, 2, 60, -1, -1}));
  EXPECT_EQ(v.slot_mapping, (std::vector<int32_t>{9 * 4 + 3, 1 * 4 + 0, 50 * 4, 50 * 4 + 1,
                                                  /*group 1:*/ 0 * 4 + 3, 2 * 4 + 0, 60 * 4, 60 * 4 + 1}));
}

}  // namespace
}  // namespace tf

#include "core/batch.h"

#include "core/error.h"

namespace tf {

void BatchBuilder::add(const SeqChunk& c) {
  TF_ASSERT(c.n_ids > 0, "a sequence in a batch needs at least one token");
  TF_ASSERT(c.n_blocks <= batch_.max_blocks, "{} blocks > max_blocks {}", c.n_blocks, batch_.max_blocks);
  const int32_t end_pos = c.start_pos + c.n_ids;
  TF_ASSERT((end_pos + block_size_ - 1) / block_size_ <= c.n_blocks,
            "sequence of {} tokens needs more than its {} blocks", end_pos, c.n_blocks);
  const int32_t row0 = batch_.n_tokens();
  for (int32_t i = 0; i < c.n_ids; ++i) {
    const int32_t pos = c.start_pos + i;
    const int32_t block = c.blocks[pos / block_size_];
    TF_ASSERT(block >= 0, "unallocated block for position {}", pos);
    batch_.token_ids.push_back(c.ids[i]);
    batch_.positions.push_back(pos);
    batch_.slot_mapping.push_back(block * block_size_ + pos % block_size_);
    if (c.all_logits || (c.want_logits && i == c.n_ids - 1)) batch_.logits_rows.push_back(row0 + i);
  }
  batch_.seq_starts.push_back(batch_.n_tokens());
  batch_.context_lens.push_back(end_pos);
  for (int32_t b = 0; b < batch_.max_blocks; ++b)
    batch_.block_tables.push_back(b < c.n_blocks ? c.blocks[b] : -1);
}

}  // namespace tf

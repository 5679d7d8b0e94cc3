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

int32_t uniform_width(const Batch& b) {
  // Every token has a logits row, in order (a decode step has one token per sequence, so its
  // rows are also every token).
  if (b.n_seqs() == 0 || b.n_out() != b.n_tokens()) return 0;
  for (int32_t i = 0; i < b.n_out(); ++i)
    if (b.logits_rows[size_t(i)] != i) return 0;
  const int32_t w = b.seq_starts[1] - b.seq_starts[0];
  for (int32_t s = 0; s < b.n_seqs(); ++s)
    if (b.seq_starts[size_t(s) + 1] - b.seq_starts[size_t(s)] != w) return 0;
  return w;
}

Batch pad_uniform_batch(const Batch& b, int32_t n_seqs, int32_t max_blocks, int32_t pad_block, int32_t block_size) {
  const int32_t w = uniform_width(b);
  TF_ASSERT(w > 0 && w <= block_size, "pad_uniform_batch: not a batch of uniform width <= {} (decode or verification)",
            block_size);
  TF_ASSERT(b.n_seqs() <= n_seqs && b.max_blocks <= max_blocks && pad_block >= 0,
            "pad_uniform_batch: {} sequences / {} blocks into {} / {}", b.n_seqs(), b.max_blocks, n_seqs, max_blocks);
  Batch p;
  p.token_ids = b.token_ids;
  p.positions = b.positions;
  p.seq_starts = b.seq_starts;
  p.context_lens = b.context_lens;
  p.slot_mapping = b.slot_mapping;
  p.logits_rows = b.logits_rows;
  p.max_blocks = max_blocks;
  p.block_tables.assign(size_t(n_seqs) * size_t(max_blocks), -1);
  for (int32_t s = 0; s < b.n_seqs(); ++s)
    for (int32_t j = 0; j < b.max_blocks; ++j)
      p.block_tables[size_t(s) * size_t(max_blocks) + size_t(j)] = b.block_tables[size_t(s) * size_t(b.max_blocks) + size_t(j)];
  for (int32_t s = b.n_seqs(); s < n_seqs; ++s) {
    for (int32_t t = 0; t < w; ++t) {
      const int32_t row = p.n_tokens();
      p.token_ids.push_back(0);
      p.positions.push_back(t);
      p.slot_mapping.push_back(pad_block * block_size + t);
      p.logits_rows.push_back(row);
    }
    p.seq_starts.push_back(p.n_tokens());
    p.context_lens.push_back(w);
    p.block_tables[size_t(s) * size_t(max_blocks)] = pad_block;
  }
  return p;
}

}  // namespace tf

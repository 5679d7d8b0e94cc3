#include "core/batch.h"

#include "core/error.h"

namespace tf {

BatchBuilder::BatchBuilder(int32_t block_size, int32_t max_blocks, int32_t n_kv_groups)
    : block_size_(block_size), tables_(size_t(n_kv_groups)), slots_(size_t(n_kv_groups)) {
  TF_ASSERT(n_kv_groups >= 1, "{} KV groups", n_kv_groups);
  batch_.max_blocks = max_blocks;
  batch_.n_kv_groups = n_kv_groups;
  batch_.seq_starts.push_back(0);
}

void BatchBuilder::add(const SeqChunk& c) {
  TF_ASSERT(c.n_ids > 0, "a sequence in a batch needs at least one token");
  const int32_t n_groups = batch_.n_kv_groups;
  TF_ASSERT(c.tables.empty() ? n_groups == 1 : int32_t(c.tables.size()) == n_groups,
            "a sequence with {} block tables in a batch of {} KV groups", c.tables.size(), n_groups);
  const int32_t end_pos = c.start_pos + c.n_ids;
  const int32_t row0 = batch_.n_tokens();
  for (int32_t g = 0; g < n_groups; ++g) {
    const int32_t* blocks = c.tables.empty() ? c.blocks : c.tables[size_t(g)].data();
    const int32_t n_blocks = c.tables.empty() ? c.n_blocks : int32_t(c.tables[size_t(g)].size());
    TF_ASSERT(n_blocks <= batch_.max_blocks, "{} blocks > max_blocks {}", n_blocks, batch_.max_blocks);
    TF_ASSERT((end_pos + block_size_ - 1) / block_size_ <= n_blocks,
              "sequence of {} tokens needs more than its {} blocks", end_pos, n_blocks);
    for (int32_t i = 0; i < c.n_ids; ++i) {
      const int32_t pos = c.start_pos + i;
      const int32_t block = blocks[pos / block_size_];
      TF_ASSERT(block >= 0, "unallocated block for position {}", pos);
      slots_[size_t(g)].push_back(block * block_size_ + pos % block_size_);
    }
    for (int32_t b = 0; b < batch_.max_blocks; ++b) tables_[size_t(g)].push_back(b < n_blocks ? blocks[b] : -1);
  }
  for (int32_t i = 0; i < c.n_ids; ++i) {
    batch_.token_ids.push_back(c.ids[i]);
    batch_.positions.push_back(c.start_pos + i);
    if (c.all_logits || (c.want_logits && i == c.n_ids - 1)) batch_.logits_rows.push_back(row0 + i);
  }
  batch_.seq_starts.push_back(batch_.n_tokens());
  batch_.context_lens.push_back(end_pos);
}

Batch BatchBuilder::take() {
  for (size_t g = 0; g < tables_.size(); ++g) {
    batch_.block_tables.insert(batch_.block_tables.end(), tables_[g].begin(), tables_[g].end());
    batch_.slot_mapping.insert(batch_.slot_mapping.end(), slots_[g].begin(), slots_[g].end());
    tables_[g].clear();
    slots_[g].clear();
  }
  return std::move(batch_);
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

Batch pad_uniform_batch(const Batch& b, int32_t n_seqs, int32_t max_blocks, std::span<const int32_t> pad_blocks,
                        int32_t block_size) {
  const int32_t w = uniform_width(b);
  TF_ASSERT(w > 0 && w <= block_size, "pad_uniform_batch: not a batch of uniform width <= {} (decode or verification)",
            block_size);
  TF_ASSERT(b.n_seqs() <= n_seqs && b.max_blocks <= max_blocks && int32_t(pad_blocks.size()) == b.n_kv_groups,
            "pad_uniform_batch: {} sequences / {} blocks / {} KV groups into {} / {} / {} pad blocks", b.n_seqs(),
            b.max_blocks, b.n_kv_groups, n_seqs, max_blocks, pad_blocks.size());
  Batch p;
  p.token_ids = b.token_ids;
  p.positions = b.positions;
  p.seq_starts = b.seq_starts;
  p.context_lens = b.context_lens;
  p.logits_rows = b.logits_rows;
  p.max_blocks = max_blocks;
  p.n_kv_groups = b.n_kv_groups;
  for (int32_t s = b.n_seqs(); s < n_seqs; ++s) {
    for (int32_t t = 0; t < w; ++t) {
      const int32_t row = p.n_tokens();
      p.token_ids.push_back(0);
      p.positions.push_back(t);
      p.logits_rows.push_back(row);
    }
    p.seq_starts.push_back(p.n_tokens());
    p.context_lens.push_back(w);
  }
  const size_t n_old = size_t(b.n_seqs()), n_new = size_t(n_seqs), mb_old = size_t(b.max_blocks),
               mb = size_t(max_blocks), tok_old = size_t(b.n_tokens());
  p.block_tables.assign(size_t(b.n_kv_groups) * n_new * mb, -1);
  for (int32_t g = 0; g < b.n_kv_groups; ++g) {
    const int32_t pad = pad_blocks[size_t(g)];
    TF_ASSERT(pad >= 0, "pad_uniform_batch: no pad block for KV group {}", g);
    int32_t* tables = p.block_tables.data() + size_t(g) * n_new * mb;
    const int32_t* old = b.block_tables.data() + size_t(g) * n_old * mb_old;
    for (size_t s = 0; s < n_old; ++s)
      for (size_t j = 0; j < mb_old; ++j) tables[s * mb + j] = old[s * mb_old + j];
    for (size_t s = n_old; s < n_new; ++s) tables[s * mb] = pad;
    const auto slots = b.slot_mapping.begin() + std::ptrdiff_t(size_t(g) * tok_old);
    p.slot_mapping.insert(p.slot_mapping.end(), slots, slots + std::ptrdiff_t(tok_old));
    for (size_t s = n_old; s < n_new; ++s)
      for (int32_t t = 0; t < w; ++t) p.slot_mapping.push_back(pad * block_size + t);
  }
  return p;
}

}  // namespace tf

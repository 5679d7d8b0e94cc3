// The packed batch the model sees, even with one sequence (docs/DESIGN.md).
//
// No padding: the tokens of all scheduled sequences are concatenated. Sequence s owns rows
// [seq_starts[s], seq_starts[s+1]) of every activation. Its KV lives in the blocks listed in
// row s of block_tables; the token at absolute position p of sequence s is stored at slot
// block_tables[s][p / block_size] * block_size + p % block_size (precomputed per token in
// slot_mapping). Attention for a token reads positions [0, its position] of its sequence
// from the cache (after this step's K/V were written), so prefill, chunked prefill, prefix
// hits and decode are one code path.
//
// KV groups (backend.h KvCacheSpec): a model whose layers keep different spans of keys has
// one block table per sequence and one slot per token for each group, stored group after
// group; group g's tables are block_tables[g * n_seqs * max_blocks, ...) and its slots
// slot_mapping[g * n_tokens, ...). With one group that is the layout above.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tf {

struct Batch {
  std::vector<int32_t> token_ids;     // [n_tokens]
  std::vector<int32_t> positions;     // [n_tokens] absolute position in its sequence
  std::vector<int32_t> seq_starts;    // [n_seqs + 1] prefix sums of tokens per sequence
  std::vector<int32_t> context_lens;  // [n_seqs] tokens in the cache after this step
  std::vector<int32_t> block_tables;  // [n_kv_groups, n_seqs, max_blocks] block ids, padded with -1
  int32_t max_blocks = 0;             // row stride of block_tables
  int32_t n_kv_groups = 1;
  std::vector<int32_t> slot_mapping;  // [n_kv_groups, n_tokens] KV slot each token's K/V is written to
  std::vector<int32_t> logits_rows;   // [n_out] token rows that need logits

  int32_t n_tokens() const { return int32_t(token_ids.size()); }
  int32_t n_seqs() const { return seq_starts.empty() ? 0 : int32_t(seq_starts.size()) - 1; }
  int32_t n_out() const { return int32_t(logits_rows.size()); }
};

// Appends one sequence's step to a batch: tokens `ids` at positions [start_pos, start_pos +
// ids.size()), with its block table(s). `want_logits` selects its last token for logits
// (all_logits: every token, for perplexity and speculative verification).
struct SeqChunk {
  const int32_t* ids = nullptr;
  int32_t n_ids = 0;
  int32_t start_pos = 0;
  const int32_t* blocks = nullptr;  // block table of the sequence (one KV group)
  int32_t n_blocks = 0;
  std::span<const std::vector<int32_t>> tables;  // or its table in each KV group (then blocks is unused)
  bool want_logits = true;
  bool all_logits = false;
};

class BatchBuilder {
 public:
  BatchBuilder(int32_t block_size, int32_t max_blocks, int32_t n_kv_groups = 1);
  void add(const SeqChunk& c);
  Batch take();

 private:
  int32_t block_size_;
  Batch batch_;
  std::vector<std::vector<int32_t>> tables_, slots_;  // per group, joined by take()
};

// The tokens per sequence when every sequence of `b` has the same number w of them and every
// token has a logits row, in order (a decode step, w = 1, or a step verifying w - 1
// proposals per sequence); 0 for any other batch (a prefill chunk, sequences of different
// widths, a mixed step).
int32_t uniform_width(const Batch& b);

// Pads a batch of uniform width w (uniform_width) to `n_seqs` sequences and a block-table
// stride of `max_blocks`, so that a recorded forward (CUDA Graph) sees the same shapes again.
// Each padding sequence has w tokens (id 0) at positions 0..w-1, written in each KV group g
// to the first w slots of pad_blocks[g] (a block outside the group's pools that no sequence
// reads), a one-block table per group, and a logits row for each token; real rows keep their
// indices, so row i < b.n_out() of the logits is unchanged.
// Preconditions (asserted): uniform width w <= block_size, b.n_seqs() <= n_seqs,
// b.max_blocks <= max_blocks, one pad block >= 0 per KV group.
Batch pad_uniform_batch(const Batch& b, int32_t n_seqs, int32_t max_blocks, std::span<const int32_t> pad_blocks,
                        int32_t block_size);

}  // namespace tf

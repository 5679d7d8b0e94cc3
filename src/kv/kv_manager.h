// Per-sequence block tables over a BlockPool, with prefix caching and sliding-window
// release. Host-only; the backend receives the tables.
//
// Invariants, after every public call:
// - A sequence's table covers the tokens it was grown to: table.size() ==
//   ceil(n / block_size) for the largest n passed to start()/grow() since its last
//   truncate(), or the n of that truncate() if larger.
// - Every table entry is a used block or -1; a block's ref count equals the number of
//   table entries that hold it (so sharing and freeing can never double free).
// - -1 entries form a prefix of the table and exist only with a sliding window: blocks
//   wholly before (next position to compute - window + 1) are released, because attention
//   never reads them again (BatchBuilder only touches blocks of written positions).
// - A registered (hashed) block is full of computed tokens and is never written again:
//   a sequence writes only positions >= its n_computed, which lie past its full blocks.
// - Only computed tokens are hashed: slots written past n_computed (speculative tokens not
//   yet verified) never reach the prefix cache, and truncate() hands back the blocks that
//   hold nothing but such slots.
//
// Prefix caching: a full block of computed tokens is registered under its chain hash
// (block_hash.h) when the scheduler reports the tokens computed (on_computed). A new
// sequence reuses the longest run of registered blocks matching its tokens from the start
// (find_prefix, then start), except that at least its last token is always computed, so
// the model produces logits for it.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"
#include "kv/block_pool.h"

namespace tf {

struct KvManagerParams {
  int32_t n_blocks = 0;
  int32_t block_size = 16;
  int32_t sliding_window = 0;         // attention window in tokens; 0 = full attention
  bool enable_prefix_caching = true;  // off: no hashing, no reuse (for A/B benchmarks)
};

// The reusable cached prefix of a token sequence (find_prefix), to pass to start().
struct PrefixHit {
  std::vector<int32_t> blocks;      // [n_blocks] block ids of the matching prefix, in order
  std::vector<BlockHash> hashes;    // [n_blocks] their chain hashes
  int32_t n_tokens = 0;             // blocks.size() * block_size
};

// Cumulative prefix-cache counters (for /metrics): hit rate = hit / query tokens.
struct PrefixCacheStats {
  int64_t n_query_tokens = 0;  // tokens of every sequence started with caching on
  int64_t n_hit_tokens = 0;    // of those, tokens whose K/V came from the cache
};

class KvManager {
 public:
  explicit KvManager(const KvManagerParams& p);

  int32_t block_size() const { return block_size_; }
  int32_t sliding_window() const { return sliding_window_; }
  bool prefix_caching() const { return prefix_caching_; }
  const BlockPool& pool() const { return pool_; }
  const PrefixCacheStats& prefix_stats() const { return stats_; }
  static int32_t blocks_for(int32_t n_tokens, int32_t block_size) {
    return (n_tokens + block_size - 1) / block_size;
  }

  // The longest run of registered blocks equal to `tokens` from the start, capped at the
  // last full block that ends strictly before the final token (the final token is always
  // computed). Empty with prefix caching off. Read-only; valid until the next mutation.
  PrefixHit find_prefix(const std::vector<int32_t>& tokens) const;
  // Starts sequence `seq` whose tokens live in *tokens (owned by the caller, alive and
  // only appended to until free(seq)): takes the hit's blocks (ref +1; cached ones are
  // revived) and new blocks so the table covers n_tokens. Returns false, changing nothing,
  // if there are not enough free or cached blocks. Preconditions: `seq` is unknown, `hit`
  // comes from find_prefix(*tokens) with no mutation since, hit.n_tokens <= n_tokens.
  bool start(int64_t seq, const std::vector<int32_t>* tokens, const PrefixHit& hit, int32_t n_tokens);

  // Blocks needed to grow sequence `seq` (possibly new) to n_tokens.
  int32_t blocks_needed(int64_t seq, int32_t n_tokens) const;
  // Grows the table of `seq` so it covers n_tokens (a new `seq` starts empty, without
  // tokens: it is never hashed, as for Engine::score). Returns false (and changes nothing)
  // if there are not enough free or cached blocks.
  bool grow(int64_t seq, int32_t n_tokens);
  // Tells the manager that `seq` has its first n_computed tokens in the cache: registers
  // the blocks that became full (if it was started with tokens and caching is on) and,
  // with a sliding window, releases the blocks that fell wholly out of it.
  // Preconditions: `seq` is known; n_computed never decreases for a sequence and is
  // covered by its table; its tokens hold at least n_computed entries.
  void on_computed(int64_t seq, int32_t n_computed);
  // Rolls back slots written past the computed tokens (rejected speculative tokens): shrinks
  // the table of `seq` to ceil(n_tokens / block_size) blocks, releasing the tail (blocks that
  // hold no computed token, so never registered). A no-op when the table is not longer.
  // Preconditions: `seq` is known; n_tokens >= its n_computed (computed K/V stay).
  void truncate(int64_t seq, int32_t n_tokens);
  // Releases every block of `seq` (the table's tail first, so that a cached chain is
  // evicted from its end, keeping its start hittable) and forgets it. No-op if unknown.
  void free(int64_t seq);

  const std::vector<int32_t>& table(int64_t seq) const;
  bool has(int64_t seq) const { return seqs_.count(seq) != 0; }
  // "" when the pool's and the tables' invariants hold, else the first violation. For tests.
  std::string check_invariants() const;

 private:
  struct SeqBlocks {
    std::vector<int32_t> table;                   // [n_blocks] block ids, -1 = released (window)
    std::vector<BlockHash> hashes;                // [n_full] chain hashes of its full computed blocks
    const std::vector<int32_t>* tokens = nullptr; // null: never hashed
    int32_t n_computed = 0;                       // last value passed to on_computed
    int32_t n_dropped = 0;                        // leading table entries released by the window
  };
  void register_full_blocks(SeqBlocks& s);
  void release_out_of_window(SeqBlocks& s);

  int32_t block_size_;
  int32_t sliding_window_;
  bool prefix_caching_;
  BlockPool pool_;
  std::unordered_map<int64_t, SeqBlocks> seqs_;
  PrefixCacheStats stats_;
};

}  // namespace tf

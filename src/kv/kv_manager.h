// Per-sequence block tables over block pools, with prefix caching and sliding-window
// release. Host-only; the backend receives the tables.
//
// KV groups: a model whose layers keep different spans of keys (Gemma 3's sliding-window
// layers beside its full-attention ones) has one group per kind (backend.h KvCacheSpec).
// Each group has its own pool of block ids and its own window, and every sequence one table
// per group; a sequence is started, grown and freed in all groups at once (a call that does
// not fit in one group changes nothing in any). Group 0 is the only group of most models.
//
// Invariants, after every public call, in every group:
// - A sequence's table covers the tokens it was grown to: table.size() ==
//   ceil(n / block_size) for the largest n passed to start()/grow() since its last
//   truncate(), or the n of that truncate() if larger.
// - Every table entry is a used block or -1; a block's ref count equals the number of
//   table entries that hold it (so sharing and freeing can never double free).
// - -1 entries form a prefix of the table and exist only in a group with a sliding window:
//   blocks wholly before (next position to compute - window + 1) are released, because
//   attention never reads them again (BatchBuilder only touches blocks of written positions).
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
// the model produces logits for it. A group with a window needs only the blocks of the hit
// that its window still covers; the others count as already released.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"
#include "kv/block_pool.h"

namespace tf {

// A KV group beyond the first: its blocks and its attention window (0 = full attention).
struct KvGroupParams {
  int32_t n_blocks = 0;
  int32_t sliding_window = 0;
};

struct KvManagerParams {
  int32_t n_blocks = 0;               // group 0's blocks
  int32_t block_size = 16;
  int32_t sliding_window = 0;         // group 0's attention window in tokens; 0 = full attention
  bool enable_prefix_caching = true;  // off: no hashing, no reuse (for A/B benchmarks)
  std::vector<KvGroupParams> more_groups;  // groups 1, 2, ...
};

// The reusable cached prefix of a token sequence (find_prefix), to pass to start().
struct PrefixHit {
  std::vector<int32_t> blocks;      // [n_blocks] group 0's block ids of the matching prefix, in order
  std::vector<BlockHash> hashes;    // [n_blocks] their chain hashes
  int32_t n_tokens = 0;             // blocks.size() * block_size
  // [n_groups - 1][n_blocks] the other groups' block ids; -1 where the group's window has
  // already passed the block
  std::vector<std::vector<int32_t>> more_blocks;
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
  int32_t n_groups() const { return int32_t(groups_.size()); }
  int32_t sliding_window(int32_t group = 0) const { return groups_[size_t(group)].window; }
  bool prefix_caching() const { return prefix_caching_; }
  const BlockPool& pool(int32_t group = 0) const { return groups_[size_t(group)].pool; }
  const PrefixCacheStats& prefix_stats() const { return stats_; }
  static int32_t blocks_for(int32_t n_tokens, int32_t block_size) {
    return (n_tokens + block_size - 1) / block_size;
  }

  // The longest run of registered blocks equal to `tokens` from the start, capped at the
  // last full block that ends strictly before the final token (the final token is always
  // computed), and found in every group (as far as its window reaches back from the hit's
  // end). Empty with prefix caching off. Read-only; valid until the next mutation.
  PrefixHit find_prefix(const std::vector<int32_t>& tokens) const;
  // Starts sequence `seq` whose tokens live in *tokens (owned by the caller, alive and
  // only appended to until free(seq)): takes the hit's blocks (ref +1; cached ones are
  // revived) and new blocks so the tables cover n_tokens. Returns false, changing nothing,
  // if some group has not enough free or cached blocks. Preconditions: `seq` is unknown,
  // `hit` comes from find_prefix(*tokens) with no mutation since, hit.n_tokens <= n_tokens.
  bool start(int64_t seq, const std::vector<int32_t>* tokens, const PrefixHit& hit, int32_t n_tokens);

  // Blocks needed in `group` to grow sequence `seq` (possibly new) to n_tokens.
  int32_t blocks_needed(int64_t seq, int32_t n_tokens, int32_t group = 0) const;
  // Grows the tables of `seq` so they cover n_tokens (a new `seq` starts empty, without
  // tokens: it is never hashed, as for Engine::score). Returns false (and changes nothing)
  // if some group has not enough free or cached blocks.
  bool grow(int64_t seq, int32_t n_tokens);
  // Tells the manager that `seq` has its first n_computed tokens in the cache: registers
  // the blocks that became full (if it was started with tokens and caching is on) and, in
  // groups with a sliding window, releases the blocks that fell wholly out of it.
  // Preconditions: `seq` is known; n_computed never decreases for a sequence and is
  // covered by its tables; its tokens hold at least n_computed entries.
  void on_computed(int64_t seq, int32_t n_computed);
  // Rolls back slots written past the computed tokens (rejected speculative tokens): shrinks
  // the table of `seq` to ceil(n_tokens / block_size) blocks, releasing the tail (blocks that
  // hold no computed token, so never registered). A no-op when the table is not longer.
  // Preconditions: `seq` is known; n_tokens >= its n_computed (computed K/V stay).
  void truncate(int64_t seq, int32_t n_tokens);
  // Releases every block of `seq` (the table's tail first, so that a cached chain is
  // evicted from its end, keeping its start hittable) and forgets it. No-op if unknown.
  void free(int64_t seq);

  // The block table of `seq` in group 0 / in every group ([n_groups]).
  const std::vector<int32_t>& table(int64_t seq) const { return tables(seq)[0]; }
  std::span<const std::vector<int32_t>> tables(int64_t seq) const;
  bool has(int64_t seq) const { return seqs_.count(seq) != 0; }
  // "" when the pools' and the tables' invariants hold, else the first violation. For tests.
  std::string check_invariants() const;

 private:
  struct Group {
    BlockPool pool;
    int32_t window = 0;
  };
  struct SeqBlocks {
    std::vector<std::vector<int32_t>> tables;     // [n_groups][n_blocks] block ids, -1 = released (window)
    std::vector<int32_t> n_dropped;               // [n_groups] leading entries released by the window
    std::vector<BlockHash> hashes;                // [n_full] chain hashes of its full computed blocks
    const std::vector<int32_t>* tokens = nullptr; // null: never hashed
    int32_t n_computed = 0;                       // last value passed to on_computed
  };
  // Leading blocks a group with window `window` no longer needs once n_computed tokens are in.
  int32_t n_out_of_window(int32_t window, int32_t n_computed) const;
  void register_full_blocks(SeqBlocks& s);
  void release_out_of_window(SeqBlocks& s);

  int32_t block_size_;
  bool prefix_caching_;
  std::vector<Group> groups_;
  std::unordered_map<int64_t, SeqBlocks> seqs_;
  PrefixCacheStats stats_;
};

}  // namespace tf

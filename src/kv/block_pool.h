// The pool of KV blocks: integer ids, reference counts, the prefix-cache registry and the
// lists blocks are taken from. Host-only: the backend owns the memory these ids index.
//
// Every block is in exactly one of three states:
//   free    ref count 0, no hash: holds nothing worth keeping; on the free stack.
//   used    ref count > 0: in the block table of that many sequences.
//   cached  ref count 0 with a hash: full of some prefix's K/V that nobody uses now; on the
//           LRU list, kept for a later prefix hit and evicted only when no free block is left.
// Invariant after every public call: n_blocks_free() + n_blocks_used() + n_blocks_cached()
// == n_blocks_total(), each hash names at most one block, and a block's hash never
// changes while it is used (its K/V are immutable once full).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"

namespace tf {

class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);

  int32_t n_blocks_total() const { return int32_t(ref_counts_.size()); }
  int32_t n_blocks_free() const { return int32_t(free_.size()); }
  int32_t n_blocks_cached() const { return n_cached_; }
  int32_t n_blocks_used() const { return n_blocks_total() - n_blocks_free() - n_blocks_cached(); }
  // Blocks allocate() can hand out: free ones, then cached ones by eviction.
  int32_t n_blocks_available() const { return n_blocks_free() + n_blocks_cached(); }
  int64_t n_evictions() const { return n_evictions_; }

  // Takes a block with ref count 1 and no hash: a free one if any (the most recently
  // freed; a fresh pool hands out ids 0, 1, 2, ...), else evicts the least recently used
  // cached block (its hash is forgotten).
  // Precondition: n_blocks_available() > 0.
  int32_t allocate();
  // Adds a reference to a used block (prefix sharing), or revives a cached block (it leaves
  // the LRU list and becomes used with ref count 1). Precondition: the block is not free.
  void retain(int32_t id);
  // Drops a reference. At zero a hashed block becomes cached (most recently used end of the
  // LRU list), an unhashed one free. Precondition: the block is used (no double free).
  void release(int32_t id);

  // Registers `id` as the block holding the prefix named `h`. Returns false and changes
  // nothing if another block already holds `h` (two sequences computed the same prefix
  // at once: the duplicate stays unhashed and becomes free when released).
  // Preconditions: `id` is used and has no hash yet.
  bool register_hash(int32_t id, const BlockHash& h);
  // The block holding prefix `h` (used or cached), or -1.
  int32_t lookup(const BlockHash& h) const;
  bool has_hash(int32_t id) const { return hashed_[size_t(id)] != 0; }
  const BlockHash& hash_of(int32_t id) const { return hashes_[size_t(id)]; }
  int32_t ref_count(int32_t id) const { return ref_counts_[size_t(id)]; }
  bool is_cached(int32_t id) const { return ref_count(id) == 0 && has_hash(id); }

  // Ids of the cached blocks from least to most recently used (the eviction order).
  std::vector<int32_t> cached_lru_order() const;
  // Walks every structure and returns "" when all invariants above hold, else a
  // description of the first violation. O(n_blocks); for tests and debugging.
  std::string check_invariants() const;

 private:
  void check_id(int32_t id) const;
  void lru_push_back(int32_t id);
  void lru_unlink(int32_t id);

  std::vector<int32_t> ref_counts_;  // [n_blocks]
  std::vector<int32_t> free_;        // stack of free ids
  std::vector<BlockHash> hashes_;    // [n_blocks] valid where hashed_
  std::vector<uint8_t> hashed_;      // [n_blocks] 1 if the block is registered under hashes_
  std::unordered_map<BlockHash, int32_t, BlockHashHasher> by_hash_;  // registered blocks

  // The LRU list of cached blocks, threaded through two arrays rather than a std::list:
  // a prefix hit revives a cached block from the middle of the list, and release/evict
  // push and pop at the ends, all O(1) with no allocation (vLLM's FreeKVCacheBlockQueue
  // has the same shape for the same reason). Cost: 8 bytes per block. -1 ends the list.
  std::vector<int32_t> lru_prev_;  // [n_blocks]
  std::vector<int32_t> lru_next_;  // [n_blocks]
  int32_t lru_head_ = -1;          // least recently used: evicted first
  int32_t lru_tail_ = -1;          // most recently released
  int32_t n_cached_ = 0;
  int64_t n_evictions_ = 0;
};

}  // namespace tf

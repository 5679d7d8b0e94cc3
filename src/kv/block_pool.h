// The pool of KV blocks: integer ids, reference counts and a free list. Host-only: the
// backend owns the memory these ids index.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tf {

class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);

  int32_t n_blocks_total() const { return int32_t(ref_counts_.size()); }
  int32_t n_blocks_free() const { return int32_t(free_.size()); }
  int32_t n_blocks_used() const { return n_blocks_total() - n_blocks_free(); }

  // Takes a free block (ref count 1). Precondition: n_blocks_free() > 0.
  int32_t allocate();
  // Adds a reference to a used block (prefix sharing).
  void retain(int32_t id);
  // Drops a reference; the block returns to the free list at zero. Precondition: used.
  void release(int32_t id);
  int32_t ref_count(int32_t id) const { return ref_counts_[size_t(id)]; }

 private:
  std::vector<int32_t> ref_counts_;  // [n_blocks]
  std::vector<int32_t> free_;        // stack of free ids: lowest ids handed out first
};

}  // namespace tf

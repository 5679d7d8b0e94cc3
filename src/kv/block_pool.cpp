#include "kv/block_pool.h"

#include "core/error.h"

namespace tf {

BlockPool::BlockPool(int32_t n_blocks) : ref_counts_(size_t(n_blocks), 0) {
  TF_ASSERT(n_blocks > 0, "a block pool needs at least one block");
  free_.reserve(size_t(n_blocks));
  for (int32_t i = n_blocks - 1; i >= 0; --i) free_.push_back(i);
}

int32_t BlockPool::allocate() {
  TF_ASSERT(!free_.empty(), "allocate() with no free block");
  const int32_t id = free_.back();
  free_.pop_back();
  TF_ASSERT(ref_counts_[size_t(id)] == 0, "free block {} has references", id);
  ref_counts_[size_t(id)] = 1;
  return id;
}

void BlockPool::retain(int32_t id) {
  TF_ASSERT(id >= 0 && id < n_blocks_total() && ref_counts_[size_t(id)] > 0, "retain of free block {}", id);
  ++ref_counts_[size_t(id)];
}

void BlockPool::release(int32_t id) {
  TF_ASSERT(id >= 0 && id < n_blocks_total() && ref_counts_[size_t(id)] > 0, "double free of block {}", id);
  if (--ref_counts_[size_t(id)] == 0) free_.push_back(id);
}

}  // namespace tf

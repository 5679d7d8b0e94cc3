#include "kv/block_pool.h"

#include <fmt/format.h>

#include "core/error.h"

namespace tf {

BlockPool::BlockPool(int32_t n_blocks)
    : ref_counts_(size_t(n_blocks > 0 ? n_blocks : 0), 0),
      hashes_(ref_counts_.size()),
      hashed_(ref_counts_.size(), 0),
      lru_prev_(ref_counts_.size(), -1),
      lru_next_(ref_counts_.size(), -1) {
  TF_ASSERT(n_blocks > 0, "a block pool needs at least one block");
  free_.reserve(size_t(n_blocks));
  for (int32_t i = n_blocks - 1; i >= 0; --i) free_.push_back(i);
}

void BlockPool::check_id(int32_t id) const {
  TF_ASSERT(id >= 0 && id < n_blocks_total(), "block id {} outside [0, {})", id, n_blocks_total());
}

void BlockPool::lru_push_back(int32_t id) {
  lru_prev_[size_t(id)] = lru_tail_;
  lru_next_[size_t(id)] = -1;
  if (lru_tail_ >= 0) lru_next_[size_t(lru_tail_)] = id;
  else lru_head_ = id;
  lru_tail_ = id;
  ++n_cached_;
}

void BlockPool::lru_unlink(int32_t id) {
  const int32_t p = lru_prev_[size_t(id)], n = lru_next_[size_t(id)];
  if (p >= 0) lru_next_[size_t(p)] = n;
  else lru_head_ = n;
  if (n >= 0) lru_prev_[size_t(n)] = p;
  else lru_tail_ = p;
  lru_prev_[size_t(id)] = lru_next_[size_t(id)] = -1;
  --n_cached_;
}

int32_t BlockPool::allocate() {
  TF_ASSERT(n_blocks_available() > 0, "allocate() with no free or cached block");
  int32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    // Evict: the cached block released longest ago; its prefix can no longer be hit.
    id = lru_head_;
    lru_unlink(id);
    by_hash_.erase(hashes_[size_t(id)]);
    hashed_[size_t(id)] = 0;
    ++n_evictions_;
  }
  TF_ASSERT(ref_counts_[size_t(id)] == 0 && !hashed_[size_t(id)], "block {} handed out while in use", id);
  ref_counts_[size_t(id)] = 1;
  return id;
}

void BlockPool::retain(int32_t id) {
  check_id(id);
  TF_ASSERT(ref_counts_[size_t(id)] > 0 || hashed_[size_t(id)], "retain of free block {}", id);
  if (ref_counts_[size_t(id)] == 0) lru_unlink(id);  // cached -> used: a prefix hit revives it
  ++ref_counts_[size_t(id)];
}

void BlockPool::release(int32_t id) {
  check_id(id);
  TF_ASSERT(ref_counts_[size_t(id)] > 0, "double free of block {}", id);
  if (--ref_counts_[size_t(id)] > 0) return;
  if (hashed_[size_t(id)]) lru_push_back(id);
  else free_.push_back(id);
}

bool BlockPool::register_hash(int32_t id, const BlockHash& h) {
  check_id(id);
  TF_ASSERT(ref_counts_[size_t(id)] > 0, "registering a hash for block {} that is not used", id);
  TF_ASSERT(!hashed_[size_t(id)], "block {} already has a hash", id);
  if (!by_hash_.emplace(h, id).second) return false;
  hashes_[size_t(id)] = h;
  hashed_[size_t(id)] = 1;
  return true;
}

int32_t BlockPool::lookup(const BlockHash& h) const {
  auto it = by_hash_.find(h);
  return it == by_hash_.end() ? -1 : it->second;
}

std::vector<int32_t> BlockPool::cached_lru_order() const {
  std::vector<int32_t> out;
  for (int32_t id = lru_head_; id >= 0; id = lru_next_[size_t(id)]) out.push_back(id);
  return out;
}

std::string BlockPool::check_invariants() const {
  const int32_t n = n_blocks_total();
  // Count every block's state from its own fields, then check each list holds exactly
  // the blocks of its state, once.
  std::vector<uint8_t> on_free(size_t(n), 0), on_lru(size_t(n), 0);
  for (int32_t id : free_) {
    if (id < 0 || id >= n) return fmt::format("free list holds bad id {}", id);
    if (on_free[size_t(id)]++) return fmt::format("block {} is on the free list twice", id);
    if (ref_counts_[size_t(id)] != 0)
      return fmt::format("free block {} has ref count {}", id, ref_counts_[size_t(id)]);
    if (hashed_[size_t(id)]) return fmt::format("free block {} has a hash", id);
  }
  int32_t n_walked = 0, prev = -1;
  for (int32_t id = lru_head_; id >= 0; prev = id, id = lru_next_[size_t(id)]) {
    if (id >= n) return fmt::format("LRU list holds bad id {}", id);
    if (on_lru[size_t(id)]++) return fmt::format("block {} is on the LRU list twice (cycle)", id);
    if (lru_prev_[size_t(id)] != prev) return fmt::format("LRU back link of block {} is broken", id);
    if (ref_counts_[size_t(id)] != 0)
      return fmt::format("cached block {} has ref count {}", id, ref_counts_[size_t(id)]);
    if (!hashed_[size_t(id)]) return fmt::format("cached block {} has no hash", id);
    if (on_free[size_t(id)]) return fmt::format("block {} is both free and cached", id);
    ++n_walked;
  }
  if (prev != lru_tail_) return fmt::format("LRU tail {} is not the last block {}", lru_tail_, prev);
  if (n_walked != n_cached_) return fmt::format("LRU list has {} blocks, counter says {}", n_walked, n_cached_);
  int32_t n_used = 0, n_hashed = 0;
  for (int32_t id = 0; id < n; ++id) {
    const int32_t rc = ref_counts_[size_t(id)];
    if (rc < 0) return fmt::format("block {} has negative ref count {}", id, rc);
    if (rc > 0) ++n_used;
    if (rc == 0 && !on_free[size_t(id)] && !on_lru[size_t(id)])
      return fmt::format("block {} has ref count 0 but is neither free nor cached (leak)", id);
    if (hashed_[size_t(id)]) {
      ++n_hashed;
      auto it = by_hash_.find(hashes_[size_t(id)]);
      if (it == by_hash_.end() || it->second != id)
        return fmt::format("block {} has a hash the registry does not map to it", id);
    }
  }
  if (n_hashed != int32_t(by_hash_.size()))
    return fmt::format("registry has {} hashes for {} hashed blocks", by_hash_.size(), n_hashed);
  if (n_blocks_free() + n_used + n_blocks_cached() != n)
    return fmt::format("free {} + used {} + cached {} != total {}", n_blocks_free(), n_used, n_blocks_cached(), n);
  return "";
}

}  // namespace tf

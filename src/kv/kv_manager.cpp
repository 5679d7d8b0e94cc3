#include "kv/kv_manager.h"

#include <algorithm>

#include "core/error.h"

namespace tf {

KvManager::KvManager(const KvManagerParams& p) : block_size_(p.block_size), pool_(p.n_blocks) {
  TF_ASSERT(p.block_size > 0, "block_size must be positive");
}

int32_t KvManager::blocks_needed(int64_t seq, int32_t n_tokens) const {
  auto it = tables_.find(seq);
  const int32_t have = it == tables_.end() ? 0 : int32_t(it->second.size());
  return std::max(0, blocks_for(n_tokens, block_size_) - have);
}

bool KvManager::grow(int64_t seq, int32_t n_tokens) {
  const int32_t need = blocks_needed(seq, n_tokens);
  if (need > pool_.n_blocks_free()) return false;
  auto& t = tables_[seq];
  for (int32_t i = 0; i < need; ++i) t.push_back(pool_.allocate());
  return true;
}

void KvManager::free(int64_t seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  for (int32_t b : it->second)
    if (b >= 0) pool_.release(b);
  tables_.erase(it);
}

const std::vector<int32_t>& KvManager::table(int64_t seq) const {
  auto it = tables_.find(seq);
  TF_ASSERT(it != tables_.end(), "no block table for sequence {}", seq);
  return it->second;
}

}  // namespace tf

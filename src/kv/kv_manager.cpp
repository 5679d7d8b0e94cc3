#include "kv/kv_manager.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace tf {

KvManager::KvManager(const KvManagerParams& p)
    : block_size_(p.block_size),
      sliding_window_(p.sliding_window),
      prefix_caching_(p.enable_prefix_caching),
      pool_(p.n_blocks) {
  TF_ASSERT(p.block_size > 0, "block_size must be positive");
  TF_ASSERT(p.sliding_window >= 0, "sliding_window must be >= 0 (0 = none)");
}

// Walks the chain h_0, h_1, ... over the tokens' full blocks and stops at the first hash
// with no registered block. Blocks that end at or after the final token are never
// considered: max_blocks = (n - 1) / block_size leaves at least one token to compute.
PrefixHit KvManager::find_prefix(const std::vector<int32_t>& tokens) const {
  PrefixHit hit;
  if (!prefix_caching_ || tokens.empty()) return hit;
  const int32_t max_blocks = (int32_t(tokens.size()) - 1) / block_size_;
  BlockHash parent = kRootHash;
  for (int32_t ib = 0; ib < max_blocks; ++ib) {
    const BlockHash h = hash_block(parent, tokens.data() + int64_t(ib) * block_size_, block_size_);
    const int32_t id = pool_.lookup(h);
    if (id < 0) break;
    hit.blocks.push_back(id);
    hit.hashes.push_back(h);
    parent = h;
  }
  hit.n_tokens = int32_t(hit.blocks.size()) * block_size_;
  return hit;
}

// Capacity first, then mutation, so a refusal changes nothing: reviving a cached hit block
// takes it out of the evictable set, so those count against what allocate() may hand out.
bool KvManager::start(int64_t seq, const std::vector<int32_t>* tokens, const PrefixHit& hit,
                      int32_t n_tokens) {
  TF_ASSERT(!has(seq), "start() of sequence {} that already has blocks", seq);
  TF_ASSERT(tokens != nullptr, "start() of sequence {} without tokens", seq);
  TF_ASSERT(hit.blocks.size() == hit.hashes.size() &&
                hit.n_tokens == int32_t(hit.blocks.size()) * block_size_ && hit.n_tokens <= n_tokens &&
                n_tokens <= int32_t(tokens->size()),
            "start() of sequence {} with an inconsistent hit ({} tokens) or n_tokens {}", seq,
            hit.n_tokens, n_tokens);
  int32_t n_hit_cached = 0;
  for (size_t i = 0; i < hit.blocks.size(); ++i) {
    const int32_t id = hit.blocks[i];
    TF_ASSERT(pool_.lookup(hit.hashes[i]) == id, "stale prefix hit for sequence {}", seq);
    n_hit_cached += pool_.is_cached(id) ? 1 : 0;
  }
  const int32_t n_new = blocks_for(n_tokens, block_size_) - int32_t(hit.blocks.size());
  if (n_new > pool_.n_blocks_available() - n_hit_cached) return false;

  SeqBlocks& s = seqs_[seq];
  s.tokens = tokens;
  s.table = hit.blocks;
  s.hashes = hit.hashes;
  s.n_computed = hit.n_tokens;
  for (int32_t id : hit.blocks) pool_.retain(id);
  for (int32_t i = 0; i < n_new; ++i) s.table.push_back(pool_.allocate());
  if (prefix_caching_) {
    stats_.n_query_tokens += int64_t(tokens->size());
    stats_.n_hit_tokens += hit.n_tokens;
  }
  release_out_of_window(s);
  return true;
}

int32_t KvManager::blocks_needed(int64_t seq, int32_t n_tokens) const {
  auto it = seqs_.find(seq);
  const int32_t have = it == seqs_.end() ? 0 : int32_t(it->second.table.size());
  return std::max(0, blocks_for(n_tokens, block_size_) - have);
}

bool KvManager::grow(int64_t seq, int32_t n_tokens) {
  TF_ASSERT(n_tokens >= 0, "grow() of sequence {} to {} tokens", seq, n_tokens);
  const int32_t need = blocks_needed(seq, n_tokens);
  if (need > pool_.n_blocks_available()) return false;
  auto& t = seqs_[seq].table;
  for (int32_t i = 0; i < need; ++i) t.push_back(pool_.allocate());
  return true;
}

void KvManager::on_computed(int64_t seq, int32_t n_computed) {
  auto it = seqs_.find(seq);
  TF_ASSERT(it != seqs_.end(), "on_computed() of unknown sequence {}", seq);
  SeqBlocks& s = it->second;
  TF_ASSERT(n_computed >= s.n_computed && n_computed <= int32_t(s.table.size()) * block_size_,
            "sequence {}: n_computed {} goes back (was {}) or past its {} blocks", seq, n_computed,
            s.n_computed, s.table.size());
  TF_ASSERT(s.tokens == nullptr || n_computed <= int32_t(s.tokens->size()),
            "sequence {}: {} tokens computed but only {} exist", seq, n_computed, s.tokens->size());
  s.n_computed = n_computed;
  register_full_blocks(s);
  release_out_of_window(s);
}

// Extends the sequence's hash chain over its newly full blocks and registers each block
// under its hash; a block whose prefix another block already holds stays unregistered.
// Runs before the window release, and a block is full (registered) before it can fall out
// of the window (window >= 1), so every entry hashed here is still held.
void KvManager::register_full_blocks(SeqBlocks& s) {
  if (!prefix_caching_ || s.tokens == nullptr) return;
  const int32_t n_full = s.n_computed / block_size_;
  for (int32_t ib = int32_t(s.hashes.size()); ib < n_full; ++ib) {
    const BlockHash parent = ib == 0 ? kRootHash : s.hashes[size_t(ib) - 1];
    const BlockHash h = hash_block(parent, s.tokens->data() + int64_t(ib) * block_size_, block_size_);
    s.hashes.push_back(h);
    const int32_t id = s.table[size_t(ib)];
    TF_ASSERT(id >= 0, "full block {} was released before it was hashed", ib);
    if (!pool_.has_hash(id)) pool_.register_hash(id, h);
  }
}

// Attention for the next token (position n_computed) reads positions
// >= n_computed - window + 1 only; so do all later tokens. Block ib covers positions
// [ib * block_size, (ib + 1) * block_size), and is dropped once its end is <= that bound.
void KvManager::release_out_of_window(SeqBlocks& s) {
  if (sliding_window_ <= 0) return;
  const int32_t first_needed = s.n_computed - sliding_window_ + 1;
  while ((s.n_dropped + 1) * block_size_ <= first_needed && s.n_dropped < int32_t(s.table.size())) {
    int32_t& id = s.table[size_t(s.n_dropped)];
    TF_ASSERT(id >= 0, "out-of-window block {} released twice", s.n_dropped);
    pool_.release(id);
    id = -1;
    ++s.n_dropped;
  }
}

// The tail blocks lie at or past the block of position n_computed, and only blocks wholly
// before n_computed are ever registered, so none of them has a hash (asserted).
void KvManager::truncate(int64_t seq, int32_t n_tokens) {
  auto it = seqs_.find(seq);
  TF_ASSERT(it != seqs_.end(), "truncate() of unknown sequence {}", seq);
  SeqBlocks& s = it->second;
  TF_ASSERT(n_tokens >= s.n_computed, "sequence {}: truncate() to {} tokens drops computed tokens ({})", seq,
            n_tokens, s.n_computed);
  const size_t keep = size_t(std::max(blocks_for(n_tokens, block_size_), s.n_dropped));
  while (s.table.size() > keep) {
    const int32_t id = s.table.back();
    TF_ASSERT(id >= 0 && !pool_.has_hash(id), "sequence {}: truncated block {} is released or registered", seq, id);
    pool_.release(id);
    s.table.pop_back();
  }
}

void KvManager::free(int64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  const std::vector<int32_t>& t = it->second.table;
  for (auto b = t.rbegin(); b != t.rend(); ++b)
    if (*b >= 0) pool_.release(*b);
  seqs_.erase(it);
}

const std::vector<int32_t>& KvManager::table(int64_t seq) const {
  auto it = seqs_.find(seq);
  TF_ASSERT(it != seqs_.end(), "no block table for sequence {}", seq);
  return it->second.table;
}

std::string KvManager::check_invariants() const {
  if (std::string e = pool_.check_invariants(); !e.empty()) return "pool: " + e;
  std::vector<int32_t> refs(size_t(pool_.n_blocks_total()), 0);
  for (const auto& [seq, s] : seqs_) {
    for (size_t ib = 0; ib < s.table.size(); ++ib) {
      const int32_t id = s.table[ib];
      const bool dropped = int32_t(ib) < s.n_dropped;
      if (dropped != (id < 0))
        return fmt::format("sequence {}: entry {} is {} but {} leading entries are dropped", seq, ib, id, s.n_dropped);
      if (id >= pool_.n_blocks_total()) return fmt::format("sequence {}: bad block id {}", seq, id);
      if (id >= 0) ++refs[size_t(id)];
      if (id >= 0 && ib < s.hashes.size() && pool_.has_hash(id) && !(pool_.hash_of(id) == s.hashes[ib]))
        return fmt::format("sequence {}: block {} at entry {} is registered under another prefix", seq, id, ib);
    }
    if (s.n_dropped > 0 && sliding_window_ <= 0)
      return fmt::format("sequence {} dropped blocks without a sliding window", seq);
    if (int32_t(s.hashes.size()) > s.n_computed / block_size_)
      return fmt::format("sequence {} hashed {} blocks with {} tokens computed", seq, s.hashes.size(), s.n_computed);
  }
  for (int32_t id = 0; id < pool_.n_blocks_total(); ++id)
    if (refs[size_t(id)] != pool_.ref_count(id))
      return fmt::format("block {} has ref count {} but {} table entries", id, pool_.ref_count(id), refs[size_t(id)]);
  return "";
}

}  // namespace tf

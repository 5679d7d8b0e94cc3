#include "kv/kv_manager.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace tf {

KvManager::KvManager(const KvManagerParams& p) : block_size_(p.block_size), prefix_caching_(p.enable_prefix_caching) {
  TF_ASSERT(p.block_size > 0, "block_size must be positive");
  groups_.push_back(Group{.pool = BlockPool(p.n_blocks), .window = p.sliding_window});
  for (const KvGroupParams& g : p.more_groups) groups_.push_back(Group{.pool = BlockPool(g.n_blocks), .window = g.sliding_window});
  for (const Group& g : groups_) TF_ASSERT(g.window >= 0, "sliding_window must be >= 0 (0 = none)");
}

// Attention for the next token (position n_computed) reads positions
// >= n_computed - window + 1 only; so do all later tokens. Block ib covers positions
// [ib * block_size, (ib + 1) * block_size) and is not needed once its end is <= that bound.
int32_t KvManager::n_out_of_window(int32_t window, int32_t n_computed) const {
  if (window <= 0) return 0;
  const int32_t first_needed = n_computed - window + 1;
  return first_needed <= 0 ? 0 : first_needed / block_size_;
}

// Walks the chain h_0, h_1, ... over the tokens' full blocks; blocks that end at or after
// the final token are never considered: max_blocks = (n - 1) / block_size leaves at least
// one token to compute. A hit of L blocks needs, in every group, the blocks [dropped, L)
// its window still covers after L blocks (all of them without a window): the longest L
// for which each group has such a run ending at block L - 1.
PrefixHit KvManager::find_prefix(const std::vector<int32_t>& tokens) const {
  PrefixHit hit;
  hit.more_blocks.resize(groups_.size() - 1);
  if (!prefix_caching_ || tokens.empty()) return hit;
  const int32_t max_blocks = (int32_t(tokens.size()) - 1) / block_size_;
  std::vector<BlockHash> hashes;
  std::vector<std::vector<int32_t>> ids(groups_.size());  // [group][block] lookup result
  std::vector<std::vector<int32_t>> run(groups_.size());  // [group][block] found blocks ending here
  BlockHash parent = kRootHash;
  int32_t limit = max_blocks;  // a group without a window needs every block from the start
  for (int32_t ib = 0; ib < max_blocks; ++ib) {
    const BlockHash h = hash_block(parent, tokens.data() + int64_t(ib) * block_size_, block_size_);
    hashes.push_back(h);
    parent = h;
    bool all_found = true;
    for (size_t g = 0; g < groups_.size(); ++g) {
      const int32_t id = groups_[g].pool.lookup(h);
      ids[g].push_back(id);
      run[g].push_back(id < 0 ? 0 : (ib == 0 ? 0 : run[g][size_t(ib) - 1]) + 1);
      if (id < 0 && groups_[g].window == 0) all_found = false;
    }
    if (!all_found) {
      limit = ib;
      break;
    }
  }
  int32_t n = limit;
  for (; n > 0; --n) {
    bool ok = true;
    for (size_t g = 0; g < groups_.size() && ok; ++g)
      ok = run[g][size_t(n) - 1] >= n - n_out_of_window(groups_[g].window, n * block_size_);
    if (ok) break;
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<int32_t>& out = g == 0 ? hit.blocks : hit.more_blocks[g - 1];
    const int32_t dropped = n_out_of_window(groups_[g].window, n * block_size_);
    for (int32_t ib = 0; ib < n; ++ib) out.push_back(ib < dropped ? -1 : ids[g][size_t(ib)]);
  }
  hit.hashes.assign(hashes.begin(), hashes.begin() + n);
  hit.n_tokens = n * block_size_;
  return hit;
}

// Capacity first, then mutation, so a refusal changes nothing: reviving a cached hit block
// takes it out of the evictable set, so those count against what allocate() may hand out.
bool KvManager::start(int64_t seq, const std::vector<int32_t>* tokens, const PrefixHit& hit, int32_t n_tokens) {
  TF_ASSERT(!has(seq), "start() of sequence {} that already has blocks", seq);
  TF_ASSERT(tokens != nullptr, "start() of sequence {} without tokens", seq);
  const int32_t n_hit = int32_t(hit.hashes.size());
  TF_ASSERT(int32_t(hit.blocks.size()) == n_hit &&
                (hit.more_blocks.size() + 1 == groups_.size() || (hit.more_blocks.empty() && n_hit == 0)) &&
                hit.n_tokens == n_hit * block_size_ && hit.n_tokens <= n_tokens && n_tokens <= int32_t(tokens->size()),
            "start() of sequence {} with an inconsistent hit ({} tokens) or n_tokens {}", seq, hit.n_tokens, n_tokens);
  static const std::vector<int32_t> kNone;  // a hit of no blocks may leave more_blocks empty
  auto hit_blocks = [&](size_t g) -> const std::vector<int32_t>& {
    return g == 0 ? hit.blocks : hit.more_blocks.empty() ? kNone : hit.more_blocks[g - 1];
  };
  const int32_t n_new = blocks_for(n_tokens, block_size_) - n_hit;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::vector<int32_t>& blocks = hit_blocks(g);
    TF_ASSERT(int32_t(blocks.size()) == n_hit, "start() of sequence {}: group {} hit of {} blocks", seq, g,
              blocks.size());
    const int32_t dropped = n_out_of_window(groups_[g].window, hit.n_tokens);
    int32_t n_hit_cached = 0;
    for (int32_t i = 0; i < n_hit; ++i) {
      const int32_t id = blocks[size_t(i)];
      TF_ASSERT((i < dropped) == (id < 0), "start() of sequence {}: group {} hit entry {} is {}", seq, g, i, id);
      if (id < 0) continue;
      TF_ASSERT(groups_[g].pool.lookup(hit.hashes[size_t(i)]) == id, "stale prefix hit for sequence {}", seq);
      n_hit_cached += groups_[g].pool.is_cached(id) ? 1 : 0;
    }
    if (n_new > groups_[g].pool.n_blocks_available() - n_hit_cached) return false;
  }

  SeqBlocks& s = seqs_[seq];
  s.tokens = tokens;
  s.hashes = hit.hashes;
  s.n_computed = hit.n_tokens;
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<int32_t>& t = s.tables.emplace_back(hit_blocks(g));
    s.n_dropped.push_back(n_out_of_window(groups_[g].window, hit.n_tokens));
    for (int32_t id : t)
      if (id >= 0) groups_[g].pool.retain(id);
    for (int32_t i = 0; i < n_new; ++i) t.push_back(groups_[g].pool.allocate());
  }
  if (prefix_caching_) {
    stats_.n_query_tokens += int64_t(tokens->size());
    stats_.n_hit_tokens += hit.n_tokens;
  }
  return true;
}

int32_t KvManager::blocks_needed(int64_t seq, int32_t n_tokens, int32_t group) const {
  auto it = seqs_.find(seq);
  const int32_t have = it == seqs_.end() ? 0 : int32_t(it->second.tables[size_t(group)].size());
  return std::max(0, blocks_for(n_tokens, block_size_) - have);
}

bool KvManager::grow(int64_t seq, int32_t n_tokens) {
  TF_ASSERT(n_tokens >= 0, "grow() of sequence {} to {} tokens", seq, n_tokens);
  for (int32_t g = 0; g < n_groups(); ++g)
    if (blocks_needed(seq, n_tokens, g) > groups_[size_t(g)].pool.n_blocks_available()) return false;
  const int32_t need = blocks_needed(seq, n_tokens);  // the same in every group: the tables cover the same tokens
  SeqBlocks& s = seqs_[seq];
  if (s.tables.empty()) {
    s.tables.resize(groups_.size());
    s.n_dropped.assign(groups_.size(), 0);
  }
  for (size_t g = 0; g < groups_.size(); ++g)
    for (int32_t i = 0; i < need; ++i) s.tables[g].push_back(groups_[g].pool.allocate());
  return true;
}

void KvManager::on_computed(int64_t seq, int32_t n_computed) {
  auto it = seqs_.find(seq);
  TF_ASSERT(it != seqs_.end(), "on_computed() of unknown sequence {}", seq);
  SeqBlocks& s = it->second;
  TF_ASSERT(n_computed >= s.n_computed && n_computed <= int32_t(s.tables[0].size()) * block_size_,
            "sequence {}: n_computed {} goes back (was {}) or past its {} blocks", seq, n_computed, s.n_computed,
            s.tables[0].size());
  TF_ASSERT(s.tokens == nullptr || n_computed <= int32_t(s.tokens->size()),
            "sequence {}: {} tokens computed but only {} exist", seq, n_computed, s.tokens->size());
  s.n_computed = n_computed;
  register_full_blocks(s);
  release_out_of_window(s);
}

// Extends the sequence's hash chain over its newly full blocks and registers each group's
// block under its hash; a block whose prefix another block already holds stays
// unregistered. Runs before the window release, and a block is full (registered) before it
// can fall out of a window (window >= 1), so every entry hashed here is still held.
void KvManager::register_full_blocks(SeqBlocks& s) {
  if (!prefix_caching_ || s.tokens == nullptr) return;
  const int32_t n_full = s.n_computed / block_size_;
  for (int32_t ib = int32_t(s.hashes.size()); ib < n_full; ++ib) {
    const BlockHash parent = ib == 0 ? kRootHash : s.hashes[size_t(ib) - 1];
    const BlockHash h = hash_block(parent, s.tokens->data() + int64_t(ib) * block_size_, block_size_);
    s.hashes.push_back(h);
    for (size_t g = 0; g < groups_.size(); ++g) {
      const int32_t id = s.tables[g][size_t(ib)];
      TF_ASSERT(id >= 0, "full block {} of group {} was released before it was hashed", ib, g);
      if (!groups_[g].pool.has_hash(id)) groups_[g].pool.register_hash(id, h);
    }
  }
}

void KvManager::release_out_of_window(SeqBlocks& s) {
  for (size_t g = 0; g < groups_.size(); ++g) {
    const int32_t drop = std::min(n_out_of_window(groups_[g].window, s.n_computed), int32_t(s.tables[g].size()));
    for (; s.n_dropped[g] < drop; ++s.n_dropped[g]) {
      int32_t& id = s.tables[g][size_t(s.n_dropped[g])];
      TF_ASSERT(id >= 0, "out-of-window block {} of group {} released twice", s.n_dropped[g], g);
      groups_[g].pool.release(id);
      id = -1;
    }
  }
}

// The tail blocks lie at or past the block of position n_computed, and only blocks wholly
// before n_computed are ever registered, so none of them has a hash (asserted). Every group
// keeps the same number of entries (a window releases only blocks before n_computed).
void KvManager::truncate(int64_t seq, int32_t n_tokens) {
  auto it = seqs_.find(seq);
  TF_ASSERT(it != seqs_.end(), "truncate() of unknown sequence {}", seq);
  SeqBlocks& s = it->second;
  TF_ASSERT(n_tokens >= s.n_computed, "sequence {}: truncate() to {} tokens drops computed tokens ({})", seq,
            n_tokens, s.n_computed);
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<int32_t>& table = s.tables[g];
    const size_t keep = size_t(std::max(blocks_for(n_tokens, block_size_), s.n_dropped[g]));
    while (table.size() > keep) {
      const int32_t id = table.back();
      TF_ASSERT(id >= 0 && !groups_[g].pool.has_hash(id),
                "sequence {}: truncated block {} of group {} is released or registered", seq, id, g);
      groups_[g].pool.release(id);
      table.pop_back();
    }
  }
}

void KvManager::free(int64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::vector<int32_t>& t = it->second.tables[g];
    for (auto b = t.rbegin(); b != t.rend(); ++b)
      if (*b >= 0) groups_[g].pool.release(*b);
  }
  seqs_.erase(it);
}

std::span<const std::vector<int32_t>> KvManager::tables(int64_t seq) const {
  auto it = seqs_.find(seq);
  TF_ASSERT(it != seqs_.end(), "no block table for sequence {}", seq);
  return it->second.tables;
}

std::string KvManager::check_invariants() const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    const BlockPool& pool = groups_[g].pool;
    if (std::string e = pool.check_invariants(); !e.empty()) return fmt::format("pool of group {}: {}", g, e);
    std::vector<int32_t> refs(size_t(pool.n_blocks_total()), 0);
    for (const auto& [seq, s] : seqs_) {
      const std::vector<int32_t>& table = s.tables[g];
      if (table.size() != s.tables[0].size())
        return fmt::format("sequence {}: group {} has {} blocks, group 0 {}", seq, g, table.size(), s.tables[0].size());
      for (size_t ib = 0; ib < table.size(); ++ib) {
        const int32_t id = table[ib];
        const bool dropped = int32_t(ib) < s.n_dropped[g];
        if (dropped != (id < 0))
          return fmt::format("sequence {}: group {} entry {} is {} but {} leading entries are dropped", seq, g, ib, id,
                             s.n_dropped[g]);
        if (id >= pool.n_blocks_total()) return fmt::format("sequence {}: bad block id {} in group {}", seq, id, g);
        if (id >= 0) ++refs[size_t(id)];
        if (id >= 0 && ib < s.hashes.size() && pool.has_hash(id) && !(pool.hash_of(id) == s.hashes[ib]))
          return fmt::format("sequence {}: block {} at entry {} of group {} is registered under another prefix", seq,
                             id, ib, g);
      }
      if (s.n_dropped[g] > 0 && groups_[g].window <= 0)
        return fmt::format("sequence {} dropped blocks of group {}, which has no sliding window", seq, g);
      if (int32_t(s.hashes.size()) > s.n_computed / block_size_)
        return fmt::format("sequence {} hashed {} blocks with {} tokens computed", seq, s.hashes.size(), s.n_computed);
    }
    for (int32_t id = 0; id < pool.n_blocks_total(); ++id)
      if (refs[size_t(id)] != pool.ref_count(id))
        return fmt::format("block {} of group {} has ref count {} but {} table entries", id, g, pool.ref_count(id),
                           refs[size_t(id)]);
  }
  return "";
}

}  // namespace tf

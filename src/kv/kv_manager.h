// Per-sequence block tables over a BlockPool. Host-only; the backend receives the tables.
//
// Invariant: a sequence with n tokens in the cache holds exactly ceil(n / block_size)
// blocks; a sliding-window model may drop blocks wholly outside the window (their table
// entries become -1).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"

namespace tf {

struct KvManagerParams {
  int32_t n_blocks = 0;
  int32_t block_size = 16;
};

class KvManager {
 public:
  explicit KvManager(const KvManagerParams& p);

  int32_t block_size() const { return block_size_; }
  const BlockPool& pool() const { return pool_; }
  static int32_t blocks_for(int32_t n_tokens, int32_t block_size) {
    return (n_tokens + block_size - 1) / block_size;
  }

  // Blocks needed to grow sequence `seq` (possibly new) to n_tokens.
  int32_t blocks_needed(int64_t seq, int32_t n_tokens) const;
  // Grows the table of `seq` so it covers n_tokens. Returns false (and changes nothing) if
  // there are not enough free blocks.
  bool grow(int64_t seq, int32_t n_tokens);
  // Releases every block of `seq` and forgets it. No-op for an unknown sequence.
  void free(int64_t seq);
  const std::vector<int32_t>& table(int64_t seq) const;
  bool has(int64_t seq) const { return tables_.count(seq) != 0; }

 private:
  int32_t block_size_;
  BlockPool pool_;
  std::unordered_map<int64_t, std::vector<int32_t>> tables_;
};

}  // namespace tf

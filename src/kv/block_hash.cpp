#include "kv/block_hash.h"

#include <xxhash.h>

#include <cstring>
#include <vector>

#include "core/error.h"

namespace tf {

BlockHash hash_block(const BlockHash& parent, const int32_t* tokens, int32_t n_tokens) {
  TF_ASSERT(n_tokens > 0 && tokens != nullptr, "hash_block needs a full block of tokens");
  // One contiguous buffer [parent.lo, parent.hi, tokens...]: the one-shot XXH3 call is
  // faster than the streaming API for a few hundred bytes, and the layout is fixed (the
  // hashes never leave the process, so byte order does not matter).
  thread_local std::vector<unsigned char> buf;
  const size_t n_bytes = sizeof(BlockHash) + size_t(n_tokens) * sizeof(int32_t);
  buf.resize(n_bytes);
  std::memcpy(buf.data(), &parent.lo, sizeof(uint64_t));
  std::memcpy(buf.data() + sizeof(uint64_t), &parent.hi, sizeof(uint64_t));
  std::memcpy(buf.data() + sizeof(BlockHash), tokens, size_t(n_tokens) * sizeof(int32_t));
  const XXH128_hash_t h = XXH3_128bits(buf.data(), n_bytes);
  return BlockHash{.lo = h.low64, .hi = h.high64};
}

}  // namespace tf

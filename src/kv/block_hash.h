// Chain hashes that name a full KV block by its tokens and everything before them.
//
// h_0 = H(kRootHash, tokens of block 0), h_i = H(h_{i-1}, tokens of block i). Two sequences
// get equal h_i exactly when their first (i + 1) * block_size tokens are equal (up to hash
// collisions), which is when block i's K/V are equal: K/V at a position depend on all
// tokens up to it and on the position, and equal prefixes put block i at equal positions.
//
// Why 128 bits and no token comparison: a false match would silently attend over another
// prompt's K/V, and a content check cannot cover the chain cheaply (block i's match also
// needs every earlier block to match, and those may have been evicted and reused). With
// XXH3-128 over (parent hash, tokens), a collision among 2^40 blocks ever registered has
// probability about 2^80 / 2^129 = 2^-49; the cost is 16 bytes per block and per
// sequence block. XXH3 is not cryptographic: a client who can pick prompts to collide on
// purpose could read another prompt's K/V through the cache (vLLM offers SHA-256 for that
// threat model); twofold assumes cooperating clients.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace tf {

struct BlockHash {
  uint64_t lo = 0;
  uint64_t hi = 0;
  friend bool operator==(const BlockHash&, const BlockHash&) = default;
};

// The parent of block 0.
inline constexpr BlockHash kRootHash{};

// H(parent, tokens[0, n_tokens)): the chain hash of a full block. n_tokens is block_size.
BlockHash hash_block(const BlockHash& parent, const int32_t* tokens, int32_t n_tokens);

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const { return size_t(h.lo); }  // already uniform
};

}  // namespace tf

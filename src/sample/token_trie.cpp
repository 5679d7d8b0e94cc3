#include <algorithm>

#include "sample/token_constraint.h"

namespace tf {

// Builds the trie from the ids sorted by their bytes: each id's path shares the longest common
// prefix with the previous id's, and its new nodes hang below that prefix as last children,
// so children come out in increasing byte order and equal strings end at one node.
TokenTrie::TokenTrie(ConstraintVocab vocab) : bytes_(std::move(vocab.bytes)), eos_(std::move(vocab.eos)) {
  for (int32_t id : eos_)
    if (id < 0 || size_t(id) >= bytes_.size())
      fail("constrained decoding: EOS id {} outside the vocabulary of {}", id, bytes_.size());
  std::vector<int32_t> order;
  for (size_t i = 0; i < bytes_.size(); ++i)
    if (!bytes_[i].empty() && !is_eos(int32_t(i))) order.push_back(int32_t(i));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return bytes_[size_t(a)] != bytes_[size_t(b)] ? bytes_[size_t(a)] < bytes_[size_t(b)] : a < b;
  });
  nodes_.emplace_back();                // the root
  std::vector<uint32_t> path{0};        // path[d]: the node of the previous string's first d bytes
  std::vector<uint32_t> last_child{0};  // [node]: its last child (0: none)
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = bytes_[size_t(id)];
    size_t common = 0;
    if (prev != nullptr)
      while (common < s.size() && common < prev->size() && s[common] == (*prev)[common]) ++common;
    path.resize(common + 1);
    for (size_t d = common; d < s.size(); ++d) {
      const uint32_t parent = path[d], node = uint32_t(nodes_.size());
      nodes_.push_back(Node{.byte = uint8_t(s[d])});
      last_child.push_back(0);
      if (last_child[parent] == 0)
        nodes_[parent].first_child = node;
      else
        nodes_[last_child[parent]].next_sibling = node;
      last_child[parent] = node;
      path.push_back(node);
    }
    Node& end = nodes_[path[s.size()]];
    if (end.tok_count == 0) end.tok_first = uint32_t(ids_.size());
    ids_.push_back(id);
    ++end.tok_count;
    prev = &s;
  }
}

bool TokenTrie::is_eos(int32_t id) const { return std::find(eos_.begin(), eos_.end(), id) != eos_.end(); }

void apply_token_bits(const TokenBits& bits, int32_t n_vocab, std::span<float> logits) {
  const size_t n = std::min(logits.size(), size_t(n_vocab));
  constexpr float kOff = -std::numeric_limits<float>::infinity();
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t word = bits[w];
    if (word == ~uint64_t(0)) continue;
    const size_t end = std::min(n, w * 64 + 64);
    if (word == 0) {
      std::fill(logits.begin() + ptrdiff_t(w * 64), logits.begin() + ptrdiff_t(end), kOff);
      continue;
    }
    for (uint64_t off = ~word; off != 0; off &= off - 1) {  // the clear bits only
      const size_t i = w * 64 + size_t(__builtin_ctzll(off));
      if (i < end) logits[i] = kOff;
    }
  }
  std::fill(logits.begin() + ptrdiff_t(n), logits.end(), kOff);
}

}  // namespace tf

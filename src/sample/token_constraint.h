// Constrained decoding: before each draw, every token whose bytes would take the text out of a
// language (a JSON object: json_machine.h; the JSON a schema allows: schema_machine.h) gets
// logit -inf, and the end-of-sequence ids are allowed only once the text is whole.
//
// A machine M is a small copyable value with bool feed(uint8_t), bool feed(string_view) (all
// or nothing), bool complete(), operator== and size_t hash(); feed() must only take bytes
// after which the text can still be completed. The allowed set of a state is found by walking
// a byte trie of the vocabulary with the machine (one copy and one feed a trie edge, subtrees of
// refused bytes skipped); states repeat (the same depth, inside a string, after a comma...), so
// MaskSet keeps the sets per state.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"

namespace tf {

// What a constraint needs of the tokenizer.
struct ConstraintVocab {
  std::vector<std::string> bytes;  // [n_vocab]: the bytes each id stands for; empty: never
                                   // allowed (special tokens, ids the tokenizer does not have)
  std::vector<int32_t> eos;        // ids that end generation: allowed only when complete
};

// Bit i of word i / 64: id i may come next.
using TokenBits = std::vector<uint64_t>;

// The vocabulary as a byte trie.
class TokenTrie {
 public:
  explicit TokenTrie(ConstraintVocab vocab);

  int32_t n_vocab() const { return int32_t(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }
  bool is_eos(int32_t id) const;
  size_t n_nodes() const { return nodes_.size(); }

  // The ids that may come next in state m: depth first from the root, a child visited only if
  // m takes its byte, and then the ids ending there allowed. EOS when m is complete, or when no
  // token continues m (a vocabulary without the bytes it needs): never empty.
  template <class M>
  TokenBits walk(const M& m) const;

 private:
  // Children of a node are linked in increasing byte order; the ids whose bytes end at a node
  // are ids_[tok_first, tok_first + tok_count).
  struct Node {
    uint32_t first_child = 0, next_sibling = 0;  // 0: none (node 0 is the root)
    uint32_t tok_first = 0, tok_count = 0;
    uint8_t byte = 0;
  };
  std::vector<std::string> bytes_;
  std::vector<int32_t> eos_;
  std::vector<Node> nodes_;
  std::vector<int32_t> ids_;
};

// The allowed sets of M's states on one trie, computed once each. Thread-safe.
template <class M>
class MaskSet {
 public:
  explicit MaskSet(std::shared_ptr<const TokenTrie> trie) : trie_(std::move(trie)) {}
  const TokenTrie& trie() const { return *trie_; }
  std::shared_ptr<const TokenBits> allowed(const M& m);
  int64_t n_walks() const { return n_walks_; }
  int64_t n_hits() const { return n_hits_; }

 private:
  struct Hash {
    size_t operator()(const M& m) const { return m.hash(); }
  };
  // Sets kept (n_vocab / 8 bytes each: 16 KB for 128k ids); cleared when full.
  static constexpr size_t kMaxKept = 256;
  std::shared_ptr<const TokenTrie> trie_;
  std::mutex mu_;
  std::unordered_map<M, std::shared_ptr<const TokenBits>, Hash> kept_;
  int64_t n_walks_ = 0, n_hits_ = 0;
};

// One request's constraint: where its output stands.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // logits: [n_vocab] (ids past the vocabulary's size are masked too); -inf at every id that
  // cannot come next.
  virtual void mask(std::span<float> logits) const = 0;
  virtual bool allows(int32_t id) const = 0;
  // The sampled id: its bytes advance the machine (an EOS id leaves it). Throws tf::Error
  // when id is not allowed (a caller that did not mask).
  virtual void accept(int32_t id) = 0;
  virtual bool complete() const = 0;
  // A copy in the same state (speculative decoding advances one along the proposed tokens).
  virtual std::unique_ptr<TokenConstraint> clone() const = 0;
};

template <class M>
class MachineConstraint final : public TokenConstraint {
 public:
  // keep: what m points to (a compiled schema), kept alive with the constraint.
  MachineConstraint(std::shared_ptr<MaskSet<M>> masks, M m, std::shared_ptr<const void> keep = nullptr)
      : masks_(std::move(masks)), m_(std::move(m)), keep_(std::move(keep)) {}
  void mask(std::span<float> logits) const override;
  bool allows(int32_t id) const override;
  void accept(int32_t id) override;
  bool complete() const override { return m_.complete(); }
  std::unique_ptr<TokenConstraint> clone() const override { return std::make_unique<MachineConstraint<M>>(*this); }

 private:
  std::shared_ptr<MaskSet<M>> masks_;
  M m_;
  std::shared_ptr<const void> keep_;
};

// ---- implementation ----

// Depth first with one machine a level (level d: the state after the current path's first d
// bytes), so that a step copies one machine and the memory held is one machine a byte of the
// longest token.
template <class M>
TokenBits TokenTrie::walk(const M& m) const {
  TokenBits bits((bytes_.size() + 63) / 64, 0);
  auto set = [&](int32_t id) { bits[size_t(id) / 64] |= uint64_t(1) << (id % 64); };
  bool any = false;
  std::vector<M> level(1, m);
  std::vector<uint32_t> child{nodes_[0].first_child};  // [d]: the next child to try at level d
  while (!child.empty()) {
    const size_t d = child.size() - 1;
    const uint32_t c = child[d];
    if (c == 0) {  // every child of this level's node tried
      child.pop_back();
      continue;
    }
    child[d] = nodes_[c].next_sibling;
    if (level.size() < d + 2) {
      M copy = level[d];
      level.push_back(std::move(copy));
    } else {
      level[d + 1] = level[d];
    }
    if (!level[d + 1].feed(nodes_[c].byte)) continue;
    const Node& n = nodes_[c];
    for (uint32_t t = 0; t < n.tok_count; ++t) set(ids_[n.tok_first + t]);
    any |= n.tok_count > 0;
    if (n.first_child != 0) child.push_back(n.first_child);
  }
  if (m.complete() || !any)
    for (int32_t id : eos_) set(id);
  return bits;
}

template <class M>
std::shared_ptr<const TokenBits> MaskSet<M>::allowed(const M& m) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = kept_.find(m); it != kept_.end()) {
      ++n_hits_;
      return it->second;
    }
  }
  auto bits = std::make_shared<const TokenBits>(trie_->walk(m));
  std::lock_guard<std::mutex> lock(mu_);
  ++n_walks_;
  if (kept_.size() >= kMaxKept) kept_.clear();
  kept_.emplace(m, bits);
  return bits;
}

// -inf at the ids whose bit is clear, and past the vocabulary.
void apply_token_bits(const TokenBits& bits, int32_t n_vocab, std::span<float> logits);

template <class M>
void MachineConstraint<M>::mask(std::span<float> logits) const {
  apply_token_bits(*masks_->allowed(m_), masks_->trie().n_vocab(), logits);
}

template <class M>
bool MachineConstraint<M>::allows(int32_t id) const {
  if (id < 0 || id >= masks_->trie().n_vocab()) return false;
  const std::shared_ptr<const TokenBits> bits = masks_->allowed(m_);
  return ((*bits)[size_t(id) / 64] >> (id % 64)) & 1u;
}

template <class M>
void MachineConstraint<M>::accept(int32_t id) {
  if (!allows(id)) fail("constrained decoding: token {} cannot come next in the required output here", id);
  if (masks_->trie().is_eos(id)) return;
  const bool ok = m_.feed(std::string_view(masks_->trie().bytes(id)));
  TF_ASSERT(ok, "token {} was allowed but its bytes were refused", id);
}

}  // namespace tf

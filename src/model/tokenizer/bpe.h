// The BPE model of tokenizer.json ("model": {"type": "BPE", ...}): vocab, merges by rank,
// unk_token / fuse_unk, byte_fallback (<0xNN> tokens), ignore_merges (a word that is itself in
// the vocab is one token, as Llama-3 sets), continuing_subword_prefix / end_of_word_suffix.
// Words arrive already in the vocab's alphabet (GPT-2 characters for byte-level tokenizers,
// "▁" for spaces in SentencePiece-style ones).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/tokenizer/id_limit.h"
#include "model/tokenizer/string_index.h"

namespace tf::tok {

struct JsonAt;

// Merge table keyed by the pair of ids (left, right) -> {rank, id of left+right}.
// Open addressing with linear probing on a power-of-two table of 16-byte slots: a lookup is
// one multiply and almost always one cache line. Built once at load, then only read.
class PairRanks {
 public:
  struct Entry {
    int32_t rank;
    int32_t merged;
  };
  void reserve(size_t n_pairs);
  void insert(int32_t left, int32_t right, Entry e);  // a repeated pair keeps the last entry
  const Entry* find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = pack(left, right);
    for (uint64_t i = slot_of(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.entry;
      if (s.key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  struct Slot {
    uint64_t key = kEmpty;
    Entry entry{};
  };
  static uint64_t pack(int32_t l, int32_t r) { return (uint64_t(uint32_t(l)) << 32) | uint32_t(r); }
  uint64_t slot_of(uint64_t key) const { return ((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_; }
  void grow();

  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
  int shift_ = 64;
  size_t n_used_ = 0;
};

// model.vocab entries (token, id value) collected while parsing, so that the 100k+ entries
// skip nlohmann's std::map (see HfTokenizer's loader).
using VocabEntries = std::vector<std::pair<std::string, nlohmann::json>>;

class Bpe {
 public:
  // `model` is tokenizer.json's "model" object; `at` names it for errors. The vocab comes
  // from `vocab` when given, else from model["vocab"]. Ids must be below ids.limit(); with
  // ids.n_tokens = 0, the vocab's own size sets the bound.
  Bpe(const nlohmann::json& model, const JsonAt& at, const VocabEntries* vocab = nullptr, IdLimit ids = {});
  Bpe(const Bpe&) = delete;
  Bpe& operator=(const Bpe&) = delete;

  // How merge_all orders its candidates; both give the same result (tests check that).
  enum class Queue { Auto, Heap, Buckets };

  // Appends the ids of one pre-tokenized word. Thread-safe.
  void tokenize(std::string_view word, std::vector<int32_t>& out, Queue queue = Queue::Auto) const;

  std::optional<int32_t> token_id(std::string_view token) const;
  // The vocab string of id, or nullptr if id has none.
  const std::string* token(int32_t id) const;
  int32_t n_ids() const { return int32_t(id_to_token_.size()); }  // largest vocab id + 1

 private:
  struct Symbol {
    int32_t id;
    int32_t prev;  // index of the previous live symbol, -1 at the start
    int32_t next;  // index of the next live symbol, -1 at the end
    bool alive;
  };
  void load_vocab(const VocabEntries& vocab, const JsonAt& at, IdLimit ids);
  void load_merges(const nlohmann::json& merges, const JsonAt& at);
  void initial_symbols(std::string_view word, std::vector<Symbol>& symbols) const;
  bool merge_at(std::vector<Symbol>& sym, int32_t pos, int32_t merged) const;
  void merge_all_heap(std::vector<Symbol>& symbols) const;
  void merge_all_buckets(std::vector<Symbol>& symbols) const;
  bool cache_find(std::string_view word, std::vector<int32_t>& out) const;
  void cache_store(std::string_view word, const int32_t* ids, size_t n) const;

  StringIndex vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<uint8_t> has_id_;
  PairRanks ranks_;
  int32_t n_ranks_ = 0;
  // Vocab id of each one-character token below U+10000 (-1 if none): the initial split of a
  // word looks its characters up here instead of hashing a string per character.
  std::vector<int32_t> bmp_char_id_;
  std::array<int32_t, 256> byte_fallback_id_{};  // id of "<0xNN>", -1 if missing
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string subword_prefix_;  // continuing_subword_prefix ("" = none)
  std::string word_suffix_;     // end_of_word_suffix ("" = none)

  // Word -> ids cache. Text repeats words heavily, so most words skip BPE entirely. Bounded
  // (cleared when full) so a long-running server does not grow without limit; guarded by a
  // mutex because encode() is const and may run on several threads.
  static constexpr size_t kCacheMaxWordBytes = 64;
  static constexpr size_t kCacheMaxWords = 1 << 16;
  mutable std::mutex cache_mu_;
  mutable StringIndex cache_index_;                             // word -> index into cache_spans_
  mutable std::vector<std::pair<uint32_t, uint32_t>> cache_spans_;  // (offset, count) in cache_ids_
  mutable std::vector<int32_t> cache_ids_;
};

}  // namespace tf::tok

#include "model/tokenizer/bpe.h"

#include <algorithm>
#include <bit>

#include "model/tokenizer/json_field.h"
#include "model/tokenizer/utf8.h"

namespace tf::tok {

// ---- PairRanks -------------------------------------------------------------------------

void PairRanks::reserve(size_t n_pairs) {
  size_t cap = 16;
  while (cap < n_pairs * 2) cap *= 2;  // load factor <= 1/2 keeps probe runs short
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  shift_ = 64 - std::countr_zero(cap);
  n_used_ = 0;
}

void PairRanks::grow() {
  std::vector<Slot> old = std::move(slots_);
  reserve(old.size());  // doubles: reserve sizes for n*2 slots
  for (const Slot& s : old) {
    if (s.key != kEmpty) insert(int32_t(s.key >> 32), int32_t(uint32_t(s.key)), s.entry);
  }
}

void PairRanks::insert(int32_t left, int32_t right, Entry e) {
  if (slots_.empty() || (n_used_ + 1) * 2 > slots_.size()) grow();
  const uint64_t key = pack(left, right);
  for (uint64_t i = slot_of(key);; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == key) {
      s.entry = e;
      return;
    }
    if (s.key == kEmpty) {
      s.key = key;
      s.entry = e;
      ++n_used_;
      return;
    }
  }
}

// ---- loading ---------------------------------------------------------------------------

Bpe::Bpe(const json& model, const JsonAt& at, const VocabEntries* vocab, IdLimit ids) {
  if (const json* d = json_find(model, "dropout")) {
    if (!d->is_number() || d->get<double>() != 0.0) {
      (at / "dropout").fail("BPE dropout is not supported (expected null or 0)");
    }
  }
  auto opt_string = [&](const char* key) -> std::string {
    const json* v = json_find(model, key);
    if (!v) return "";
    if (!v->is_string()) (at / key).fail("expected a string or null");
    return v->get<std::string>();
  };
  subword_prefix_ = opt_string("continuing_subword_prefix");
  word_suffix_ = opt_string("end_of_word_suffix");
  fuse_unk_ = json_opt_bool(model, "fuse_unk", false, at);
  byte_fallback_ = json_opt_bool(model, "byte_fallback", false, at);
  ignore_merges_ = json_opt_bool(model, "ignore_merges", false, at);

  if (vocab) {
    load_vocab(*vocab, at / "vocab", ids);
  } else {
    const json& v = json_need(model, "vocab", at);
    if (!v.is_object()) (at / "vocab").fail("expected an object of token -> id");
    VocabEntries entries;
    for (const auto& [token, id] : v.items()) entries.emplace_back(token, id);
    load_vocab(entries, at / "vocab", ids);
  }
  load_merges(json_need(model, "merges", at), at / "merges");

  if (const std::string unk = opt_string("unk_token"); !unk.empty()) {
    unk_id_ = token_id(unk);
    if (!unk_id_) (at / "unk_token").fail("token {:?} is not in model.vocab", unk);
  }
  for (int b = 0; b < 256; ++b) {
    const auto id = token_id(fmt::format("<0x{:02X}>", b));
    byte_fallback_id_[b] = id ? *id : -1;
  }
}

void Bpe::load_vocab(const VocabEntries& vocab, const JsonAt& at, IdLimit ids) {
  if (ids.n_tokens == 0) ids.n_tokens = int64_t(vocab.size());
  vocab_.reserve(vocab.size());
  int32_t max_id = -1;
  for (const auto& [token, id_json] : vocab) {
    const int32_t id = json_need_id(id_json, at / token, ids);
    vocab_.insert(token, id);
    max_id = std::max(max_id, id);
  }
  id_to_token_.assign(size_t(max_id + 1), std::string());
  has_id_.assign(size_t(max_id + 1), 0);
  bmp_char_id_.assign(0x10000, -1);
  for (const auto& [token, id_json] : vocab) {
    const int32_t id = vocab_.find(token);  // a repeated token keeps its last id, as in HF
    id_to_token_[id] = token;
    has_id_[id] = 1;
    size_t i = 0;
    if (!token.empty()) {
      const uint32_t cp = utf8_next(token, i);
      if (i == token.size() && cp < 0x10000) bmp_char_id_[cp] = id;
    }
  }
}

void Bpe::load_merges(const json& merges, const JsonAt& at) {
  if (!merges.is_array()) at.fail("expected an array");
  ranks_.reserve(merges.size());
  n_ranks_ = int32_t(merges.size());
  std::string merged;
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    std::string_view left, right;
    if (m.is_string()) {
      // "a b": HF splits on the one space (tokens never contain a plain space in this form).
      const std::string& s = m.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        at[i].fail("expected \"left right\" with exactly one space, got {:?}", s);
      }
      left = std::string_view(s).substr(0, sp);
      right = std::string_view(s).substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get_ref<const std::string&>();
      right = m[1].get_ref<const std::string&>();
    } else {
      at[i].fail("expected \"left right\" or [left, right]");
    }
    const int32_t l = vocab_.find(left), r = vocab_.find(right);
    if (l < 0) at[i].fail("token {:?} is not in model.vocab", left);
    if (r < 0) at[i].fail("token {:?} is not in model.vocab", right);
    // The merged token drops the right part's continuing-subword prefix ("##"), as HF does.
    const size_t skip = std::min(subword_prefix_.size(), right.size());
    merged.assign(left);
    merged.append(right.substr(skip));
    const int32_t id = vocab_.find(merged);
    if (id < 0) at[i].fail("merged token {:?} is not in model.vocab", merged);
    ranks_.insert(l, r, {int32_t(i), id});
  }
}

std::optional<int32_t> Bpe::token_id(std::string_view token) const {
  const int32_t id = vocab_.find(token);
  if (id < 0) return std::nullopt;
  return id;
}

const std::string* Bpe::token(int32_t id) const {
  if (id < 0 || id >= n_ids() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

// ---- tokenizing ------------------------------------------------------------------------

// HF's BPE::merge_word, first half: one symbol per character (with the subword prefix on all
// but the first and the word suffix on the last); a character missing from the vocab becomes
// its <0xNN> byte tokens (byte_fallback, when all exist), else the unk token (consecutive unks
// fused into one when fuse_unk), else it is dropped, as HF drops it.
void Bpe::initial_symbols(std::string_view word, std::vector<Symbol>& symbols) const {
  symbols.clear();
  auto add = [&](int32_t id) {
    const auto n = int32_t(symbols.size());
    symbols.push_back({id, n - 1, -1, true});
  };
  const bool affixes = !subword_prefix_.empty() || !word_suffix_.empty();
  bool pending_unk = false;
  std::string affixed;
  size_t i = 0;
  while (i < word.size()) {
    const size_t begin = i;
    const uint32_t cp = utf8_next(word, i);
    std::string_view ch = word.substr(begin, i - begin);
    int32_t id;
    if (affixes) {
      affixed.clear();
      if (begin > 0) affixed += subword_prefix_;
      affixed += ch;
      if (i == word.size()) affixed += word_suffix_;
      ch = affixed;
      id = vocab_.find(ch);
    } else {
      id = cp < 0x10000 ? bmp_char_id_[cp] : vocab_.find(ch);
    }
    if (id >= 0) {
      if (pending_unk) add(*unk_id_);
      pending_unk = false;
      add(id);
      continue;
    }
    if (byte_fallback_ &&
        std::all_of(ch.begin(), ch.end(), [&](char c) { return byte_fallback_id_[uint8_t(c)] >= 0; })) {
      for (char c : ch) add(byte_fallback_id_[uint8_t(c)]);
      continue;
    }
    if (unk_id_) {
      if (pending_unk && !fuse_unk_) add(*unk_id_);
      pending_unk = true;
    }
  }
  if (pending_unk) add(*unk_id_);
  for (size_t k = 0; k + 1 < symbols.size(); ++k) symbols[k].next = int32_t(k + 1);
}

// Merges symbol `pos` with the next one into `merged`, if the pair there still has the merge
// the candidate was made for (a neighbour may have merged first). Returns whether it merged.
bool Bpe::merge_at(std::vector<Symbol>& sym, int32_t pos, int32_t merged) const {
  Symbol& left = sym[pos];
  if (!left.alive || left.next < 0) return false;
  Symbol& right = sym[left.next];
  const auto* e = ranks_.find(left.id, right.id);
  if (!e || e->merged != merged) return false;
  left.id = merged;
  right.alive = false;
  left.next = right.next;
  if (left.next >= 0) sym[left.next].prev = pos;
  return true;
}

// HF's Word::merge_all: repeatedly merge the adjacent pair of lowest rank, leftmost on ties,
// until no adjacent pair has a merge. Candidates (rank, position) sit in a min-heap; a popped
// candidate whose pair no longer exists is skipped, and each merge adds the two pairs it forms.
void Bpe::merge_all_heap(std::vector<Symbol>& sym) const {
  struct Cand {
    int32_t rank, pos, merged;
  };
  auto later = [](const Cand& a, const Cand& b) { return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos; };
  thread_local std::vector<Cand> heap;
  heap.clear();
  for (size_t k = 0; k + 1 < sym.size(); ++k) {
    if (const auto* e = ranks_.find(sym[k].id, sym[k + 1].id)) heap.push_back({e->rank, int32_t(k), e->merged});
  }
  std::make_heap(heap.begin(), heap.end(), later);
  auto push = [&](int32_t pos, const PairRanks::Entry* e) {
    heap.push_back({e->rank, pos, e->merged});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Cand top = heap.back();
    heap.pop_back();
    if (!merge_at(sym, top.pos, top.merged)) continue;
    const Symbol& cur = sym[top.pos];
    if (cur.prev >= 0) {
      if (const auto* p = ranks_.find(sym[cur.prev].id, cur.id)) push(cur.prev, p);
    }
    if (cur.next >= 0) {
      if (const auto* n = ranks_.find(cur.id, sym[cur.next].id)) push(top.pos, n);
    }
  }
}

// The same merge order for long words (SentencePiece-style tokenizers have no pre-tokenizer,
// so a whole text segment is one word of maybe 10^5 symbols, where a heap of all candidates
// is slow): one bucket of positions per merge rank, and a heap of only the distinct ranks
// that have candidates. A rank identifies its pair, so every candidate in a bucket is the
// same merge; popping a bucket in ascending position order (sorting it when something was
// added out of order) reproduces the heap's (rank, position) order, and a merge that creates
// a lower-ranked pair puts that rank on top of the rank heap, as the candidate heap would.
// Walking a bucket in position order also walks the symbols in memory order.
void Bpe::merge_all_buckets(std::vector<Symbol>& sym) const {
  struct Bucket {
    std::vector<int32_t> pos;  // descending when `sorted`; popped from the back
    bool sorted = true;
  };
  thread_local std::vector<int32_t> bucket_of_rank;  // [n_ranks] index into pool, -1 if none
  thread_local std::vector<Bucket> pool;
  thread_local std::vector<int32_t> used_ranks;
  thread_local std::vector<int32_t> rank_heap;  // min-heap of ranks whose bucket is non-empty
  if (bucket_of_rank.size() < size_t(n_ranks_)) bucket_of_rank.resize(size_t(n_ranks_), -1);
  used_ranks.clear();
  rank_heap.clear();
  const auto greater = std::greater<int32_t>();
  auto push = [&](int32_t pos, int32_t rank) {
    int32_t& bi = bucket_of_rank[rank];
    if (bi < 0) {
      bi = int32_t(used_ranks.size());
      used_ranks.push_back(rank);
      if (pool.size() < used_ranks.size()) pool.emplace_back();
    }
    Bucket& b = pool[bi];
    if (b.pos.empty()) {
      rank_heap.push_back(rank);
      std::push_heap(rank_heap.begin(), rank_heap.end(), greater);
      b.sorted = true;
    } else if (b.sorted && pos > b.pos.back()) {
      b.sorted = false;
    }
    b.pos.push_back(pos);
  };
  for (size_t k = 0; k + 1 < sym.size(); ++k) {
    if (const auto* e = ranks_.find(sym[k].id, sym[k + 1].id)) push(int32_t(k), e->rank);
  }
  // The first candidates went in in ascending position order: reversed, they are sorted.
  for (int32_t r : used_ranks) {
    Bucket& b = pool[bucket_of_rank[r]];
    std::reverse(b.pos.begin(), b.pos.end());
    b.sorted = true;
  }
  while (!rank_heap.empty()) {
    const int32_t rank = rank_heap.front();
    Bucket& b = pool[bucket_of_rank[rank]];
    if (!b.sorted) {
      std::sort(b.pos.begin(), b.pos.end(), greater);
      b.sorted = true;
    }
    const int32_t pos = b.pos.back();
    b.pos.pop_back();
    if (b.pos.empty()) {
      std::pop_heap(rank_heap.begin(), rank_heap.end(), greater);
      rank_heap.pop_back();
    }
    Symbol& left = sym[pos];
    if (!left.alive || left.next < 0) continue;
    const auto* e = ranks_.find(left.id, sym[left.next].id);
    if (!e || e->rank != rank || !merge_at(sym, pos, e->merged)) continue;
    const Symbol& cur = sym[pos];
    if (cur.prev >= 0) {
      if (const auto* p = ranks_.find(sym[cur.prev].id, cur.id)) push(cur.prev, p->rank);
    }
    if (cur.next >= 0) {
      if (const auto* n = ranks_.find(cur.id, sym[cur.next].id)) push(pos, n->rank);
    }
  }
  for (int32_t r : used_ranks) bucket_of_rank[r] = -1;
}

bool Bpe::cache_find(std::string_view word, std::vector<int32_t>& out) const {
  std::lock_guard lock(cache_mu_);
  const int32_t k = cache_index_.find(word);
  if (k < 0) return false;
  const auto [offset, count] = cache_spans_[size_t(k)];
  out.insert(out.end(), cache_ids_.begin() + offset, cache_ids_.begin() + offset + count);
  return true;
}

void Bpe::cache_store(std::string_view word, const int32_t* ids, size_t n) const {
  std::lock_guard lock(cache_mu_);
  if (cache_spans_.size() >= kCacheMaxWords) {
    cache_index_.clear();
    cache_spans_.clear();
    cache_ids_.clear();
  }
  if (cache_index_.find(word) >= 0) return;  // another thread got there first
  cache_index_.insert(word, int32_t(cache_spans_.size()));
  cache_spans_.emplace_back(uint32_t(cache_ids_.size()), uint32_t(n));
  cache_ids_.insert(cache_ids_.end(), ids, ids + n);
}

void Bpe::tokenize(std::string_view word, std::vector<int32_t>& out, Queue queue) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const int32_t id = vocab_.find(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  const bool cacheable = queue == Queue::Auto && word.size() <= kCacheMaxWordBytes;
  if (cacheable && cache_find(word, out)) return;
  thread_local std::vector<Symbol> symbols;
  initial_symbols(word, symbols);
  constexpr size_t kLongWord = 256;
  if (queue == Queue::Buckets || (queue == Queue::Auto && symbols.size() > kLongWord)) {
    merge_all_buckets(symbols);
  } else {
    merge_all_heap(symbols);
  }
  const size_t first = out.size();
  for (int32_t k = symbols.empty() ? -1 : 0; k >= 0; k = symbols[k].next) out.push_back(symbols[k].id);
  if (cacheable) cache_store(word, out.data() + first, out.size() - first);
}

}  // namespace tf::tok

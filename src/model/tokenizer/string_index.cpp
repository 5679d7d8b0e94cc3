#include "model/tokenizer/string_index.h"

#include "core/error.h"

namespace tf::tok {

void StringIndex::reserve(size_t n_keys) {
  size_t n = 16;
  while (n < n_keys * 2) n *= 2;  // load factor <= 1/2
  if (n > slots_.size()) rehash(n);
}

void StringIndex::clear() {
  slots_.assign(slots_.size(), Slot{});
  arena_.clear();
  n_used_ = 0;
}

void StringIndex::rehash(size_t n_slots) {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(n_slots, Slot{});
  mask_ = n_slots - 1;
  for (const Slot& s : old) {
    if (s.value == kNone) continue;
    const uint64_t h = hash_bytes(std::string_view(arena_).substr(s.offset, s.length));
    size_t i = h & mask_;
    while (slots_[i].value != kNone) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

void StringIndex::insert(std::string_view key, int32_t value) {
  TF_ASSERT(value >= 0, "StringIndex values must be >= 0");
  TF_ASSERT(arena_.size() + key.size() < (size_t(1) << 32), "StringIndex arena overflow");
  if ((n_used_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 16 : slots_.size() * 2);
  const uint64_t h = hash_bytes(key);
  const auto tag = uint32_t(h >> 32);
  for (size_t i = h & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.value == kNone) {
      s = {tag, uint32_t(arena_.size()), uint32_t(key.size()), value};
      arena_.append(key);
      ++n_used_;
      return;
    }
    if (s.tag == tag && s.length == key.size() && std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0) {
      s.value = value;
      return;
    }
  }
}

}  // namespace tf::tok

// A flat hash map from byte strings to int32 values, for the vocab (up to ~150k tokens,
// looked up ~450k times while loading merges) and the word cache.
//
// Open addressing with linear probing over 16-byte slots; the key bytes live in one arena
// string. std::unordered_map<std::string, int> costs an allocation per entry and, per lookup, a
// bucket, a node and a heap string (and with a custom hasher libstdc++ does not even cache the
// hash, re-hashing every node of a chain); here a lookup touches one slot and the arena.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace tf::tok {

inline uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t(s.size()) * 0xC2B2AE3D27D4EB4Full);
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  uint64_t w = 0;
  if (i < s.size()) std::memcpy(&w, s.data() + i, s.size() - i);
  h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
  return h ^ (h >> 29);
}

class StringIndex {
 public:
  static constexpr int32_t kNone = -1;

  // Inserts or overwrites; `value` must be >= 0.
  void insert(std::string_view key, int32_t value);
  // The value of `key`, or kNone.
  int32_t find(std::string_view key) const {
    if (slots_.empty()) return kNone;
    const uint64_t h = hash_bytes(key);
    const auto tag = uint32_t(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.value == kNone) return kNone;
      if (s.tag == tag && s.length == key.size() && std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0) {
        return s.value;
      }
    }
  }
  size_t size() const { return n_used_; }
  size_t arena_bytes() const { return arena_.size(); }
  void reserve(size_t n_keys);
  void clear();

 private:
  struct Slot {
    uint32_t tag = 0;  // high half of the hash
    uint32_t offset = 0;
    uint32_t length = 0;
    int32_t value = kNone;
  };
  void rehash(size_t n_slots);

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t n_used_ = 0;
  std::string arena_;
};

}  // namespace tf::tok

#include "sample/schema_machine.h"

#include <algorithm>
#include <cstring>

namespace tf {

// Phases of a frame, by its node's kind:
//   Object   0 before '{'; 1 a key of property i or a later one up to the first required one
//            (i 0: or '}' when none is required); 2 in a key (Scalar::pos bytes matched, the
//            keys [lo, hi) of key_order that begin so); 3 before ':'; 4 before value i; 5 after
//            value i (',' or, when no later one is required, '}')
//   Array    0 before '['; 1 an item or ']'; 2 after item i (',' or ']'); 3 an item after ','
//   String   0 before '"'; 1 inside (Scalar::str)
//   Number / Integer  0 the first byte; 1 inside (Scalar::num)
//   Literal  0 before its first byte; 1 Scalar::pos bytes matched by literals [lo, hi)
//   Wrap     0 in the text before (Scalar::pos); 1 a value; 2 in the text after; 3 in the text
//            between two values (literals[2], when there is one)
// AnyOf nodes never sit on a stack: start_value replaces them by their alternatives.
namespace {

using K = SchemaNode::Kind;
}  // namespace

// The root's frames (one thread per alternative when it is an anyOf), before any byte.
SchemaMachine::SchemaMachine(const JsonSchema& schema) : schema_(&schema) {
  Out out;
  push_alternatives(Thread{}, schema.root, out);
  n_ = out.n;
  for (int i = 0; i < n_; ++i) t_[i].copy_used(out.t[i]);
}

void SchemaMachine::push_alternatives(Thread t, int32_t node, Out& out) const {
  const SchemaNode& n = schema_->nodes[size_t(node)];
  if (n.kind == K::AnyOf) {
    for (int32_t a : n.alts) push_alternatives(t, a, out);
    return;
  }
  t.frames[t.depth++] = Frame{.node = node, .i = 0, .phase = 0};
  out.add(t);
}

SchemaMachine& SchemaMachine::operator=(const SchemaMachine& o) {
  schema_ = o.schema_;
  n_ = o.n_;
  for (int i = 0; i < n_; ++i) t_[i].copy_used(o.t_[i]);
  return *this;
}

void SchemaMachine::Thread::copy_used(const Thread& o) {
  depth = o.depth;
  s = o.s;
  std::memcpy(frames, o.frames, sizeof(Frame) * o.depth);
}

bool SchemaMachine::Thread::same(const Thread& o) const {
  if (depth != o.depth || !(s == o.s)) return false;
  for (int d = 0; d < depth; ++d)
    if (frames[d].node != o.frames[d].node || frames[d].i != o.frames[d].i || frames[d].phase != o.frames[d].phase)
      return false;
  return true;
}

bool SchemaMachine::operator==(const SchemaMachine& o) const {
  if (schema_ != o.schema_ || n_ != o.n_) return false;
  for (int i = 0; i < n_; ++i)
    if (!t_[i].same(o.t_[i])) return false;
  return true;
}

size_t SchemaMachine::hash() const {
  uint64_t h = uint64_t(n_);
  auto mix = [&](uint64_t v) { h = hash_mix(h, v); };
  for (int i = 0; i < n_; ++i) {
    const Thread& t = t_[i];
    mix(t.depth);
    mix(uint64_t(t.s.pos) | uint64_t(t.s.lo) << 16 | uint64_t(t.s.hi) << 32 | uint64_t(t.s.num.part) << 48 |
        uint64_t(t.s.num.n) << 56);
    mix(t.s.str.bits());
    mix(t.s.mag ^ uint64_t(t.s.chars) << 1 ^ uint64_t(t.s.digits) << 17 ^ uint64_t(t.s.neg) << 25 ^
        uint64_t(t.s.re) << 26);
    mix(uint64_t(t.s.ws) | uint64_t(t.s.indent) << 8);
    for (int d = 0; d < t.depth; ++d)
      mix(uint64_t(uint32_t(t.frames[d].node)) | uint64_t(t.frames[d].i) << 32 | uint64_t(t.frames[d].phase) << 48);
  }
  return size_t(h);
}

bool SchemaMachine::complete() const {
  for (int i = 0; i < n_; ++i)
    if (t_[i].depth == 0) return true;
  return false;
}

bool SchemaMachine::feed(std::string_view s) {
  SchemaMachine m = *this;
  for (char c : s)
    if (!m.feed(uint8_t(c))) return false;
  *this = m;
  return true;
}

void SchemaMachine::Out::add(const Thread& th) {
  if (n >= kMaxThreads) return;
  for (int i = 0; i < n; ++i)
    if (t[i].same(th)) return;
  t[n++].copy_used(th);
}

bool SchemaMachine::feed(uint8_t c) {
  Out out;
  for (int i = 0; i < n_; ++i) step(t_[i], c, out);
  if (out.n == 0) return false;
  n_ = out.n;
  for (int i = 0; i < n_; ++i) t_[i].copy_used(out.t[i]);
  return true;
}

// Whitespace in an object or array: its nesting is the depth of the stack.
bool SchemaMachine::whitespace(Thread& t, uint8_t c) { return take_json_whitespace(c, t.depth, t.s.ws, t.s.indent); }

// Pushes node's frame (an anyOf's alternatives, each on its own copy of t) and gives it c, the
// first byte of its value.
void SchemaMachine::start_value(Thread t, int32_t node, uint8_t c, Out& out) const {
  const SchemaNode& n = schema_->nodes[size_t(node)];
  if (n.kind == K::AnyOf) {
    for (int32_t a : n.alts) start_value(t, a, c, out);
    return;
  }
  if (t.depth >= kMaxFrames) return;
  t.frames[t.depth++] = Frame{.node = node, .i = 0, .phase = 0};
  t.s = Scalar{};
  step(t, c, out);
}

// The top frame's value is whole: its parent goes on (its phase was set to "after the value"
// when it was pushed), reading c too when c ended the value without belonging to it (a number).
void SchemaMachine::end_value(Thread t, uint8_t c, bool feed_c, Out& out) const {
  --t.depth;
  t.s = Scalar{};
  if (feed_c) {
    if (t.depth > 0) step(t, c, out);
  } else {
    out.add(t);
  }
}

// Byte c of a key (phase 2): the keys that begin with the bytes so far are the range
// [lo, hi) of n.key_order; of them, those of the properties that may come here (from the
// frame's i to the first required one) must include one that goes on with c. A key ends
// with its closing quote and no key begins another, so a whole key is the only one left.
void SchemaMachine::key_byte(Thread& t, const SchemaNode& n, uint8_t c, Out& out) const {
  Frame& f = t.frames[t.depth - 1];
  Scalar& s = t.s;
  const int32_t first = f.i, last = std::min(n.next_required[f.i], int32_t(n.props.size()) - 1);
  auto key = [&](uint16_t e) -> const std::string& { return n.props[size_t(n.key_order[e])].first; };
  auto byte = [&](uint16_t e) { return s.pos < key(e).size() ? int(uint8_t(key(e)[s.pos])) : -1; };
  auto may_come = [&](uint16_t e) { return n.key_order[e] >= first && n.key_order[e] <= last; };
  uint16_t lo = s.lo;
  while (lo < s.hi && byte(lo) != c) ++lo;
  uint16_t hi = lo;
  while (hi < s.hi && byte(hi) == c) ++hi;
  uint16_t e = lo;
  while (e < hi && !may_come(e)) ++e;
  if (e == hi) return;
  s.lo = lo, s.hi = hi, ++s.pos;
  if (key(e).size() == s.pos) f.i = uint16_t(n.key_order[e]), f.phase = 3, s.pos = s.lo = s.hi = 0;
  out.add(t);
}

// An integer from n.min_value to n.max_value, byte c ('-' or a digit) taken by JsonNumber:
// true if the sign and digits so far (s.neg, s.mag of s.digits digits) still begin one. The
// magnitudes that m extends to are [m 10^j, m 10^j + 10^j - 1] for j >= 0 (only 0 itself
// after a leading 0; any after a lone '-').
bool SchemaMachine::integer_digit(const SchemaNode& n, Scalar& s, uint8_t c) {
  if (c == '-') return s.neg = true, n.min_value <= 0;  // -0 is 0
  const uint64_t kLimit = uint64_t(1) << 63;            // every magnitude in range is at most this
  if (s.mag > kLimit / 10) return false;
  s.mag = s.mag * 10 + uint64_t(c - '0'), ++s.digits;
  // The signed range as magnitudes: [lo, hi] of this sign (empty when lo > hi).
  auto mag_of = [](int64_t v) { return v < 0 ? uint64_t(-(v + 1)) + 1 : uint64_t(v); };
  uint64_t lo, hi;
  if (s.neg) {
    if (n.min_value > 0) return false;
    lo = n.max_value >= 0 ? 0 : mag_of(n.max_value), hi = mag_of(n.min_value);
  } else {
    if (n.max_value < 0) return false;
    lo = n.min_value <= 0 ? 0 : uint64_t(n.min_value), hi = uint64_t(n.max_value);
  }
  if (s.mag == 0) return lo == 0;  // a leading 0 is the whole number
  unsigned __int128 a = s.mag, w = 1;
  for (int j = s.digits; j <= JsonNumber::kMaxIntDigits && a <= kLimit; ++j, a *= 10, w *= 10)
    if (a <= hi && a + w - 1 >= lo) return true;
  return false;
}

bool SchemaMachine::integer_in_range(const SchemaNode& n, const Scalar& s) {
  constexpr uint64_t kTop = uint64_t(1) << 63;
  if (!s.neg || s.mag == 0) return s.mag < kTop && int64_t(s.mag) >= n.min_value && int64_t(s.mag) <= n.max_value;
  if (s.mag > kTop) return false;
  const int64_t v = s.mag == kTop ? INT64_MIN : -int64_t(s.mag);
  return v >= n.min_value && v <= n.max_value;
}

void SchemaMachine::step(Thread t, uint8_t c, Out& out) const {
  if (t.depth == 0) return;  // complete: nothing more
  Frame& f = t.frames[t.depth - 1];
  const SchemaNode& n = schema_->nodes[size_t(f.node)];
  Scalar& s = t.s;
  switch (n.kind) {
    case K::Object: {
      const int32_t size = int32_t(n.props.size());
      switch (f.phase) {
        case 0:
          if (c == '{') f.phase = 1, out.add(t);
          return;
        case 1:  // i: the first property that may come next (0: right after '{')
          if (whitespace(t, c)) return out.add(t);
          if (c == '}' && f.i == 0 && n.next_required[0] == size) return end_value(t, c, false, out);
          if (c != '"' || f.i >= size) return;
          f.phase = 2, s.pos = 0, s.lo = 0, s.hi = uint16_t(size);
          return key_byte(t, n, c, out);
        case 2: return key_byte(t, n, c, out);
        case 3:
          if (whitespace(t, c)) return out.add(t);
          if (c == ':') f.phase = 4, out.add(t);
          return;
        case 4:
          if (whitespace(t, c)) return out.add(t);
          f.phase = 5;
          return start_value(t, n.props[f.i].second, c, out);
        default:  // 5
          if (whitespace(t, c)) return out.add(t);
          if (c == ',' && f.i + 1 < size) {
            ++f.i, f.phase = 1;
            return out.add(t);
          }
          if (c == '}' && n.next_required[size_t(f.i) + 1] == size) end_value(t, c, false, out);
          return;
      }
    }
    case K::Array: {
      const bool more = n.items >= 0 && (n.max_items < 0 || f.i < n.max_items);
      switch (f.phase) {
        case 0:
          if (c == '[') f.phase = 1, out.add(t);
          return;
        case 1:
        case 3:
          if (whitespace(t, c)) return out.add(t);
          if (f.phase == 1 && c == ']' && n.min_items == 0) return end_value(t, c, false, out);
          if (!more) return;
          ++f.i, f.phase = 2;
          return start_value(t, n.items, c, out);
        default:  // 2
          if (whitespace(t, c)) return out.add(t);
          if (c == ',' && more) f.phase = 3, out.add(t);
          if (c == ']' && f.i >= n.min_items) end_value(t, c, false, out);
          return;
      }
    }
    case K::String: {
      if (f.phase == 0) {
        if (c == '"') f.phase = 1, out.add(t);
        return;
      }
      if (n.regex >= 0) {  // raw bytes only (regex_dfa.h): the DFA takes no '\\' and no '"'
        const RegexDfa& re = schema_->regexes[size_t(n.regex)];
        if (c == '"' && s.str.mode == 0) return re.accept[s.re] ? end_value(t, c, false, out) : void();
        const uint16_t to = re.next[size_t(s.re) * 256 + c];
        if (to == 0 || s.str.feed(c) != JsonString::Step::Took) return;
        s.re = uint16_t(to - 1);
        return out.add(t);
      }
      // Outside an escape or a UTF-8 sequence, c closes the string or begins a character.
      const bool counted = n.min_items > 0 || n.max_items >= 0, begins = s.str.mode == 0 && c != '"';
      if (counted && s.str.mode == 0) {
        if (c == '"' && s.chars < n.min_items) return;
        if (c != '"' && n.max_items >= 0 && s.chars >= n.max_items) return;
      }
      switch (s.str.feed(c)) {
        case JsonString::Step::Took:
          // Counted up to the larger bound only, so that longer strings share a state.
          if (counted && begins && s.chars < std::max(n.min_items, n.max_items)) ++s.chars;
          return out.add(t);
        case JsonString::Step::Closed: return end_value(t, c, false, out);
        case JsonString::Step::Refused: return;
      }
      return;
    }
    case K::Number:
    case K::Integer: {
      const bool bounded = n.kind == K::Integer && (n.min_value != INT64_MIN || n.max_value != INT64_MAX);
      if (f.phase == 0) {
        if (!s.num.start(c)) return;
        if (bounded && !integer_digit(n, s, c)) return;
        f.phase = 1;
        return out.add(t);
      }
      switch (s.num.feed(c, /*integer=*/n.kind == K::Integer)) {
        case JsonNumber::Step::Took:
          if (bounded && !integer_digit(n, s, c)) return;
          return out.add(t);
        case JsonNumber::Step::Ended:  // c comes after the number
          if (bounded && !integer_in_range(n, s)) return;
          return end_value(t, c, true, out);
        case JsonNumber::Step::Refused: return;
      }
      return;
    }
    case K::Literal: {
      // Sorted, the literals that begin with the bytes so far are a range, and one that is
      // exactly those bytes (a number that a longer one extends: 1 and 10) comes first in it.
      const std::vector<std::string>& lits = n.literals;
      if (f.phase == 0) f.phase = 1, s.lo = 0, s.hi = uint16_t(lits.size());
      uint16_t lo = s.lo;
      if (lits[lo].size() == s.pos) {  // one is whole: it may end before c
        end_value(t, c, true, out);
        ++lo;
      }
      while (lo < s.hi && uint8_t(lits[lo][s.pos]) != c) ++lo;
      uint16_t hi = lo;
      while (hi < s.hi && uint8_t(lits[hi][s.pos]) == c) ++hi;
      if (lo == hi) return;
      s.lo = lo, s.hi = hi, ++s.pos;
      // Whole and extended by none: the value ends with c.
      if (hi - lo == 1 && lits[lo].size() == s.pos) return end_value(t, c, false, out);
      return out.add(t);
    }
    case K::Wrap: {
      const std::string& before = n.literals[0];
      const std::string& after = n.literals[1];
      if (f.phase == 0 && s.pos == before.size()) f.phase = 1;  // (an empty text before)
      if (f.phase == 0) {
        if (c != uint8_t(before[s.pos])) return;
        if (++s.pos == before.size()) f.phase = 1, s.pos = 0;
        return out.add(t);
      }
      if (f.phase == 1) {
        f.phase = 2;
        return start_value(t, n.items, c, out);
      }
      if (f.phase == 2 && s.pos == 0 && n.literals.size() > 2) {  // after a value: another may follow
        Thread u = t;
        u.frames[u.depth - 1].phase = 3;
        step(u, c, out);
      }
      if (f.phase == 3) {
        const std::string& between = n.literals[2];
        if (c != uint8_t(between[s.pos])) return;
        if (++s.pos == between.size()) f.phase = 1, s.pos = 0;
        return out.add(t);
      }
      if (c != uint8_t(after[s.pos])) return;
      if (++s.pos == after.size()) return end_value(t, c, false, out);
      return out.add(t);
    }
    case K::AnyOf: return;  // never on a stack
  }
}

}  // namespace tf

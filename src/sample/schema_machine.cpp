#include "sample/schema_machine.h"

#include <algorithm>
#include <cstring>

#include "sample/json_machine.h"

namespace tf {

// Phases of a frame, by its node's kind:
//   Object   0 before '{'; 1 a key (or '}' when it has no properties); 2 in key i (Scalar::pos
//            bytes matched); 3 before ':'; 4 before value i; 5 after value i (',' or '}')
//   Array    0 before '['; 1 an item or ']'; 2 after item i (',' or ']'); 3 an item after ','
//   String   0 before '"'; 1 inside (Scalar::str)
//   Number / Integer  0 the first byte; 1 inside (Scalar::num)
//   Literal  0 before its first byte; 1 Scalar::pos bytes matched by literals [lo, hi)
// AnyOf nodes never sit on a stack: start_value replaces them by their alternatives.
namespace {

using K = SchemaNode::Kind;
enum Num : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kE, kESign, kExp };

bool is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

int hex_value(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

// The root's frames (one thread per alternative when it is an anyOf), before any byte.
SchemaMachine::SchemaMachine(const JsonSchema& schema) : schema_(&schema) {
  Out out;
  push_alternatives(Thread{}, schema.root, out);
  n_ = out.n;
  for (int i = 0; i < n_; ++i) t_[i] = out.t[i];
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
  for (int i = 0; i < n_; ++i) {
    t_[i].depth = o.t_[i].depth;
    t_[i].s = o.t_[i].s;
    std::memcpy(t_[i].frames, o.t_[i].frames, sizeof(Frame) * o.t_[i].depth);
  }
  return *this;
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
  auto mix = [&](uint64_t v) { h = (h ^ v) * 0x100000001b3ull + (h >> 29); };
  for (int i = 0; i < n_; ++i) {
    const Thread& t = t_[i];
    mix(t.depth);
    mix(uint64_t(t.s.pos) | uint64_t(t.s.str) << 16 | uint64_t(t.s.hex_n) << 24 | uint64_t(t.s.hex_v) << 32 |
        uint64_t(t.s.num) << 48 | uint64_t(t.s.num_n) << 56);
    mix(uint64_t(t.s.ws) | uint64_t(t.s.nl) << 8 | uint64_t(t.s.low) << 16 | uint64_t(t.s.utf8_left) << 24 |
        uint64_t(t.s.utf8_lo) << 32 | uint64_t(t.s.utf8_hi) << 40 | uint64_t(t.s.lo) << 48);
    mix(t.s.hi);
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
  t[n].depth = th.depth;
  t[n].s = th.s;
  std::memcpy(t[n].frames, th.frames, sizeof(Frame) * th.depth);
  ++n;
}

bool SchemaMachine::feed(uint8_t c) {
  Out out;
  for (int i = 0; i < n_; ++i) step(t_[i], c, out);
  if (out.n == 0) return false;
  n_ = out.n;
  for (int i = 0; i < n_; ++i) {
    t_[i].depth = out.t[i].depth;
    t_[i].s = out.t[i].s;
    std::memcpy(t_[i].frames, out.t[i].frames, sizeof(Frame) * out.t[i].depth);
  }
  return true;
}

// Whitespace in an object or array: its nesting is the depth of the stack.
bool SchemaMachine::whitespace(Thread& t, uint8_t c) { return JsonMachine::take_whitespace(c, t.depth, t.s.ws, t.s.nl); }

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

void SchemaMachine::step(Thread t, uint8_t c, Out& out) const {
  if (t.depth == 0) return;  // complete: nothing more
  Frame& f = t.frames[t.depth - 1];
  const SchemaNode& n = schema_->nodes[size_t(f.node)];
  Scalar& s = t.s;
  switch (n.kind) {
    case K::Object:
      switch (f.phase) {
        case 0:
          if (c == '{') f.phase = 1, out.add(t);
          return;
        case 1:
          if (whitespace(t, c)) return out.add(t);
          if (n.props.empty() && c == '}') return end_value(t, c, false, out);
          if (!n.props.empty() && c == '"') f.phase = 2, s.pos = 1, out.add(t);
          return;
        case 2: {
          const std::string& key = n.props[f.i].first;
          if (c != uint8_t(key[s.pos])) return;
          if (++s.pos == key.size()) f.phase = 3, s.pos = 0;
          return out.add(t);
        }
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
          if (f.i + 1 < int(n.props.size()) && c == ',') {
            ++f.i, f.phase = 1;
            return out.add(t);
          }
          if (f.i + 1 == int(n.props.size()) && c == '}') end_value(t, c, false, out);
          return;
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
      bool closed = false;
      if (!string_byte(s, c, closed)) return;
      return closed ? end_value(t, c, false, out) : out.add(t);
    }
    case K::Number:
    case K::Integer: {
      const bool digit = c >= '0' && c <= '9';
      const bool real = n.kind == K::Number;
      if (f.phase == 0) {
        f.phase = 1;
        if (c == '-') s.num = kMinus, s.num_n = 0;
        else if (c == '0') s.num = kZero, s.num_n = 1;
        else if (c >= '1' && c <= '9') s.num = kInt, s.num_n = 1;
        else return;
        return out.add(t);
      }
      switch (s.num) {
        case kMinus:
          if (!digit) return;
          s.num = c == '0' ? kZero : kInt, s.num_n = 1;
          return out.add(t);
        case kZero:
        case kInt:
          if (digit && s.num == kInt) {
            if (s.num_n >= JsonMachine::kMaxIntDigits) return;
            ++s.num_n;
            return out.add(t);
          }
          if (real && c == '.') return s.num = kDot, s.num_n = 0, out.add(t);
          if (real && (c == 'e' || c == 'E')) return s.num = kE, s.num_n = 0, out.add(t);
          break;
        case kDot:
          if (!digit) return;
          s.num = kFrac;
          return out.add(t);
        case kFrac:
          if (digit) return out.add(t);
          if (c == 'e' || c == 'E') return s.num = kE, out.add(t);
          break;
        case kE:
          if (c == '+' || c == '-') return s.num = kESign, out.add(t);
          [[fallthrough]];
        case kESign:
          if (!digit) return;
          s.num = kExp, s.num_n = 1;
          return out.add(t);
        default:  // kExp
          if (digit) {
            if (s.num_n >= JsonMachine::kMaxExpDigits) return;
            ++s.num_n;
            return out.add(t);
          }
          break;
      }
      return end_value(t, c, true, out);  // the number ended before c
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
    case K::AnyOf: return;  // never on a stack
  }
}

// As JsonMachine's strings: escapes, surrogate pairs, UTF-8 without overlong forms,
// surrogates or code points past U+10FFFF. `closed`: c was the closing quote.
bool SchemaMachine::string_byte(Scalar& s, uint8_t c, bool& closed) const {
  switch (s.str) {
    case 1:  // after '\'
      if (c == 'u') {
        s.str = 2, s.low = 0, s.hex_n = 0, s.hex_v = 0;
        return true;
      }
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
        s.str = 0;
        return true;
      }
      return false;
    case 2: return hex_digit(s, c);
    case 3:
      if (c != '\\') return false;
      s.str = 4;
      return true;
    case 4:
      if (c != 'u') return false;
      s.str = 2, s.low = 1, s.hex_n = 0, s.hex_v = 0;
      return true;
    case 5:
      if (c < s.utf8_lo || c > s.utf8_hi) return false;
      s.utf8_lo = 0x80, s.utf8_hi = 0xBF;
      if (--s.utf8_left == 0) s.str = 0;
      return true;
    default: break;
  }
  if (c == '"') {
    closed = true;
    return true;
  }
  if (c == '\\') {
    s.str = 1;
    return true;
  }
  if (c < 0x20) return false;
  if (c < 0x80) return true;
  uint8_t left = 0, lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    left = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    left = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    left = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return false;
  }
  s.str = 5, s.utf8_left = left, s.utf8_lo = lo, s.utf8_hi = hi;
  return true;
}

bool SchemaMachine::hex_digit(Scalar& s, uint8_t c) const {
  const int d = hex_value(c);
  if (d < 0) return false;
  if (s.low) {
    if (s.hex_n == 0 && d != 0xD) return false;
    if (s.hex_n == 1 && d < 0xC) return false;
  } else if (s.hex_n == 1 && s.hex_v == 0xD && d >= 0xC) {
    return false;
  }
  s.hex_v = uint16_t(s.hex_v * 16 + d);
  if (++s.hex_n < 4) return true;
  const bool high = !s.low && s.hex_v >= 0xD800 && s.hex_v <= 0xDBFF;
  s.str = high ? 3 : 0;
  s.low = 0, s.hex_n = 0, s.hex_v = 0;
  return true;
}

}  // namespace tf

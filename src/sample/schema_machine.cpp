#include "sample/schema_machine.h"

#include <cstring>

namespace tf {

// Phases of a frame, by its node's kind:
//   Object   0 before '{'; 1 a key (or '}' when it has no properties); 2 in key i (Scalar::pos
//            bytes matched); 3 before ':'; 4 before value i; 5 after value i (',' or '}')
//   Array    0 before '['; 1 an item or ']'; 2 after item i (',' or ']'); 3 an item after ','
//   String   0 before '"'; 1 inside (Scalar::str)
//   Number / Integer  0 the first byte; 1 inside (Scalar::num)
//   Literal  0 before its first byte; 1 Scalar::pos bytes matched by literals [lo, hi)
//   Wrap     0 in the text before (Scalar::pos); 1 the value; 2 in the text after
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
    case K::String:
      if (f.phase == 0) {
        if (c == '"') f.phase = 1, out.add(t);
        return;
      }
      switch (s.str.feed(c)) {
        case JsonString::Step::Took: return out.add(t);
        case JsonString::Step::Closed: return end_value(t, c, false, out);
        case JsonString::Step::Refused: return;
      }
      return;
    case K::Number:
    case K::Integer:
      if (f.phase == 0) {
        if (!s.num.start(c)) return;
        f.phase = 1;
        return out.add(t);
      }
      switch (s.num.feed(c, /*integer=*/n.kind == K::Integer)) {
        case JsonNumber::Step::Took: return out.add(t);
        case JsonNumber::Step::Ended: return end_value(t, c, true, out);  // c comes after the number
        case JsonNumber::Step::Refused: return;
      }
      return;
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
      if (c != uint8_t(after[s.pos])) return;
      if (++s.pos == after.size()) return end_value(t, c, false, out);
      return out.add(t);
    }
    case K::AnyOf: return;  // never on a stack
  }
}

}  // namespace tf

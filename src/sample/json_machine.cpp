#include "sample/json_machine.h"

namespace tf {

namespace {

constexpr std::string_view kLiterals[] = {"true", "false", "null"};

}  // namespace

size_t JsonMachine::hash() const {
  uint64_t h = stack_ * 0x9e3779b97f4a7c15ull;
  const uint64_t small[] = {uint64_t(mode_), depth_, ws_, indent_, key_, lit_, lit_pos_, num_.part, num_.n,
                            str_.bits()};
  for (uint64_t v : small) h = hash_mix(h, v);
  return size_t(h);
}

bool JsonMachine::feed(std::string_view s) {
  JsonMachine m = *this;
  for (char c : s)
    if (!m.feed(uint8_t(c))) return false;
  *this = m;
  return true;
}

bool JsonMachine::feed(uint8_t c) {
  const JsonMachine before = *this;
  bool ok = false;
  switch (mode_) {
    case Mode::Start: ok = c == '{' && open(false); break;
    case Mode::Value: ok = whitespace(c) || value_start(c); break;
    case Mode::ValueOrEnd: ok = whitespace(c) || (c == ']' ? close(true) : value_start(c)); break;
    case Mode::KeyOrEnd:
    case Mode::Key:
      if (whitespace(c)) {
        ok = true;
      } else if (c == '"') {
        mode_ = Mode::String, key_ = 1, str_ = {}, ok = true;
      } else if (c == '}' && mode_ == Mode::KeyOrEnd) {
        ok = close(false);
      }
      break;
    case Mode::Colon:
      ok = whitespace(c) || c == ':';
      if (c == ':') mode_ = Mode::Value;
      break;
    case Mode::AfterValue:
      if (whitespace(c)) {
        ok = true;
      } else if (c == ',') {
        mode_ = top_is_array() ? Mode::Value : Mode::Key, ok = true;
      } else if (c == ']' || c == '}') {
        ok = close(c == ']');
      }
      break;
    case Mode::String:
      switch (str_.feed(c)) {
        case JsonString::Step::Took: ok = true; break;
        case JsonString::Step::Closed:
          ok = true;
          str_ = {};
          if (key_) {
            mode_ = Mode::Colon, key_ = 0;
          } else {
            value_done();
          }
          break;
        case JsonString::Step::Refused: break;
      }
      break;
    case Mode::Literal:
      ok = c == uint8_t(kLiterals[lit_][lit_pos_]);
      if (ok && ++lit_pos_ == kLiterals[lit_].size()) value_done(), lit_ = 0, lit_pos_ = 0;
      break;
    case Mode::Number:
      switch (num_.feed(c, /*integer=*/false)) {
        case JsonNumber::Step::Took: ok = true; break;
        case JsonNumber::Step::Ended:  // c comes after the number
          num_ = {};
          value_done();
          ok = feed(c);
          break;
        case JsonNumber::Step::Refused: break;
      }
      break;
    case Mode::Done: break;
  }
  if (!ok) *this = before;  // the helpers may have moved part of the state
  return ok;
}

bool JsonMachine::value_start(uint8_t c) {
  switch (c) {
    case '{': return open(false);
    case '[': return open(true);
    case '"': mode_ = Mode::String, key_ = 0, str_ = {}; return true;
    case 't': mode_ = Mode::Literal, lit_ = 0, lit_pos_ = 1; return true;
    case 'f': mode_ = Mode::Literal, lit_ = 1, lit_pos_ = 1; return true;
    case 'n': mode_ = Mode::Literal, lit_ = 2, lit_pos_ = 1; return true;
    default:
      if (!num_.start(c)) return false;
      mode_ = Mode::Number;
      return true;
  }
}

bool JsonMachine::open(bool array) {
  if (depth_ >= kMaxDepth) return false;
  stack_ = array ? stack_ | (uint64_t(1) << depth_) : stack_ & ~(uint64_t(1) << depth_);
  ++depth_;
  mode_ = array ? Mode::ValueOrEnd : Mode::KeyOrEnd;
  return true;
}

bool JsonMachine::close(bool array) {
  if (depth_ == 0 || top_is_array() != array) return false;
  --depth_;
  stack_ &= ~(uint64_t(1) << depth_);  // equal states, equal bits
  value_done();
  return true;
}

// A value (scalar or container) ended: the top level is done, or its container goes on.
void JsonMachine::value_done() {
  mode_ = depth_ == 0 ? Mode::Done : Mode::AfterValue;
}

}  // namespace tf

// A byte-at-a-time recognizer of one JSON object (RFC 8259), for constrained decoding
// (OpenAI's response_format {"type": "json_object"}).
//
// feed() takes a byte only if the text so far stays a prefix of some complete JSON text
// whose top level is an object, so every state it reaches can still be completed: a
// constrained model can never talk itself into a dead end. Strings, numbers and whitespace
// follow json_lexemes.h (valid UTF-8 and surrogate pairs, which strict parsers such as
// nlohmann-json and Python's json require; numbers finite as doubles; whitespace bounded).
// Nesting deeper than kMaxDepth containers and whitespace before the object are refused.
// After the top-level object closes nothing more is taken (not even whitespace); complete()
// says so, and only then may generation end.
//
// The state is a small trivially copyable value; equal states accept the same
// continuations (the mask sets of token_constraint.h are kept per state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sample/json_lexemes.h"

namespace tf {

class JsonMachine {
 public:
  static constexpr int kMaxDepth = 64;

  // Takes c if the text stays a prefix of a JSON object; otherwise returns false and the
  // state is unchanged.
  bool feed(uint8_t c);
  // Every byte of s in turn; false (state unchanged) if any is refused.
  bool feed(std::string_view s);
  // The top-level object is closed: the text is one complete JSON object.
  bool complete() const { return mode_ == Mode::Done; }
  int depth() const { return depth_; }

  bool operator==(const JsonMachine&) const = default;
  size_t hash() const;

 private:
  enum class Mode : uint8_t {
    Start,       // before the top-level '{' (nothing may come before it)
    Value,       // a value must come (after ':' or an array's ',')
    ValueOrEnd,  // after '[': a value or ']'
    KeyOrEnd,    // after '{': a key or '}'
    Key,         // after an object's ',': a key
    Colon,       // after a key
    AfterValue,  // ',' or the container's closing bracket
    String,      // inside a string (key_ says which kind)
    Literal,     // inside true, false or null
    Number,      // inside a number
    Done,        // the top-level object is closed
  };

  bool value_start(uint8_t c);
  bool open(bool array);
  bool close(bool array);
  void value_done();
  bool whitespace(uint8_t c) { return take_json_whitespace(c, depth_, ws_, indent_); }
  bool top_is_array() const { return depth_ > 0 && ((stack_ >> (depth_ - 1)) & 1u); }

  // Every field is an integer, so = default compares them all and hash() reads them all.
  uint64_t stack_ = 0;  // bit d: container d (0 = outermost) is an array
  Mode mode_ = Mode::Start;
  uint8_t depth_ = 0;   // open containers
  uint8_t ws_ = 0, indent_ = 0;  // take_json_whitespace's run and indent
  uint8_t key_ = 0;     // the string being read is an object key
  uint8_t lit_ = 0, lit_pos_ = 0;  // Literal: which (0 true, 1 false, 2 null) and bytes matched
  JsonString str_;
  JsonNumber num_;
};

}  // namespace tf

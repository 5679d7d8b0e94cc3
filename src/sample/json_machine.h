// A byte-at-a-time recognizer of one JSON object (RFC 8259), for constrained decoding
// (OpenAI's response_format {"type": "json_object"}).
//
// feed() takes a byte only if the text so far stays a prefix of some complete JSON text
// whose top level is an object, so every state it reaches can still be completed: a
// constrained model can never talk itself into a dead end. That includes what RFC 8259
// leaves to parsers and strict ones (nlohmann-json, Python's json) reject: strings are valid
// UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF), and a \u escape of a high
// surrogate must be followed by one of a low surrogate. Limits keep generation bounded and
// every number finite as a double (strict parsers refuse 1e400): nesting deeper than kMaxDepth
// containers, whitespace before the object, whitespace between tokens other than one space
// (or tab) or one line break and an indentation of at most kIndentPerLevel bytes a level of
// nesting (compact and pretty-printed JSON both fit; a small model that falls into emitting
// whitespace token after token does not), more than kMaxIntDigits digits before a number's
// point and more than kMaxExpDigits in its exponent.
// After the top-level object closes nothing more is taken (not even whitespace); complete()
// says so, and only then may generation end.
//
// The state is a small trivially copyable value; equal states accept the same
// continuations (the mask cache of json_constraint.h keys on it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tf {

class JsonMachine {
 public:
  static constexpr int kMaxDepth = 64;
  static constexpr int kIndentPerLevel = 4;
  static constexpr int kMaxIntDigits = 20;  // below 1e20
  static constexpr int kMaxExpDigits = 2;   // so every number stays below 1e120

  // Takes c if the text stays a prefix of a JSON object; otherwise returns false and the
  // state is unchanged.
  bool feed(uint8_t c);
  // Every byte of s in turn; false (state unchanged) if any is refused.
  bool feed(std::string_view s);
  // The top-level object is closed: the text is one complete JSON object.
  bool complete() const { return mode_ == Mode::Done; }
  int depth() const { return depth_; }

  // The whitespace rule, shared with SchemaMachine: takes c if it continues the run between two
  // tokens at nesting `depth`. run: 0 none yet, 1 a space or tab (the run is full), 2 after
  // '\r' (a '\n' must follow), 3 after a line break (indentation, `indent` bytes so far). Any
  // other byte resets both and is refused.
  static bool take_whitespace(uint8_t c, int depth, uint8_t& run, uint8_t& indent);

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
    Escape,      // after '\' in a string
    Hex,         // in the 4 hex digits of a \u escape
    LowSlash,    // after a high surrogate's \uXXXX: '\' of the low surrogate's escape
    LowU,        // ... then its 'u'
    Utf8,        // inside a multi-byte UTF-8 sequence
    Literal,     // inside true, false or null
    Number,      // inside a number (num_ says where)
    Done,        // the top-level object is closed
  };
  enum class Num : uint8_t { Minus, Zero, Int, Dot, Frac, E, ESign, Exp };

  bool value_start(uint8_t c);
  bool open(bool array);
  bool close(bool array);
  void value_done();
  bool whitespace(uint8_t c);
  bool string_byte(uint8_t c);
  bool hex_digit(uint8_t c);
  bool number_byte(uint8_t c);
  bool top_is_array() const { return depth_ > 0 && ((stack_ >> (depth_ - 1)) & 1u); }

  // Every field is an integer, so = default compares them all and hash() reads them all.
  uint64_t stack_ = 0;  // bit d: container d (0 = outermost) is an array
  Mode mode_ = Mode::Start;
  uint8_t depth_ = 0;   // open containers
  uint8_t ws_ = 0;      // take_whitespace's run
  uint8_t nl_ = 0;      // ... and indent
  uint8_t key_ = 0;     // the string being read is an object key
  uint8_t low_ = 0;     // Hex: the escape must be a low surrogate (DC00-DFFF)
  uint8_t hex_n_ = 0;   // Hex: digits read
  uint16_t hex_v_ = 0;  // Hex: their value
  uint8_t utf8_left_ = 0;            // Utf8: continuation bytes still to come
  uint8_t utf8_lo_ = 0, utf8_hi_ = 0;  // Utf8: the range of the next one
  uint8_t lit_ = 0, lit_pos_ = 0;      // Literal: which (0 true, 1 false, 2 null) and bytes matched
  Num num_ = Num::Minus;
  uint8_t num_n_ = 0;  // Number: digits in the integer part or the exponent so far
};

}  // namespace tf

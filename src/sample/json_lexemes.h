// The pieces of JSON text both constrained-decoding machines (json_machine.h,
// schema_machine.h) read byte by byte: the inside of a string, a number, and whitespace
// between tokens. Each refuses a byte exactly when no completion of the text could contain it,
// so every state they reach can still be completed.
#pragma once

#include <cstdint>

namespace tf {

bool is_json_whitespace(uint8_t c);

// One step of the machines' state hashes: h with v mixed in.
inline uint64_t hash_mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull + (h >> 29); }

// After the opening quote: escapes (\uXXXX with surrogate pairs: a high surrogate must be
// followed by a low one, a lone low one is refused at its second digit) and valid UTF-8 (no
// overlong forms, no surrogates, nothing past U+10FFFF, refused at the first byte that rules
// them out); raw bytes below 0x20 are refused.
struct JsonString {
  enum class Step : uint8_t { Took, Closed, Refused };  // Closed: c was the closing quote
  Step feed(uint8_t c);

  uint8_t mode = 0;  // 0 plain, 1 after '\', 2 in \uXXXX, 3 '\' of a low surrogate, 4 its 'u', 5 in UTF-8
  uint8_t low = 0, hex_n = 0;  // 2: a low surrogate is due; digits read
  uint16_t hex_v = 0;
  uint8_t utf8_left = 0, utf8_lo = 0, utf8_hi = 0;  // 5: bytes to come, the next one's range
  bool operator==(const JsonString&) const = default;
  uint64_t bits() const;  // every field, for hashing
};

// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? with at most kMaxIntDigits digits before the
// point and kMaxExpDigits in the exponent (so every number stays below 1e120, finite as a
// double: strict parsers refuse 1e400); integer: no fraction or exponent.
struct JsonNumber {
  static constexpr int kMaxIntDigits = 20;
  static constexpr int kMaxExpDigits = 2;
  enum class Step : uint8_t { Took, Ended, Refused };  // Ended: the number ended before c
  // The first byte ('-' or a digit); false if c starts no number.
  bool start(uint8_t c);
  Step feed(uint8_t c, bool integer);

  uint8_t part = 0;  // where in the grammar (json_lexemes.cpp)
  uint8_t n = 0;     // digits of the integer part or the exponent so far
  bool operator==(const JsonNumber&) const = default;
};

// Whitespace between two tokens at nesting `depth`: one space or tab, or a line break ("\n" or
// "\r\n") and an indentation of at most kIndentPerLevel bytes a level (compact and
// pretty-printed JSON both fit; a model that falls into emitting whitespace token after token
// does not). run: 0 none yet, 1 the run is full, 2 after '\r', 3 after the line break (indent
// bytes so far). Any other byte resets both and is refused.
constexpr int kIndentPerLevel = 4;
bool take_json_whitespace(uint8_t c, int depth, uint8_t& run, uint8_t& indent);

}  // namespace tf

// UTF-8 helpers shared by the tokenizer: validation, Rust-style lossy conversion (what HF's
// decode does with String::from_utf8_lossy), and the "complete prefix" a streaming decoder
// may emit without cutting a character in half.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tf::tok {

// What the bytes at the start of a buffer are.
enum class Utf8Kind {
  Valid,      // one whole well-formed character of `len` bytes
  Invalid,    // an ill-formed maximal subpart of `len` (>= 1) bytes
  Truncated,  // the buffer ends inside a sequence that could still become well-formed
};
struct Utf8Step {
  size_t len;
  Utf8Kind kind;
};

// Classifies the sequence at the start of non-empty `s` (Unicode "maximal subpart" rules,
// as Rust's from_utf8_lossy and WHATWG use).
Utf8Step utf8_step(std::string_view s);

bool utf8_is_valid(std::string_view s);

// Each ill-formed maximal subpart (a truncated one at the end included) becomes U+FFFD.
std::string utf8_lossy(std::string_view s);

// Length of the longest prefix of `s` that does not end inside a character that later bytes
// could still complete. Ill-formed bytes count as complete (they will never become valid).
size_t utf8_complete_prefix(std::string_view s);

// Decodes the character at s[i] and advances i; `s` must be valid UTF-8 at i.
uint32_t utf8_next(std::string_view s, size_t& i);

void utf8_append(std::string& out, uint32_t cp);

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace tf::tok

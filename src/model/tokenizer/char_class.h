// The Unicode character classes Hugging Face `tokenizers` splits and normalizes by, with Rust's
// definitions (ICU answers the property questions):
//   is_whitespace   char::is_whitespace: the White_Space property
//   is_numeric      char::is_numeric: general category Nd, Nl or No
//   is_punctuation  ASCII punctuation (symbols such as $ + < = > ^ ` | ~ included) or general
//                   category P* (the Punctuation and BertPreTokenizer pre-tokenizers)
//   is_word         the regex crate's \w: Alphabetic, M*, Nd, Pc or Join_Control
//   is_mark         general category M* (StripAccents' combining marks)
#pragma once

#include <cstdint>

namespace tf::tok {

bool is_whitespace(uint32_t cp);
bool is_numeric(uint32_t cp);
bool is_punctuation(uint32_t cp);
bool is_word(uint32_t cp);
bool is_mark(uint32_t cp);

}  // namespace tf::tok

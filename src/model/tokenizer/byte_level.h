// GPT-2's reversible byte <-> unicode map, which byte-level BPE (GPT-2, Llama-3, Qwen) uses
// so that every byte has a printable one-character token: the bytes '!'..'~', '¡'..'¬' and
// '®'..'ÿ' stand for themselves, the other 68 bytes map in order to U+0100, U+0101, ...
// (space becomes 'Ġ' U+0120, newline 'Ċ' U+010A).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tf::tok {

// The UTF-8 encoding of the character that stands for byte b.
std::string_view byte_to_unicode(uint8_t b);

// The byte that code point cp stands for, or -1 if cp is not in the map's image.
int unicode_to_byte(uint32_t cp);

// Maps every byte of `bytes` to its character (appending to `out`).
void bytes_to_unicode(std::string_view bytes, std::string& out);

// HF's ByteLevel decoder for one token: if every character of `token` is in the map's
// image, the bytes they stand for; otherwise the token's own UTF-8 bytes unchanged.
std::string unicode_to_bytes(std::string_view token);

}  // namespace tf::tok

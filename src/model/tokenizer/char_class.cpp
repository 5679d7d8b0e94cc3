#include "model/tokenizer/char_class.h"

#include <unicode/uchar.h>

namespace tf::tok {

namespace {

bool in_category(uint32_t cp, uint32_t mask) { return (U_MASK(u_charType(UChar32(cp))) & mask) != 0; }

}  // namespace

bool is_whitespace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return u_hasBinaryProperty(UChar32(cp), UCHAR_WHITE_SPACE);
}

bool is_numeric(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return in_category(cp, U_GC_N_MASK);
}

bool is_punctuation(uint32_t cp) {
  if (cp < 0x80) return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
                        (cp >= 0x7B && cp <= 0x7E);
  return in_category(cp, U_GC_P_MASK);
}

bool is_word(uint32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z') || cp == '_';
  return u_hasBinaryProperty(UChar32(cp), UCHAR_ALPHABETIC) || u_hasBinaryProperty(UChar32(cp), UCHAR_JOIN_CONTROL) ||
         in_category(cp, U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK);
}

bool is_mark(uint32_t cp) { return cp >= 0x80 && in_category(cp, U_GC_M_MASK); }

}  // namespace tf::tok

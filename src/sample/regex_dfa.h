// A JSON Schema "pattern" (or a built-in "format") compiled to a DFA over the bytes of a JSON
// string's inside, for SchemaMachine, or a whole output's pattern (vLLM's guided_regex and
// guided_choice) for RegexMachine: one 16-bit state, a table lookup a byte.
//
// Written here rather than taken from a library: constrained decoding must know, byte by byte,
// whether some completion can still match (a prefix test) and hold the state in a few bytes that
// machines copy and hash; PCRE2 and RE2 match whole texts and expose no such state.
//
// The subset (ECMA-262 syntax, as JSON Schema says): literals (UTF-8 too), escapes (\d \w \s
// \D \W \S, \n \t \r \f \v, \xHH, \uHHHH (a class takes ASCII ones only), and any punctuation
// escaped), '.', character classes with ranges and negation (ASCII members; a negated class,
// '.', \D, \W and \S also match every non-ASCII character), groups ( ... ), (?: ... ) and
// (?<name> ... ), '|', and the quantifiers * + ? {n} {n,} {n,m} (lazy forms match the same
// set). A pattern is unanchored unless it begins with '^' / ends with '$'; those two apply to
// every alternative ("^a|b$" as "^(?:a|b)$": stricter than ECMA-262, so what is written still
// matches). Refused, naming the construct: back references, lookaround, \b, \p{...}, non-ASCII
// class members, anchors elsewhere, and patterns whose automaton would pass kMaxNfaStates or
// kMaxDfaStates or take more than a bounded number of steps to build.
//
// Inside a JSON string the value's characters are written as raw bytes: the DFA never takes
// '"', '\\' or a byte below 0x20, so a pattern that matches only with one of those (a quote, a
// backslash, a line break) is refused, and the strings written are those the pattern matches
// without them (RegexUse below). Every state the DFA keeps can still reach a match (states that
// cannot are removed), so a constrained string never ends in a dead end. Multi-byte characters
// are matched as their UTF-8 bytes (SchemaMachine's JsonString refuses invalid UTF-8 beside it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tf {

struct RegexDfa {
  static constexpr int kMaxNfaStates = 8192;
  static constexpr int kMaxDfaStates = 4096;
  // next[s * 256 + b]: the state after byte b in state s, plus one (0: b is refused). State 0
  // is the start.
  std::vector<uint16_t> next;
  std::vector<uint8_t> accept;  // per state: the bytes so far match
  int n_states() const { return int(accept.size()); }
};

// Where the matched text goes: inside a JSON string (the raw bytes above; the pattern searched
// for, unless anchored), or as a whole output text (Text: any byte but NUL; the whole text
// must match, as vLLM's guided_regex, whether or not the pattern has '^' and '$').
enum class RegexUse : uint8_t { JsonString, Text };

// Throws tf::Error("<what>: <why>") for anything outside the subset.
RegexDfa compile_regex(std::string_view pattern, const std::string& what, RegexUse use = RegexUse::JsonString);

// s with the pattern syntax characters escaped: a pattern that matches exactly s.
std::string regex_escape(std::string_view s);

// A constrained-decoding machine (token_constraint.h) for RegexUse::Text: the output is a
// prefix of a text the DFA matches; complete once it matches.
class RegexMachine {
 public:
  explicit RegexMachine(const RegexDfa& dfa) : dfa_(&dfa) {}  // the DFA must outlive the machine
  bool feed(uint8_t c) {
    const uint16_t to = dfa_->next[size_t(state_) * 256 + c];
    if (to == 0) return false;
    state_ = uint16_t(to - 1);
    return true;
  }
  bool feed(std::string_view s) {  // all or nothing
    const uint16_t at = state_;
    for (char c : s)
      if (!feed(uint8_t(c))) return state_ = at, false;
    return true;
  }
  bool complete() const { return dfa_->accept[state_] != 0; }
  bool operator==(const RegexMachine& o) const { return dfa_ == o.dfa_ && state_ == o.state_; }
  size_t hash() const { return state_; }

 private:
  const RegexDfa* dfa_;
  uint16_t state_ = 0;
};

// The pattern of a built-in "format" ("date", "time", "date-time", "uuid", "email", "ipv4"), or
// "" when there is none.
std::string format_pattern(std::string_view format);

}  // namespace tf

// compile_regex (a JSON Schema pattern to a DFA over a string's raw bytes) against std::regex
// with the ECMAScript grammar as the reference: every string of a small alphabet up to a length
// is taken whole by the DFA exactly when std::regex_search finds the pattern in it (unanchored
// unless ^ / $), and random walks through the DFA's allowed bytes end in strings that match.
// Then the built-in formats on known good and bad values, and the refusals, each naming what.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <regex>
#include <string>

#include "core/error.h"
#include "sample/regex_dfa.h"

namespace tf {
namespace {

// 0: refused at some byte; 1: taken but not a match; 2: a match.
int walk(const RegexDfa& d, const std::string& s) {
  int st = 0;
  for (char c : s) {
    const uint16_t to = d.next[size_t(st) * 256 + uint8_t(c)];
    if (to == 0) return 0;
    st = to - 1;
  }
  return d.accept[size_t(st)] ? 2 : 1;
}

void all_strings(const std::string& alphabet, size_t max_len, std::string& s, const std::function<void()>& f) {
  f();
  if (s.size() == max_len) return;
  for (char c : alphabet) {
    s.push_back(c);
    all_strings(alphabet, max_len, s, f);
    s.pop_back();
  }
}

TEST(RegexDfa, AgreesWithStdRegexOnEveryShortString) {
  const std::pair<const char*, const char*> cases[] = {
      {"^a+b?$", "abc"},          {"ab|ba", "abc"},         {"^(?:ab){1,2}c*$", "abc"}, {"^[a-c]{2,3}$", "abcd"},
      {"^[^b]*b$", "abc"},        {"^\\d{2}-\\d$", "12-a"}, {"^a.c$", "abc "},          {"c$", "abc"},
      {"^(a|bc)+$", "abc"},       {"^\\w\\W$", "a-_ "},     {"^(a)b{0,1}$", "ab"},  {"^[-a]+$", "a-b"},
      {"^a\\.b$", "a.b"},         {"^[\\d\\-]+$", "1-a"},   {"^x{3,}$", "xy"},          {"^\\x61\\u0062$", "abc"},
      {"^[^]$", "ab"},          {"^a*?b+?$", "ab"},         {"b", "ab"},
  };
  for (const auto& [pattern, alphabet] : cases) {
    SCOPED_TRACE(pattern);
    const RegexDfa d = compile_regex(pattern, "p");
    const std::regex ref(pattern, std::regex::ECMAScript);
    std::string s;
    int n_match = 0;
    all_strings(alphabet, 6, s, [&] {
      const bool want = std::regex_search(s, ref);
      const int got = walk(d, s);
      EXPECT_EQ(got == 2, want) << "'" << s << "'";
      n_match += want;
    });
    EXPECT_GT(n_match, 0);
  }
}

// The DFA keeps no dead state: from anywhere on a random walk, a match can still be reached,
// and the walks that stop at an accepting state are matches for std::regex.
TEST(RegexDfa, RandomWalksEndInMatches) {
  std::mt19937 rng(3);
  for (const char* pattern : {"^[A-Z][a-z]{2,5}(?: [A-Z][a-z]+)?$", "^\\d{3}-\\d{4}$", "x[0-9]+y", "^(?:ab|a)*c$"}) {
    SCOPED_TRACE(pattern);
    const RegexDfa d = compile_regex(pattern, "p");
    const std::regex ref(pattern, std::regex::ECMAScript);
    for (int run = 0; run < 200; ++run) {
      int st = 0;
      std::string s;
      for (int step = 0; step < 200; ++step) {
        if (d.accept[size_t(st)] && rng() % 4 == 0) break;
        std::vector<int> ok;
        for (int b = 0; b < 128; ++b)
          if (d.next[size_t(st) * 256 + size_t(b)]) ok.push_back(b);
        if (ok.empty()) {  // nothing may follow: then this is a match
          ASSERT_TRUE(d.accept[size_t(st)]) << "dead end after '" << s << "'";
          break;
        }
        const int b = ok[rng() % ok.size()];
        s.push_back(char(b));
        st = d.next[size_t(st) * 256 + size_t(b)] - 1;
      }
      if (!d.accept[size_t(st)]) continue;
      EXPECT_TRUE(std::regex_search(s, ref)) << s;
    }
  }
}

// Raw bytes only: a quote, a backslash or a control character is never taken, and a pattern that
// needs one is refused; non-ASCII characters go through as UTF-8.
TEST(RegexDfa, OnlyBytesAStringHoldsRaw) {
  const RegexDfa any = compile_regex("^.*$", "p");
  EXPECT_EQ(walk(any, "a\"b"), 0);
  EXPECT_EQ(walk(any, "a\\b"), 0);
  EXPECT_EQ(walk(any, "a\tb"), 0);
  EXPECT_EQ(walk(any, "caf\xc3\xa9 \xe2\x82\xac"), 2);
  const RegexDfa e = compile_regex("^\xc3\xa9+[^a]$", "p");
  EXPECT_EQ(walk(e, "\xc3\xa9\xc3\xa9\xf0\x9f\x98\x80"), 2);
  EXPECT_EQ(walk(e, "\xc3\xa9" "a"), 0);
  EXPECT_EQ(walk(e, "\xc3\xa9"), 1);
  EXPECT_EQ(walk(compile_regex("^a(\"|b)$", "p"), "a\""), 0);  // the quote's branch is gone
  EXPECT_EQ(walk(compile_regex("^a(\"|b)$", "p"), "ab"), 2);
}

// A named group is a group (std::regex has none to compare with).
TEST(RegexDfa, NamedGroupIsAGroup) {
  const RegexDfa named = compile_regex("^(?<year>\\d{2})+$", "p"), plain = compile_regex("^(\\d{2})+$", "p");
  for (const char* s : {"12", "1234", "123", "", "12a"}) EXPECT_EQ(walk(named, s), walk(plain, s)) << s;
}

TEST(RegexDfa, Formats) {
  auto fmt = [](const char* f) { return compile_regex(format_pattern(f), f); };
  const RegexDfa date = fmt("date"), dt = fmt("date-time"), time = fmt("time"), uuid = fmt("uuid"),
                 email = fmt("email"), ip = fmt("ipv4");
  for (const char* ok : {"2024-12-31", "1999-02-29", "2030-04-30", "0001-01-01"}) EXPECT_EQ(walk(date, ok), 2) << ok;
  for (const char* bad : {"2024-13-01", "2024-04-31", "2024-02-30", "2024-00-10", "24-01-01", "2024-1-01"})
    EXPECT_NE(walk(date, bad), 2) << bad;
  for (const char* ok : {"2024-05-06T07:08:09Z", "2024-05-06t23:59:60.123+05:30", "2024-05-06T00:00:00-00:00"})
    EXPECT_EQ(walk(dt, ok), 2) << ok;
  for (const char* bad : {"2024-05-06 07:08:09Z", "2024-05-06T24:00:00Z", "2024-05-06T07:08:09", "2024-05-06T07:08Z"})
    EXPECT_NE(walk(dt, bad), 2) << bad;
  EXPECT_EQ(walk(time, "12:34:56.5Z"), 2);
  EXPECT_EQ(walk(uuid, "123e4567-e89b-12d3-a456-426614174000"), 2);
  EXPECT_NE(walk(uuid, "123e4567-e89b-12d3-a456-42661417400"), 2);
  EXPECT_NE(walk(uuid, "123e4567e89b12d3a456426614174000"), 2);
  EXPECT_EQ(walk(email, "ada.l+x@example.co.uk"), 2);
  for (const char* bad : {"ada@", "@example.com", "ada@example", "a b@example.com"}) EXPECT_NE(walk(email, bad), 2) << bad;
  EXPECT_EQ(walk(ip, "192.168.0.255"), 2);
  for (const char* bad : {"256.1.1.1", "1.2.3", "01.2.3.4", "1.2.3.4.5"}) EXPECT_NE(walk(ip, bad), 2) << bad;
  EXPECT_EQ(format_pattern("uri"), "");
}

// RegexUse::Text (guided_regex): the whole text must match, '^' / '$' or not, and any byte but
// NUL may be written; RegexMachine takes bytes as the DFA does. regex_escape gives a pattern
// that matches exactly its string.
TEST(RegexDfa, WholeTextsAndTheMachine) {
  for (const char* p : {"ab|c", "^ab|c$", "(?:ab|c)"}) {
    const RegexDfa d = compile_regex(p, "p", RegexUse::Text);
    EXPECT_EQ(walk(d, "ab"), 2) << p;
    EXPECT_EQ(walk(d, "c"), 2) << p;
    EXPECT_EQ(walk(d, "abc"), 0) << p;
    EXPECT_EQ(walk(d, "xab"), 0) << p;
  }
  const RegexDfa q = compile_regex("\"[^\"]*\"\n\\\\", "p", RegexUse::Text);
  EXPECT_EQ(walk(q, "\"a\tb\"\n\\"), 2);
  RegexMachine m(q);
  EXPECT_FALSE(m.complete());
  EXPECT_TRUE(m.feed(std::string_view("\"x\"")));
  EXPECT_FALSE(m.feed(std::string_view("\n!")));  // all or nothing
  EXPECT_TRUE(m.feed(std::string_view("\n\\")));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.feed(uint8_t('x')));
  RegexMachine a(q), b(q);
  EXPECT_TRUE(a == b);
  EXPECT_TRUE(a.feed(uint8_t('"')));
  EXPECT_FALSE(a == b);
  for (const std::string lit : {"a.b*c", "(x)[y]{2}", "1+1=2?", "^$|\\/-", "caf\xc3\xa9 \"q\""}) {
    const RegexDfa d = compile_regex(regex_escape(lit), "p", RegexUse::Text);
    EXPECT_EQ(walk(d, lit), 2) << lit;
    EXPECT_EQ(walk(d, lit + "x"), 0) << lit;
    EXPECT_TRUE(std::regex_match(lit, std::regex(regex_escape(lit), std::regex::ECMAScript))) << lit;
  }
}

TEST(RegexDfa, RefusesWhatItCannotHold) {
  const std::pair<const char*, const char*> cases[] = {
      {"(a)\\1", "the escape \\1"},        {"a(?=b)", "lookaround"},          {"\\bword", "the escape \\b"},
      {"\\p{L}", "the escape \\p"},        {"(ab", "without its ')'"},        {"ab)", "an unmatched ')'"},
      {"a{3,2}", "m below n"},             {"[\xc3\xa9]", "non-ASCII member"}, {"[z-a]", "end comes before"},
      {"*a", "nothing to repeat"},         {"a^b", "'^' or '$' inside"},      {"^\"$", "matches no string"},
      {"a{2000}", "above 1000"},           {"[ab", "without its ']'"},        {"\\ud800", "surrogate"},
      {"(?:a{1000}){1000}", "would pass"}, {"^[]a$", "matches no string"},
  };
  for (const auto& [pattern, want] : cases) {
    SCOPED_TRACE(pattern);
    try {
      compile_regex(pattern, "where");
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("where: ", 0), 0u) << e.what();
    }
  }
}

}  // namespace
}  // namespace tf

#include "sample/stop_matcher.h"

#include <gtest/gtest.h>

#include <random>

namespace tf {
namespace {

// Pushes pieces, returns each push's output, then the flush (if not stopped) as the last entry.
std::vector<std::string> run(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::vector<std::string> out;
  for (const std::string& p : pieces) out.push_back(m.push(p));
  out.push_back(m.flush());
  return out;
}

TEST(SampleStopMatcher, StopSplitAcrossPieces) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("Hello ST"), "Hello ");  // "ST" may begin "STOP"
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push("O"), "");
  EXPECT_EQ(m.push("P and more"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "STOP");
  EXPECT_EQ(m.push("even more"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(SampleStopMatcher, TextBeforeStopEmittedStopAndAfterNot) {
  StopMatcher m({"</s>"});
  EXPECT_EQ(m.push("abc</s>def"), "abc");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("ghi"), "");
  EXPECT_EQ(m.flush(), "");
  StopMatcher at_start({"</s>"});
  EXPECT_EQ(at_start.push("</s>"), "");
  EXPECT_TRUE(at_start.stopped());
}

TEST(SampleStopMatcher, HeldPrefixReleasedWhenNotAStop) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("x S"), "x ");
  EXPECT_EQ(m.push("T"), "");      // "ST" held
  EXPECT_EQ(m.push("ART"), "START");  // "STA" is no prefix of "STOP"
  EXPECT_EQ(m.push("S"), "");
  EXPECT_EQ(m.push("S"), "S");     // "SS": the first S is released, the second held
  EXPECT_EQ(m.push("TO"), "");
  EXPECT_EQ(m.push("!"), "STO!");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.flush(), "");
}

TEST(SampleStopMatcher, MultipleStopStrings) {
  StopMatcher m({"\n\n", "END"});
  EXPECT_EQ(m.push("a\n"), "a");
  EXPECT_EQ(m.push("b E"), "\nb ");
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("D!"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "END");

  StopMatcher n({"\n\n", "END"});
  EXPECT_EQ(n.push("one\n"), "one");
  EXPECT_EQ(n.push("\ntwo END"), "");
  EXPECT_EQ(n.matched(), "\n\n");
}

TEST(SampleStopMatcher, FirstEndingMatchWinsWhateverThePieces) {
  // "bc" completes before "abcd" does, in one piece or in two.
  StopMatcher one({"abcd", "bc"});
  EXPECT_EQ(one.push("xabcd"), "xa");
  EXPECT_EQ(one.matched(), "bc");
  StopMatcher two({"abcd", "bc"});
  EXPECT_EQ(run(two, {"xab", "cd"}), (std::vector<std::string>{"x", "a", ""}));
  EXPECT_EQ(two.matched(), "bc");
  // Same end: the longer (earlier-starting) one wins.
  StopMatcher same_end({"c", "abc"});
  EXPECT_EQ(same_end.push("zabc"), "z");
  EXPECT_EQ(same_end.matched(), "abc");
}

TEST(SampleStopMatcher, FlushWithoutStopReturnsHeldText) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("foo ST"), "foo ");
  EXPECT_EQ(m.flush(), "ST");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.matched(), "");
}

TEST(SampleStopMatcher, NoStopStringsPassEverythingThrough) {
  StopMatcher none({});
  EXPECT_EQ(none.push("S"), "S");
  EXPECT_EQ(none.push("anything"), "anything");
  EXPECT_EQ(none.flush(), "");
  StopMatcher empty_only({"", ""});
  EXPECT_EQ(empty_only.push("abc"), "abc");
  EXPECT_FALSE(empty_only.stopped());
  StopMatcher mixed({"", "Z"});
  EXPECT_EQ(mixed.push("abc"), "abc");
  EXPECT_EQ(mixed.push("xZy"), "x");
}

TEST(SampleStopMatcher, MultiByteUtf8) {
  StopMatcher m({"→終"});  // e2 86 92 e7 b5 82
  EXPECT_EQ(m.push("a→"), "a");
  EXPECT_EQ(m.push("終b"), "");
  EXPECT_TRUE(m.stopped());

  StopMatcher released({"éé"});
  EXPECT_EQ(released.push("é"), "");
  EXPECT_EQ(released.push("è"), "éè");
  // "è" (c3 a8) shares its lead byte with "é" (c3 a9) but is a whole character: not held.
  StopMatcher shared_lead({"é"});
  EXPECT_EQ(shared_lead.push("è"), "è");
  EXPECT_EQ(shared_lead.push("xéy"), "x");
}

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xe ? 3 : (b >> 3) == 0x1e ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    }
    i += len;
  }
  return true;
}

// Random texts over a small alphabet of 1- to 4-byte characters, cut into random pieces: the
// output is always the text up to the first-ending stop string (or all of it), and every
// emitted chunk is whole UTF-8 characters.
TEST(SampleStopMatcher, RandomPiecesMatchWholeTextRule) {
  const std::vector<std::string> alphabet = {"a", "b", "é", "€", "𝄞"};
  const std::vector<std::string> stops = {"ab€", "éé", "𝄞a𝄞", "bbbb"};
  std::mt19937_64 gen(77);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::string> chars;
    const size_t n_chars = 1 + gen() % 30;
    for (size_t i = 0; i < n_chars; ++i) chars.push_back(alphabet[gen() % alphabet.size()]);
    std::string text;
    for (const std::string& ch : chars) text += ch;

    // Expected: earliest end, then earliest start.
    size_t best_end = std::string::npos, best_start = 0;
    for (const std::string& s : stops) {
      const size_t pos = text.find(s);
      if (pos == std::string::npos) continue;
      if (pos + s.size() < best_end || (pos + s.size() == best_end && pos < best_start)) {
        best_end = pos + s.size();
        best_start = pos;
      }
    }
    const std::string expected = best_end == std::string::npos ? text : text.substr(0, best_start);

    StopMatcher m(stops);
    std::string got;
    size_t i = 0;
    while (i < chars.size()) {
      const size_t n = 1 + gen() % 4;
      std::string piece;
      for (size_t k = 0; k < n && i < chars.size(); ++k) piece += chars[i++];
      const std::string out = m.push(piece);
      ASSERT_TRUE(valid_utf8(out)) << "split character in output for text " << text;
      got += out;
    }
    got += m.flush();
    ASSERT_EQ(got, expected) << "text " << text;
    ASSERT_EQ(m.stopped(), best_end != std::string::npos) << "text " << text;
  }
}

}  // namespace
}  // namespace tf

// JsonMachine against nlohmann-json's parser: documents it writes are taken whole, broken ones
// are refused at the byte where they break, random byte strings it takes as complete parse
// as objects, and the limits (depth, whitespace runs, nothing after the object) hold.
#include "sample/json_machine.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <functional>
#include <random>
#include <string>

namespace tf {
namespace {

// The number of bytes of s the machine takes before it refuses one (s.size() if none).
size_t taken(const std::string& s, JsonMachine* out = nullptr) {
  JsonMachine m;
  size_t i = 0;
  while (i < s.size() && m.feed(uint8_t(s[i]))) ++i;
  if (out != nullptr) *out = m;
  return i;
}

bool complete(const std::string& s) {
  JsonMachine m;
  return taken(s, &m) == s.size() && m.complete();
}

TEST(SampleJsonMachine, TakesValidObjectsWhole) {
  const std::string docs[] = {
      "{}",
      "{\r\n\t} ",  // the trailing space is refused: checked below
      R"({"a":1})",
      R"({"a": [1, -2, 3.5, -0.25e+10, 0, -0, 6E-3, 1e5], "b": {"c": null, "d": true, "e": false}})",
      R"({"s": "tab\t quote\" backslash\\ slash\/ \b\f\n\r \u00e9 \u4E2D \ud83d\ude00"})",
      "{\"raw\": \"\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80 \xef\xbf\xbf \xf4\x8f\xbf\xbf\"}",
      R"({"":"", "nested": [[[{}]], [], {"x": [{"y": []}]}]})",
      R"({"k": "\u0000\u001f\uFFFF"})",
      R"({"big": 12345678901234567890, "e": -9.99e+99, "f": 0.000000000000000000000001E-99})",
  };
  for (const std::string& d : docs) {
    SCOPED_TRACE(d);
    if (d.back() == ' ') {
      EXPECT_EQ(taken(d), d.size() - 1);
      EXPECT_TRUE(complete(d.substr(0, d.size() - 1)));
      continue;
    }
    EXPECT_TRUE(nlohmann::json::accept(d));
    EXPECT_TRUE(complete(d));
  }
}

TEST(SampleJsonMachine, RefusesAtTheFirstWrongByte) {
  // (text, bytes taken): the byte after them is where no JSON object can go on.
  const std::pair<std::string, size_t> cases[] = {
      {"[1]", 0},                      // the top level must be an object
      {"\"s\"", 0},
      {"{\"a\":01}", 6},               // no leading zeros
      {"{\"a\":1.}", 7},               // a digit after '.'
      {"{\"a\":-}", 6},
      {"{\"a\":1e}", 7},
      {"{\"a\":1e+}", 8},
      {"{\"a\":.5}", 5},
      {"{\"a\":+1}", 5},
      {"{\"a\":tru}", 8},
      {"{\"a\":nul }", 8},
      {"{\"a\":1,}", 7},               // no trailing comma
      {"{\"a\":[1,]}", 8},
      {"{\"a\" 1}", 5},                // a colon after the key
      {"{a:1}", 1},                    // keys are strings
      {"{\"a\":1]", 6},                // brackets match
      {"{\"a\":[1}", 7},
      {"{\"a\":\"x\ny\"}", 7},        // no raw control bytes in strings
      {"{\"a\":\"\\x\"}", 7},          // no unknown escapes
      {"{\"a\":\"\\u12g4\"}", 10},
      {"{\"a\":\"\\udc00\"}", 9},      // a lone low surrogate, refused at its second digit
      {"{\"a\":\"\\ud800\"}", 12},     // a high surrogate wants a low one next
      {"{\"a\":\"\\ud800\\u0041\"}", 14},
      {"{\"a\":\"\\ud800\\udb00\"}", 15},
      {"{\"a\":\"\xc0\x80\"}", 6},     // overlong
      {"{\"a\":\"\xe0\x80\x80\"}", 7},
      {"{\"a\":\"\xed\xa0\x80\"}", 7},  // an encoded surrogate
      {"{\"a\":\"\xf4\x90\x80\x80\"}", 7},  // past U+10FFFF
      {"{\"a\":\"\xf5\"}", 6},
      {"{\"a\":\"\x80\"}", 6},         // a continuation byte with no lead
      {"{\"a\":\"\xc3\"}", 7},          // a lead byte with no continuation
      {"{}x", 2},                      // nothing after the object
      {"{}{}", 2},
  };
  for (const auto& [text, n] : cases) {
    SCOPED_TRACE(text);
    EXPECT_EQ(taken(text), n);
    EXPECT_FALSE(nlohmann::json::accept(text) && text.front() == '{') << "the reference takes it";
  }
}

TEST(SampleJsonMachine, RefusedByteLeavesTheStateAsItWas) {
  JsonMachine m;
  ASSERT_TRUE(m.feed(std::string_view("{\"a\":12")));
  const JsonMachine before = m;
  EXPECT_FALSE(m.feed(uint8_t('x')));
  EXPECT_EQ(m, before);
  EXPECT_FALSE(m.feed(std::string_view("3}x")));  // all or nothing
  EXPECT_EQ(m, before);
  EXPECT_TRUE(m.feed(std::string_view("3}")));
  EXPECT_TRUE(m.complete());
}

TEST(SampleJsonMachine, DepthWhitespaceAndNumberLimits) {
  EXPECT_EQ(taken("{\"a\":-123456789012345678901}"), 26u);  // 21 digits before the point
  EXPECT_TRUE(complete("{\"a\":-12345678901234567890.123456789012345678901}"));
  EXPECT_EQ(taken("{\"a\":-1.5e123}"), 12u);  // 3 exponent digits
  EXPECT_TRUE(complete("{\"a\":-1.5e-12}"));

  std::string deep = "{\"a\":";
  for (int i = 1; i < JsonMachine::kMaxDepth; ++i) deep += '[';
  JsonMachine m;
  ASSERT_TRUE(m.feed(deep));
  EXPECT_EQ(m.depth(), JsonMachine::kMaxDepth);
  EXPECT_FALSE(m.feed(uint8_t('[')));
  EXPECT_FALSE(m.feed(uint8_t('{')));
  EXPECT_TRUE(m.feed(uint8_t('1')));  // a scalar still fits
  for (int i = 1; i < JsonMachine::kMaxDepth; ++i) ASSERT_TRUE(m.feed(uint8_t(']')));
  EXPECT_TRUE(m.feed(uint8_t('}')));
  EXPECT_TRUE(m.complete());

  JsonMachine w;
  EXPECT_FALSE(w.feed(uint8_t(' ')));  // nothing before the object
  ASSERT_TRUE(w.feed(std::string_view("{\"a\" : [1, 2,\n")));
  for (int i = 0; i < 2 * kIndentPerLevel; ++i) ASSERT_TRUE(w.feed(uint8_t(i % 2 ? ' ' : '\t')));
  EXPECT_FALSE(w.feed(uint8_t(' ')));     // indentation of two levels at most
  EXPECT_TRUE(w.feed(std::string_view("3 ]")));
  EXPECT_FALSE(w.feed(std::string_view(",  \"")));  // a second space
  EXPECT_FALSE(w.feed(std::string_view("\n\n")));  // a blank line
  EXPECT_FALSE(w.feed(std::string_view("\r ")));   // '\r' without '\n'
  EXPECT_TRUE(w.feed(std::string_view("\r\n}")));
  EXPECT_TRUE(w.complete());
}

// Random JSON objects written by nlohmann-json, compact and indented: taken whole.
TEST(SampleJsonMachine, TakesWhatTheReferenceWrites) {
  std::mt19937 rng(7);
  std::function<nlohmann::json(int)> value = [&](int depth) -> nlohmann::json {
    switch (rng() % (depth > 4 ? 5 : 7)) {
      case 0: return nullptr;
      case 1: return bool(rng() % 2);
      case 2: return int64_t(rng()) - int64_t(1u << 31);
      case 3: return std::ldexp(double(int32_t(rng())), int(rng() % 80) - 40);
      case 4: {
        std::string s;
        for (uint32_t i = rng() % 12; i > 0; --i) {
          const uint32_t kind = rng() % 4;
          s += kind == 0 ? std::string(1, char(rng() % 32)) : kind == 1 ? std::string("\xe2\x82\xac") : std::string(1, char(32 + rng() % 95));
        }
        return s;
      }
      case 5: {
        nlohmann::json a = nlohmann::json::array();
        for (uint32_t i = rng() % 4; i > 0; --i) a.push_back(value(depth + 1));
        return a;
      }
      default: {
        nlohmann::json o = nlohmann::json::object();
        for (uint32_t i = rng() % 4; i > 0; --i) o[std::string(1, char('a' + rng() % 26))] = value(depth + 1);
        return o;
      }
    }
  };
  for (int i = 0; i < 300; ++i) {
    nlohmann::json o = nlohmann::json::object();
    for (uint32_t j = rng() % 5; j > 0; --j) o[std::to_string(j)] = value(1);
    for (const std::string& text : {o.dump(), o.dump(1), o.dump(-1, ' ', /*ensure_ascii=*/true)}) {
      SCOPED_TRACE(text);
      EXPECT_TRUE(complete(text));
    }
  }
}

// Random bytes from a JSON-heavy alphabet, each refused byte skipped: whatever the machine
// takes as complete, the reference parses as an object.
TEST(SampleJsonMachine, WhatItCompletesTheReferenceParses) {
  const std::string alphabet = "{}[]:,\"\\ \n01-9.eE+tfrulsanbu\xc3\xa9\x80";
  std::mt19937 rng(11);
  int n_complete = 0;
  for (int i = 0; i < 20000 && n_complete < 300; ++i) {
    JsonMachine m;
    std::string text;
    for (int j = 0; j < 400 && !m.complete(); ++j) {
      const char c = alphabet[rng() % alphabet.size()];
      if (m.feed(uint8_t(c))) text += c;
    }
    if (!m.complete()) continue;
    ++n_complete;
    SCOPED_TRACE(text);
    ASSERT_TRUE(nlohmann::json::accept(text));
    EXPECT_TRUE(nlohmann::json::parse(text).is_object());
  }
  EXPECT_GE(n_complete, 100);
}

}  // namespace
}  // namespace tf

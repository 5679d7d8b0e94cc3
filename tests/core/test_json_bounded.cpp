// parse_json_bounded: the nesting limit holds for objects and arrays, at any position, and
// errors name the origin; ordinary documents and the parser callback still work.
#include <gtest/gtest.h>

#include <string>

#include "core/json_bounded.h"

namespace tf {
namespace {

std::string nested(char open, char close, int depth) {
  return std::string(size_t(depth), open) + std::string(size_t(depth), close);
}

std::string error_of(std::string_view text, int max_depth = kJsonMaxDepth) {
  try {
    parse_json_bounded(text, "body.json", {.max_depth = max_depth});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JsonBounded, ParsesOrdinaryDocuments) {
  const nlohmann::json j = parse_json_bounded(R"({"a": [1, {"b": null}], "c": "x"})", "t");
  EXPECT_EQ(j["a"][1]["b"], nullptr);
  EXPECT_EQ(j["c"], "x");
}

TEST(JsonBounded, DepthAtTheLimitIsAccepted) {
  EXPECT_EQ(error_of(nested('[', ']', 8), 8), "");
  EXPECT_EQ(error_of(nested('[', ']', kJsonMaxDepth)), "");
}

TEST(JsonBounded, DepthPastTheLimitIsRefusedNamingTheOrigin) {
  EXPECT_EQ(error_of(nested('[', ']', 9), 8), "body.json: JSON nested deeper than 8 levels");
  EXPECT_EQ(error_of(std::string(R"({"a":)") + nested('[', ']', 9) + "}", 9),
            "body.json: JSON nested deeper than 9 levels");
}

// The input that crashed the server: ~26,000 levels inside a field, and 100,000 levels in a
// config.json; refused without touching the stack more than max_depth deep.
TEST(JsonBounded, HostileDepthsAreRefused) {
  std::string obj;
  for (int i = 0; i < 100000; ++i) obj += R"({"a":)";
  EXPECT_NE(error_of(obj).find("nested deeper than 128 levels"), std::string::npos);
  EXPECT_NE(error_of(R"({"tools": )" + nested('[', ']', 26000) + "}").find("nested deeper"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(1000000, '[')).find("nested deeper"), std::string::npos);
}

// nlohmann alone stops at a NUL and ignores the rest (`{...}\0garbage` parsed as `{...}`).
TEST(JsonBounded, NulBytesAreRefusedWherever) {
  using namespace std::string_literals;
  EXPECT_EQ(error_of("{\"a\": 1}\0garbage"s), "body.json: not valid JSON: a NUL byte at offset 8");
  EXPECT_EQ(error_of("{\"a\": \"x\0y\"}"s), "body.json: not valid JSON: a NUL byte at offset 8");
  EXPECT_EQ(error_of("\0"s), "body.json: not valid JSON: a NUL byte at offset 0");
  EXPECT_EQ(error_of(R"({"a": "\u0000"})"), "");  // an escaped NUL is a valid string character
}

TEST(JsonBounded, MalformedJsonNamesTheOrigin) {
  const std::string e = error_of(R"({"a": )");
  EXPECT_EQ(e.rfind("body.json: not valid JSON:", 0), 0u) << e;
}

TEST(JsonBounded, CallbackSeesEveryEventAndCanDropValues) {
  int keys = 0;
  const nlohmann::json j = parse_json_bounded(
      R"({"keep": 1, "drop": 2})", "t",
      {.callback = [&](int, nlohmann::json::parse_event_t ev, nlohmann::json& v) {
         if (ev == nlohmann::json::parse_event_t::key) ++keys;
         return !(ev == nlohmann::json::parse_event_t::key && v == "drop");
       }});
  EXPECT_EQ(keys, 2);
  EXPECT_TRUE(j.contains("keep"));
  EXPECT_FALSE(j.contains("drop"));
}

TEST(JsonBounded, OrderedJsonKeepsKeyOrder) {
  const auto j = parse_json_bounded<nlohmann::ordered_json>(R"({"z": 1, "a": 2})", "t");
  EXPECT_EQ(j.begin().key(), "z");
}

}  // namespace
}  // namespace tf

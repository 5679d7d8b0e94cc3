// compile_json_schema and SchemaMachine: what the subset refuses (naming keyword and place),
// which texts the machine takes whole and where it refuses others, and random draws under the
// mask of a made-up vocabulary that end in values a separate validator (below, reading the
// schema's JSON, not the compiled nodes) accepts.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <regex>

#include "core/error.h"
#include "masked_draw.h"
#include "sample/json_schema.h"
#include "sample/schema_machine.h"
#include "sample/token_constraint.h"

namespace tf {
namespace {

using json = nlohmann::ordered_json;

std::string compile_error(const std::string& schema) {
  try {
    compile_json_schema(schema, "s");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SampleJsonSchema, RefusesWhatItCannotHoldTheOutputTo) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type": "object", "properties": {"a": {"type": "string", "pattern": "(x)\\1"}}})",
       "'pattern' at '#/properties/a': the escape \\1"},
      {R"({"type": "object", "properties": {"a": {"type": "string", "format": "uri"}}})", "'format' at '#/properties/a' \"uri\""},
      {R"({"type": "object", "properties": {"a": {"type": "string", "pattern": "x", "maxLength": 3}}})",
       "'maxLength' at '#/properties/a' beside 'pattern'"},
      {R"({"type": "object", "properties": {"a": {"type": "string", "pattern": "x", "format": "date"}}})",
       "'format' at '#/properties/a' beside 'pattern'"},
      {R"({"type": "object", "properties": {"a": {"type": "string", "pattern": "^\"$"}}})", "matches no string"},
      {R"({"type": "object", "properties": {"a": {"type": "number", "minimum": 0}}})", "'minimum' at '#/properties/a' of a \"number\""},
      {R"({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 2}}})", "'multipleOf'"},
      {R"({"type": "object", "properties": {"a": {"type": "integer", "minimum": 3, "exclusiveMaximum": 3}}})",
       "'maximum' at '#/properties/a' leaves no integer"},
      {R"({"type": "object", "properties": {"a": {"type": "integer", "maximum": 1e19}}})", "'maximum' at '#/properties/a' is beyond"},
      {R"({"type": "object", "properties": {"a": {"type": "integer", "minimum": "1"}}})", "'minimum' at '#/properties/a' must be a number"},
      {R"({"type": "object", "properties": {"a": {"enum": [1, 5], "maximum": 3}}})", "'maximum' at '#/properties/a' beside 'enum'"},
      {R"({"type": "object", "properties": {"a": {"type": "string", "minLength": 2, "maxLength": 1}}})", "'maxLength' at '#/properties/a' is below"},
      {R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": 70000}}})", "from 0 to 65535"},
      {R"({"type": "object", "properties": {"a": {}}})", "'#/properties/a' has no 'type'"},
      {R"({"type": "object", "properties": {"a": true}})", "'true' (any value)"},
      {R"({"type": "string"})", "of the root must be \"object\""},
      {R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}})", "'#/$defs/missing' is not"},
      {R"({"$ref": "#/$defs/A", "$defs": {"A": {"$ref": "#/$defs/A"}}})", "leads back to itself"},
      {R"({"type": "object", "properties": {"a": {"type": "array", "minItems": 3, "maxItems": 2, "items": {"type": "null"}}}})",
       "'maxItems' at '#/properties/a' is below"},
      {R"({"type": "object", "properties": {"a": {"type": "null"}}, "required": ["b"]})", "names \"b\""},
      {R"({"type": "object", "allOf": []})", "'allOf' at the root must hold exactly one schema"},
      {R"({"allOf": [{"type": "object"}, {"type": "object"}]})", "'allOf' at the root must hold exactly one schema"},
      {R"({"allOf": [{"type": "object"}], "type": "object"})", "'type' at the root beside 'allOf'"},
      {R"({"type": "object", "properties": {"a": {"allOf": [{"type": "string", "multipleOf": 2}]}}})",
       "'multipleOf' at '#/properties/a/allOf/0'"},
      {R"({"type": "widget"})", "'widget' is not a JSON Schema type"},
      {R"({"type": "object", "properties": {"a": {"enum": []}}})", "'enum'"},
      {R"({"type": "object", "properties": )", "not valid JSON"},
  };
  // A frame counts literal bytes and ranges of enum values in 16 bits.
  nlohmann::json many = nlohmann::json::array();
  for (int i = 0; i < 65536; ++i) many.push_back(i);
  const std::string too_many = nlohmann::json{{"type", "object"}, {"properties", {{"e", {{"enum", many}}}}}}.dump();
  const std::string too_long =
      nlohmann::json{{"type", "object"}, {"properties", {{"c", {{"const", std::string(70000, 'x')}}}}}}.dump();
  const std::string long_key =
      nlohmann::json{{"type", "object"}, {"properties", {{std::string(70000, 'k'), {{"type", "null"}}}}}}.dump();
  EXPECT_NE(compile_error(too_many).find("'enum' at '#/properties/e' has more than 65535 values"), std::string::npos);
  EXPECT_NE(compile_error(too_long).find("'const' at '#/properties/c' holds a value longer than"), std::string::npos);
  EXPECT_NE(compile_error(long_key).find("'properties' at the root has a name longer than"), std::string::npos);
  for (const auto& [schema, want] : cases) {
    const std::string e = compile_error(schema);
    EXPECT_NE(e.find(want), std::string::npos) << schema << "\n  -> " << e;
    EXPECT_EQ(e.rfind("s: ", 0), 0u) << e;
  }
}

const char* kPerson = R"({
  "type": "object",
  "title": "Person",
  "properties": {
    "name": {"type": "string", "description": "any", "minLength": 1, "maxLength": 8},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "height": {"type": ["number", "null"]},
    "kind": {"enum": ["admin", "user", 3, null]},
    "ok": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
    "pet": {"anyOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}]},
    "child": {"anyOf": [{"$ref": "#"}, {"type": "null"}]},
    "code": {"type": "string", "pattern": "^[a-c]{1,3}\\d?$"}
  },
  "required": ["name", "age"],
  "$defs": {
    "Cat": {"type": "object", "properties": {"lives": {"type": "integer"}}, "additionalProperties": false},
    "Dog": {"type": "object", "properties": {"lives": {"type": "integer"}, "good": {"const": true}}}
  }
})";

const std::string kPersonLeaf =
    R"({"name":"Ada","age":36,"height":null,"kind":3,"ok":true,"tags":["x"],"pet":{"lives":9},"child":null})";

size_t taken(const JsonSchema& s, const std::string& text, SchemaMachine* out = nullptr) {
  SchemaMachine m(s);
  size_t i = 0;
  while (i < text.size() && m.feed(uint8_t(text[i]))) ++i;
  if (out != nullptr) *out = m;
  return i;
}

bool complete(const JsonSchema& s, const std::string& text) {
  SchemaMachine m(s);
  return taken(s, text, &m) == text.size() && m.complete();
}

TEST(SampleSchemaMachine, TakesAllowedTextsWhole) {
  const JsonSchema s = compile_json_schema(kPerson);
  const std::string texts[] = {
      kPersonLeaf,
      R"({ "name" : "B\u00e9\"n" , "age": -0, "height": 1.5e-3, "kind": "admin", "ok": false,)"
      "\n  "
      R"("tags": ["a", "b"], "pet": {"lives": 1, "good": true},)"
      R"( "child": {"name":"C","age":1,"height":2,"kind":null,"ok":true,"tags":["t"],"pet":{"lives":0},"child":null}})",
  };
  for (const std::string& t : texts) {
    SCOPED_TRACE(t);
    ASSERT_TRUE(nlohmann::json::accept(t));
    EXPECT_TRUE(complete(s, t));
  }
}

// Properties not in "required" may be left out (any of them, in the schema's order); without
// "required" every one may, down to {}.
TEST(SampleSchemaMachine, OptionalPropertiesMayBeLeftOut) {
  const JsonSchema s = compile_json_schema(kPerson);
  for (const char* t : {R"({"name":"Ada","age":36})", R"({"name":"Ada","age":36,"child":null})",
                        R"({"name":"Ada","age":36,"kind":"user","pet":{}})", R"({"name":"Ada","age":36,"pet":{"good":true}})",
                        R"({ "name": "B", "age": 1, "tags": ["t"], "child": {"name": "C", "age": 2} })"}) {
    SCOPED_TRACE(t);
    EXPECT_TRUE(complete(s, t));
  }
  const JsonSchema none = compile_json_schema(R"({"type": "object", "properties": {"ab": {"type": "integer"},
      "a": {"type": "integer"}, "abc": {"type": "integer"}, "b": {"type": "null"}}})");
  for (const char* t : {"{}", "{ }", R"({"a":1})", R"({"ab":1,"abc":2})", R"({"abc":3,"b":null})", R"({"b":null})",
                        R"({"ab":1,"a":2,"abc":3,"b":null})"}) {
    SCOPED_TRACE(t);
    EXPECT_TRUE(complete(none, t));
  }
  EXPECT_EQ(taken(none, R"({"abc":1,"ab":2})"), 10u);  // "ab" comes before "abc"
  EXPECT_EQ(taken(none, R"({"abd":1})"), 4u);
  EXPECT_EQ(taken(none, R"({"b":null,"a":1})"), 9u);   // nothing after the last one
  // A required property ends the choice: nothing after it may come before it.
  const JsonSchema mid = compile_json_schema(R"({"type": "object", "properties": {"x": {"type": "null"},
      "y": {"type": "null"}, "z": {"type": "null"}}, "required": ["y"]})");
  EXPECT_TRUE(complete(mid, R"({"y":null})"));
  EXPECT_TRUE(complete(mid, R"({"x":null,"y":null,"z":null})"));
  EXPECT_EQ(taken(mid, R"({"z":null})"), 2u);
  EXPECT_EQ(taken(mid, "{}"), 1u);
  // allOf of one schema is that schema (pydantic v1 writes a described $ref so).
  const JsonSchema all = compile_json_schema(R"({"type": "object", "properties": {"p": {"allOf": [{"$ref": "#/$defs/P"}],
      "description": "a point"}}, "required": ["p"], "$defs": {"P": {"type": "object",
      "properties": {"x": {"type": "integer"}}, "required": ["x"]}}})");
  EXPECT_TRUE(complete(all, R"({"p":{"x":1}})"));
  EXPECT_EQ(taken(all, R"({"p":{}})"), 6u);
}

TEST(SampleSchemaMachine, RefusesAtTheFirstByteOutsideTheSchema) {
  const JsonSchema s = compile_json_schema(kPerson);
  // Each: kPersonLeaf with one change, and where it is refused (the first byte no allowed text has).
  auto at = [](const std::string& t, const std::string& mark) { return t.find(mark); };
  const std::pair<std::string, std::string> cases[] = {
      {R"({"age":36})", "age"},                            // properties in the schema's order
      {R"({"name":"Ada","age":3.5})", ".5"},                // an integer has no point
      {R"({"name":"Ada","age":"36"})", "\"36"},
      {R"({"name":"Ada","age":36,"height":true})", "true"},
      {R"({"name":"Ada","age":36,"height":1,"kind":"root"})", "ro"},
      {R"({"name":"Ada","age":36,"height":1,"kind":4})", "4"},
      {R"({"name":"Ada","age":36,"height":1,"kind":3,"ok":1})", "1}"},
      {R"({"name":"Ada","age":36,"height":1,"kind":3,"ok":true,"tags":[]})", "]}"},          // minItems 1
      {R"({"name":"Ada","age":36,"height":1,"kind":3,"ok":true,"tags":["a","b","c"]})", ",\"c"},  // maxItems 2
      {R"({"name":"Ada","age":36,"height":1,"kind":3,"ok":true,"tags":["a"],"pet":{"lives":1,"good":false}})", "false"},
      {R"({"name":"Ada","age":36,"height":1,"kind":3,"ok":true,"tags":["a"],"pet":{"good":true,"lives":1}})",
       ",\"lives"},                                        // Dog's properties in its order
      {R"({"name":"Ada","age":36,"height":1,"kind":3,"ok":true,"tags":["a"],"pet":{"lives":1},"child":null,"x":1})",
       "x"},                                               // no additional property
      {R"({"name":"Ada"})", "}"},                          // age is required
      {R"({"name":"Ada","age":36,"ok":true,"height":1})", "height"},  // optional ones too in order
      {R"({"name":"Ada","age":36,})", "}"},                // a comma needs a property after it
      {R"({"name":"Ada","age":36,"pet":{"lives":1},"tags":[]})", "tags"},
  };
  for (const auto& [text, mark] : cases) {
    SCOPED_TRACE(text);
    EXPECT_EQ(taken(s, text), at(text, mark));
  }
}

// minLength / maxLength count characters (code points): an escape is one, a UTF-8 sequence
// is one, a surrogate pair's two escapes are one.
TEST(SampleSchemaMachine, StringLengthsInCharacters) {
  const JsonSchema s = compile_json_schema(R"({"type": "object", "properties": {
      "a": {"type": "string", "minLength": 2, "maxLength": 3}, "b": {"type": "string", "minLength": 1}},
      "required": ["a", "b"]})");
  for (const char* t : {R"({"a":"xy","b":"z"})", R"({"a":"xyz","b":"long long long"})", R"({"a":"\n\"","b":"\\"})",
                        "{\"a\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\",\"b\":\"\xc3\xa9\"}",
                        R"({"a":"\ud83d\ude00\u00e9","b":"\u0041"})"}) {
    SCOPED_TRACE(t);
    EXPECT_TRUE(complete(s, t));
  }
  EXPECT_EQ(taken(s, R"({"a":"x"})"), 7u);        // too short to close
  EXPECT_EQ(taken(s, R"({"a":"wxyz"})"), 9u);     // a fourth character
  EXPECT_EQ(taken(s, R"({"a":"\t\t\t\t"})"), 12u);
  EXPECT_EQ(taken(s, "{\"a\":\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"}"), 12u);
  EXPECT_EQ(taken(s, R"({"a":"\ud83d\ude00\ud83d\ude00\ud83d\ude00\ud83d"})"), 42u);
  EXPECT_EQ(taken(s, R"({"a":"xy","b":""})"), 15u);
}

// Integer bounds: a byte is taken only if some integer in range begins with the text so far,
// and the number ends only in range; exclusive and fractional bounds round inward.
TEST(SampleSchemaMachine, IntegerBounds) {
  auto schema = [](const std::string& bounds) {
    return compile_json_schema(R"({"type": "object", "properties": {"n": {"type": "integer", )" + bounds + "}}}");
  };
  auto ok = [](const JsonSchema& s, const std::string& n) { return complete(s, R"({"n":)" + n + "}"); };
  const JsonSchema teen = schema(R"("minimum": 13, "maximum": 19)");
  for (int v = -30; v <= 300; ++v) EXPECT_EQ(ok(teen, std::to_string(v)), v >= 13 && v <= 19) << v;
  EXPECT_EQ(taken(teen, R"({"n":2)"), 5u);  // 2 begins nothing from 13 to 19
  EXPECT_EQ(taken(teen, R"({"n":-)"), 5u);
  EXPECT_EQ(taken(teen, R"({"n":0)"), 5u);
  const JsonSchema around = schema(R"("exclusiveMinimum": -12.5, "maximum": 7.9)");  // -12 .. 7
  for (int v = -200; v <= 200; ++v) EXPECT_EQ(ok(around, std::to_string(v)), v >= -12 && v <= 7) << v;
  EXPECT_TRUE(ok(around, "-0"));
  const JsonSchema neg = schema(R"("minimum": -250, "exclusiveMaximum": -99)");  // -250 .. -100
  for (int v = -1000; v <= 10; ++v) EXPECT_EQ(ok(neg, std::to_string(v)), v >= -250 && v <= -100) << v;
  EXPECT_EQ(taken(neg, R"({"n":-3)"), 6u);   // -3xx is below -250
  EXPECT_EQ(taken(neg, R"({"n":-251)"), 8u);  // -25x: -250 only
  const JsonSchema natural = schema(R"("minimum": 0)");
  EXPECT_TRUE(ok(natural, "0"));
  EXPECT_TRUE(ok(natural, "9223372036854775807"));
  EXPECT_FALSE(ok(natural, "9223372036854775808"));
  EXPECT_TRUE(ok(natural, "-0"));  // -0 is 0: the '-' is taken
  EXPECT_EQ(taken(natural, R"({"n":-1)"), 6u);
  const JsonSchema low = schema(R"("maximum": -9223372036854775807)");
  EXPECT_TRUE(ok(low, "-9223372036854775808"));
  EXPECT_TRUE(ok(low, "-9223372036854775807"));
  EXPECT_FALSE(ok(low, "-9223372036854775806"));
  EXPECT_FALSE(ok(low, "-9223372036854775809"));
}

// "pattern" and "format": the string's raw bytes through the pattern's DFA (regex_dfa.h), the
// closing quote only on a match, no escapes.
TEST(SampleSchemaMachine, PatternsAndFormats) {
  const JsonSchema s = compile_json_schema(R"({"type": "object", "properties": {
      "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{2,3}$"}, "when": {"type": "string", "format": "date"},
      "id": {"type": ["string", "null"], "format": "uuid"}}, "required": ["code", "when", "id"]})");
  for (const char* t : {R"({"code":"AB-12","when":"2024-02-29","id":null})",
                        R"({"code": "XY-123", "when": "1999-12-31", "id": "123e4567-e89b-12d3-a456-426614174000"})"}) {
    SCOPED_TRACE(t);
    EXPECT_TRUE(complete(s, t));
  }
  EXPECT_EQ(taken(s, R"({"code":"AB-1")"), 13u);      // one digit is too few to close
  EXPECT_EQ(taken(s, R"({"code":"Ab-12")"), 10u);
  EXPECT_EQ(taken(s, R"({"code":"AB-1234")"), 15u);
  EXPECT_EQ(taken(s, R"({"code":"AB\u002d12")"), 11u);  // no escapes
  EXPECT_EQ(taken(s, R"({"code":"AB-12","when":"2024-04-31")"), 33u);  // April has 30 days
}

// An enum is one frame however many values it has, and a number that a longer one extends
// (1, 10, 100) ends where the next byte says.
TEST(SampleSchemaMachine, EnumsOfManyValuesAndNumbersThatExtendOthers) {
  json values = json::array({1, 10, 100, -1, 1.5, "a", "ab", "a\"b", true, nullptr, json::array({1, 2}),
                             json::object({{"k", "v"}})});
  for (int i = 0; i < 60; ++i) values.push_back("value " + std::to_string(i));
  const json schema{{"type", "object"}, {"properties", {{"e", {{"enum", values}}}, {"n", {{"type", "integer"}}}}}};
  const JsonSchema s = compile_json_schema(schema.dump());
  for (const json& v : values) {
    const std::string text = R"({"e":)" + v.dump() + R"(,"n":7})";
    EXPECT_TRUE(complete(s, text)) << text;
  }
  EXPECT_EQ(taken(s, R"({"e":1000,"n":7})"), 8u);    // 1000 is none of them
  EXPECT_EQ(taken(s, R"({"e":"abc","n":7})"), 8u);
  EXPECT_EQ(taken(s, R"({"e":1.50,"n":7})"), 8u);
  EXPECT_EQ(taken(s, R"({"e":"value 60","n":7})"), 13u);  // "value 6" exists
}

// A value between fixed texts (a tool-call format's tags), nothing beside them.
TEST(SampleSchemaMachine, WrappedValueBetweenFixedTexts) {
  const JsonSchema s = wrap_json_schema(
      compile_json_schema(R"({"type": "object", "properties": {"name": {"const": "f"}, "arguments": {"type": "object",
          "properties": {"n": {"type": "integer"}}}}})"),
      "<tool_call>\n", "\n</tool_call>");
  EXPECT_TRUE(complete(s, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 12}}\n</tool_call>"));
  EXPECT_EQ(taken(s, "<tool_call> {"), 11u);   // the text before, exactly
  EXPECT_EQ(taken(s, "<tool_call>\n {"), 12u);  // no whitespace before the value
  EXPECT_EQ(taken(s, "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"n\":1}} \n</tool_call>"), 44u);
  SchemaMachine m(s);
  ASSERT_TRUE(m.feed(std::string_view("<tool_call>\n{\"name\":\"f\",\"arguments\":{\"n\":1}}\n</tool_call")));
  EXPECT_FALSE(m.complete());
  EXPECT_TRUE(m.feed(uint8_t('>')));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.feed(uint8_t('\n')));  // nothing after
  EXPECT_THROW(wrap_json_schema(compile_json_schema(R"({"type": "object"})"), "", std::string(65536, 'x')), Error);
}

// With a text between values: one or more of them (several tool calls in one block each, or in
// one list), never none, and nothing else between or after.
TEST(SampleSchemaMachine, SeveralWrappedValues) {
  const JsonSchema call = compile_json_schema(R"({"type": "object", "properties": {"n": {"type": "integer"}},
      "required": ["n"]})");
  const JsonSchema hermes = wrap_json_schema(call, "<tool_call>\n", "\n</tool_call>", "\n</tool_call>\n<tool_call>\n");
  EXPECT_TRUE(complete(hermes, "<tool_call>\n{\"n\":1}\n</tool_call>"));
  EXPECT_TRUE(complete(hermes, "<tool_call>\n{\"n\":1}\n</tool_call>\n<tool_call>\n{\"n\":2}\n</tool_call>"));
  EXPECT_TRUE(complete(hermes, "<tool_call>\n{\"n\":1}\n</tool_call>\n<tool_call>\n{\"n\":2}\n</tool_call>\n"
                               "<tool_call>\n{\"n\":3}\n</tool_call>"));
  EXPECT_EQ(taken(hermes, "<tool_call>\n{\"n\":1}\n</tool_call>\n<tool_call>\n}"), 45u);
  EXPECT_EQ(taken(hermes, "<tool_call>\n{\"n\":1}\n</tool_call>\nx"), 33u);
  SchemaMachine m(hermes);
  ASSERT_TRUE(m.feed(std::string_view("<tool_call>\n{\"n\":1}\n</tool_call>")));
  EXPECT_TRUE(m.complete());  // complete, and yet another may follow
  EXPECT_TRUE(m.feed(uint8_t('\n')));
  EXPECT_FALSE(m.complete());
  const JsonSchema list = wrap_json_schema(call, "[TOOL_CALLS][", "]", ", ");
  EXPECT_TRUE(complete(list, "[TOOL_CALLS][{\"n\":1}]"));
  EXPECT_TRUE(complete(list, "[TOOL_CALLS][{\"n\":1}, {\"n\":2}, {\"n\":3}]"));
  EXPECT_EQ(taken(list, "[TOOL_CALLS][]"), 13u);
  EXPECT_EQ(taken(list, "[TOOL_CALLS][{\"n\":1},{\"n\":2}]"), 21u);
}

// An independent check of a parsed value against the schema's JSON (the supported subset).
bool valid(const json& v, const json& schema, const json& root) {
  if (schema.contains("$ref")) {
    const std::string r = schema["$ref"];
    return valid(v, r == "#" ? root : root["$defs"][r.substr(8)], root);
  }
  if (schema.contains("const")) return v == schema["const"];
  if (schema.contains("enum")) {
    for (const json& e : schema["enum"])
      if (v == e) return true;
    return false;
  }
  if (schema.contains("pattern") && !(v.is_string() && std::regex_search(v.get<std::string>(), std::regex(schema["pattern"].get<std::string>()))))
    return false;
  if (schema.contains("anyOf")) {
    for (const json& a : schema["anyOf"])
      if (valid(v, a, root)) return true;
    return false;
  }
  const json types = schema["type"].is_array() ? schema["type"] : json::array({schema["type"]});
  for (const json& t : types) {
    if (t == "string" && v.is_string()) {
      const std::string& u = v.get_ref<const std::string&>();
      const size_t chars = size_t(std::count_if(u.begin(), u.end(), [](char c) { return (uint8_t(c) & 0xc0) != 0x80; }));
      if (chars >= schema.value("minLength", size_t(0)) && chars <= schema.value("maxLength", size_t(1) << 30)) return true;
    }
    if (t == "number" && v.is_number()) return true;
    if (t == "integer" && v.is_number_integer()) {
      const int64_t n = v.get<int64_t>();
      if (n >= schema.value("minimum", INT64_MIN) && n <= schema.value("maximum", INT64_MAX)) return true;
    }
    if (t == "boolean" && v.is_boolean()) return true;
    if (t == "null" && v.is_null()) return true;
    if (t == "array" && v.is_array()) {
      if (v.size() < schema.value("minItems", size_t(0)) || v.size() > schema.value("maxItems", size_t(1) << 30)) continue;
      bool ok = true;
      for (const json& item : v) ok = ok && valid(item, schema["items"], root);
      if (ok) return true;
    }
    if (t == "object" && v.is_object()) {
      bool ok = true;
      for (const json& r : schema.value("required", json::array())) ok = ok && v.contains(r.get<std::string>());
      for (const auto& [k, item] : v.items())
        ok = ok && schema["properties"].contains(k) && valid(item, schema["properties"][k], root);
      if (ok) return true;
    }
  }
  return false;
}

// Every byte as a token, some multi-byte ones, EOS 0.
ConstraintVocab byte_vocab() {
  ConstraintVocab v;
  v.bytes.push_back("</s>");
  for (int b = 0; b < 256; ++b) v.bytes.push_back(std::string(1, char(b)));
  for (const char* t : {"{\"", "\":", "\": \"", "\",", "\"}", "}}", "]}", "true", "false", "null", "12", "admin",
                        "\"name\"", "lives", ", \"", "\n  ", "-0.5e"})
    v.bytes.push_back(t);
  v.eos = {0};
  return v;
}

TEST(SampleSchemaMachine, MaskIsWhatEachTokenFeeds) {
  const ConstraintVocab v = byte_vocab();
  const JsonSchema s = compile_json_schema(kPerson);
  TokenTrie trie(v);
  SchemaMachine m(s);
  for (size_t i = 0; i <= kPersonLeaf.size(); ++i) {
    SCOPED_TRACE(kPersonLeaf.substr(0, i));
    if (i > 0) {
      ASSERT_TRUE(m.feed(uint8_t(kPersonLeaf[i - 1])));
    }
    const TokenBits bits = trie.walk(m);
    for (size_t id = 0; id < v.bytes.size(); ++id) {
      SchemaMachine c = m;
      const bool want = id == 0 ? m.complete() : c.feed(std::string_view(v.bytes[id]));
      ASSERT_EQ(bool((bits[id / 64] >> (id % 64)) & 1u), want) << "id " << id << " '" << v.bytes[id] << "'";
    }
  }
  EXPECT_TRUE(m.complete());
}

TEST(SampleSchemaMachine, RandomDrawsEndInValuesTheSchemaAllows) {
  const ConstraintVocab v = byte_vocab();
  const json schema = json::parse(kPerson);
  auto compiled = std::make_shared<const JsonSchema>(compile_json_schema(kPerson));
  auto masks = std::make_shared<MaskSet<SchemaMachine>>(std::make_shared<const TokenTrie>(v));
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  int n_ended = 0;
  for (int run = 0; run < 200; ++run) {
    MachineConstraint<SchemaMachine> c(masks, SchemaMachine(*compiled), compiled);
    std::string text;
    bool ended = false;
    for (int t = 0; t < 3000 && !ended; ++t) {
      std::vector<float> logits(v.bytes.size());
      for (size_t i = 0; i < logits.size(); ++i) {
        logits[i] = normal(rng);
        const std::string& b = v.bytes[i];
        if (b == "\"" || b == "]" || b == "}" || b == "n") logits[i] += 3.0f;  // strings end, children are null
        if (b == "{") logits[i] -= 3.0f;
      }
      logits[0] += 5.0f;
      c.mask(logits);
      const int32_t best = test::gumbel_max(logits, rng);
      ASSERT_GE(best, 0) << "every id masked after " << text;
      c.accept(best);
      if (best == 0)
        ended = true;
      else
        text += v.bytes[size_t(best)];
    }
    if (!ended) continue;
    ++n_ended;
    SCOPED_TRACE(text);
    ASSERT_TRUE(nlohmann::json::accept(text));
    EXPECT_TRUE(valid(json::parse(text), schema, schema));
  }
  EXPECT_GE(n_ended, 150);
  EXPECT_GT(masks->n_hits(), masks->n_walks());
}

}  // namespace
}  // namespace tf

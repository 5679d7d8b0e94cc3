// A JSON Schema compiled for constrained decoding (OpenAI's response_format
// {"type": "json_schema"}): the subset that OpenAI's strict structured outputs accept, as a
// graph of nodes that SchemaMachine (schema_machine.h) walks byte by byte.
//
// Supported: "type" (object, array, string, number, integer, boolean, null, or a list of
// them), "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
// "minLength", "maxLength", "pattern" and "format" (date, time, date-time, uuid, email, ipv4;
// regex_dfa.h) of strings, "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum" of
// integers (within 64 bits), "enum", "const", "anyOf" / "oneOf" (oneOf's exclusivity is not
// enforced), "allOf" of one schema, "$ref" to "#", "#/$defs/NAME" or "#/definitions/NAME"
// (recursion included), and the annotations "title", "description", "default", "examples",
// "$schema", "$id", "$comment", "deprecated", "readOnly", "writeOnly". The output writes the
// properties in the schema's order: every required one, and any optional one (not in
// "required") or none of them; never an additional one; strings, numbers and enum values in
// one canonical spelling. Everything else (other formats, "pattern" beside a length or a
// "format", "multipleOf", bounds of a "number", "allOf" of several schemas, "not", "if",
// "prefixItems", a schema that allows any value, ...) is refused with an error naming the
// keyword and where it is, since the output could not be held to it. The root must be an
// object.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sample/regex_dfa.h"

namespace tf {

struct SchemaNode {
  enum class Kind : uint8_t {
    Object,   // props in order; key_order, next_required
    Array,    // items (-1: none, so only []), min_items, max_items (-1: no limit)
    String,   // a JSON string of min_items to max_items (-1: no limit) characters (code points),
              // or one that regexes[regex] matches (regex >= 0)
    Number,   // any JSON number
    Integer,  // -?(0|[1-9][0-9]*) from min_value to max_value
    Literal,  // exactly one of `literals` (const or enum values, true, false, null)
    AnyOf,    // one of alts
    Wrap,     // literals[0], then the value of node `items`, then literals[1] (the root only);
              // with literals[2], one or more values with that text between each two
  };
  Kind kind = Kind::Literal;
  std::vector<std::pair<std::string, int32_t>> props;  // Object: the key as written ("\"name\"") and its node
  // Object: the props' indices sorted by key (keys are matched byte by byte as a narrowing
  // range of them), and for each i <= props.size() the first required prop at or after i
  // (props.size(): none).
  std::vector<int32_t> key_order, next_required;
  int32_t items = -1, min_items = 0, max_items = -1, regex = -1;
  int64_t min_value = INT64_MIN, max_value = INT64_MAX;
  std::vector<int32_t> alts;
  std::vector<std::string> literals;  // Literal: sorted, no repeats, each compact JSON text
};

struct JsonSchema {
  std::vector<SchemaNode> nodes;
  std::vector<RegexDfa> regexes;  // String nodes' patterns and formats
  int32_t root = 0;
};

// Throws tf::Error naming the keyword and its JSON pointer on anything outside the subset, and
// on malformed JSON. `what` prefixes the message (e.g. "response_format.json_schema.schema").
JsonSchema compile_json_schema(std::string_view text, const std::string& what = "schema");

// The schema's value between fixed texts (a tool-call format's tags: "<tool_call>\n" and
// "\n</tool_call>"), no whitespace beside them; `after` must not be empty. Both empty: s as is.
// `between` not empty: one or more values, each two separated by it (several tool calls).
// Throws tf::Error when a text is longer than 65535 bytes.
JsonSchema wrap_json_schema(JsonSchema s, const std::string& before, const std::string& after,
                            const std::string& between = "");

}  // namespace tf

// Fuzz harness: the input is a JSON Schema, a NUL byte, then bytes to feed. compile_json_schema
// must either refuse the schema with tf::Error or compile it; the compiled schema's machine,
// and JsonMachine, then take the bytes one at a time (refused ones skipped), and whatever text
// either takes as complete must be JSON the reference parser reads (nlohmann-json), an object
// for JsonMachine.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "sample/json_machine.h"
#include "sample/json_schema.h"
#include "sample/schema_machine.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view schema_text = in.substr(0, nul), bytes = nul == in.npos ? "" : in.substr(nul + 1);

  tf::JsonMachine j;
  std::string j_text;
  for (char c : bytes)
    if (j.feed(uint8_t(c))) j_text += c;
  if (j.complete()) TF_ASSERT(nlohmann::json::accept(j_text) && nlohmann::json::parse(j_text).is_object(), "{}", j_text);

  tf::JsonSchema schema;
  try {
    schema = tf::compile_json_schema(schema_text, "fuzz");
  } catch (const tf::Error&) {
    return 0;
  }
  tf::SchemaMachine m(schema);
  std::string text;
  for (char c : bytes)
    if (m.feed(uint8_t(c))) text += c;
  if (m.complete()) TF_ASSERT(nlohmann::json::accept(text), "{}", text);
  return 0;
}

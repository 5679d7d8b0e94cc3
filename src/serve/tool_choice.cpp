#include "serve/tool_choice.h"

#include "core/error.h"
#include "sample/json_schema.h"
#include "serve/api_error.h"

namespace tf::serve {

namespace {

using json = nlohmann::ordered_json;

// References of a tool's parameters moved under "#/$defs/<prefix>": "#" to the parameters
// themselves, "#/$defs/X" and "#/definitions/X" to "<prefix>.X". Values that are data, not
// schemas (const, enum, default, examples), are left as they are.
void move_refs(json& v, const std::string& prefix) {
  if (v.is_array()) {
    for (json& e : v) move_refs(e, prefix);
    return;
  }
  if (!v.is_object()) return;
  for (auto& [key, value] : v.items()) {
    if (key == "const" || key == "enum" || key == "default" || key == "examples") continue;
    if (key == "$ref" && value.is_string()) {
      const std::string r = value.get<std::string>();
      for (const char* section : {"#/$defs/", "#/definitions/"})
        if (r.rfind(section, 0) == 0) value = "#/$defs/" + prefix + "." + r.substr(std::string(section).size());
      if (r == "#") value = "#/$defs/" + prefix;
      continue;
    }
    move_refs(value, prefix);
  }
}

}  // namespace

ToolCallOutput tool_call_output(const json& tools, const std::optional<std::string>& only, ToolCallFormat format,
                                bool several) {
  const char* args_key = format == ToolCallFormat::Llama3Json ? "parameters" : "arguments";
  json defs = json::object(), calls = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& fn = tools[i]["function"];
    const std::string name = fn["name"].get<std::string>();
    if (only && name != *only) continue;
    const std::string at = "tools[" + std::to_string(i) + "].function.parameters";
    json params = fn.contains("parameters") && !fn["parameters"].is_null()
                      ? fn["parameters"]
                      : json{{"type", "object"}, {"properties", json::object()}};
    try {  // alone first, so that an error names this tool's parameters
      compile_json_schema(params.dump(), at);
    } catch (const Error& e) {
      throw ApiError(400, std::string(e.what()) + " (tool_choice holds the output to a call of these parameters)",
                     "invalid_request_error", at, "unsupported_parameter");
    }
    const std::string prefix = "tool" + std::to_string(i);
    move_refs(params, prefix);
    for (const char* section : {"$defs", "definitions"}) {
      if (!params.contains(section)) continue;
      for (auto& [key, sub] : params[section].items()) defs[prefix + "." + key] = sub;
      params.erase(section);
    }
    defs[prefix] = params;
    calls.push_back(json{{"type", "object"},
                         {"properties", {{"name", {{"const", name}}}, {args_key, {{"$ref", "#/$defs/" + prefix}}}}},
                         {"required", json::array({"name", args_key})}});
  }
  if (calls.empty())
    throw ApiError(400, "'tool_choice.function.name' is \"" + only.value_or("") + "\", which no tool in 'tools' has",
                   "invalid_request_error", "tool_choice.function.name", std::nullopt);
  ToolCallOutput out;
  out.schema = json{{"anyOf", calls}, {"$defs", defs}}.dump();
  if (format == ToolCallFormat::Hermes) {
    out.before = "<tool_call>\n", out.after = "\n</tool_call>";
    if (several) out.between = "\n</tool_call>\n<tool_call>\n";
  }
  if (format == ToolCallFormat::Mistral) {
    out.before = "[TOOL_CALLS][", out.after = "]";  // a list of calls
    if (several) out.between = ", ";
  }
  return out;
}

}  // namespace tf::serve

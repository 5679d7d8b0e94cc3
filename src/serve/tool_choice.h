// tool_choice "required" or a named function: the output is held, by constrained decoding, to
// one call in the model's tool-call format. The call's schema is built from the request's
// tools: {"name": one of their names (the named one only), "arguments" (hermes, mistral) or
// "parameters" (llama3-json): that tool's parameters}, each tool's own $defs moved under
// "#/$defs/tool<i>." so that its references still resolve; hermes puts the call between
// "<tool_call>\n" and "\n</tool_call>", as Qwen's and Hermes's templates show it, mistral
// in a list after "[TOOL_CALLS]". With `several` (tool_choice "required" and
// parallel_tool_calls), hermes and mistral allow one or more calls (a block each, or list
// items); llama3-json stays at one.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "serve/tool_calls.h"

namespace tf::serve {

struct ToolCallOutput {
  std::string schema;                  // JSON Schema text (sample/json_schema.h)
  std::string before, after, between;  // SamplingParams::json_before / json_after / json_between
};

// tools: the request's checked `tools`; only: the function tool_choice names (nullopt:
// "required", any of them). Throws ApiError 400 naming `tools[i].function.parameters` when a
// tool's parameters are outside the schema subset, `tool_choice.function.name` when no tool
// has that name.
ToolCallOutput tool_call_output(const nlohmann::ordered_json& tools, const std::optional<std::string>& only,
                                ToolCallFormat format, bool several = false);

}  // namespace tf::serve

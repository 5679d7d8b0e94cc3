// Fuzz harness: the input is a chat template's Jinja source. It is parsed and rendered over a
// small fixed conversation (system, user, an assistant tool call, a tool result, user), with a
// tool list and one extra variable, as the server renders a model's template. Anything but
// text or a tf::Error (a crash, a hang, a runaway allocation) is a bug.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "chat/chat_template.h"
#include "core/error.h"

namespace {

using nlohmann::ordered_json;

struct Context {
  ordered_json messages, tools, extra;
};

const Context& context() {
  static const Context c{
      ordered_json::parse(R"([
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}, {"type": "text", "text": "Now."}]},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
          "function": {"name": "weather", "arguments": "{\"city\": \"Paris\", \"days\": [1, 2]}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "18°C, ☀"},
        {"role": "user", "content": "Merci \u00e9\u00e8 \ud83d\ude00"}
      ])"),
      ordered_json::parse(R"([{"type": "function", "function": {"name": "weather", "description": "Forecast",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])"),
      ordered_json::parse(R"({"enable_thinking": false})")};
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Context& c = context();
  try {
    const tf::ChatTemplate t =
        tf::ChatTemplate::from_source(std::string(reinterpret_cast<const char*>(data), size), "<s>", "</s>");
    (void)t.render_ordered(c.messages, /*add_generation_prompt=*/true, c.tools, c.extra);
    (void)t.render_ordered(c.messages, /*add_generation_prompt=*/false);
  } catch (const tf::Error&) {
  }
  return 0;
}

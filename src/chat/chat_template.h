// Chat templates: turns an OpenAI-style list of messages into the prompt text a model was
// trained on, by rendering the model's own Jinja `chat_template` (tokenizer_config.json) the
// way Hugging Face's apply_chat_template does (jinja2 with trim_blocks and lstrip_blocks, a
// json.dumps-style tojson, raise_exception and strftime_now). A model without a template has
// none here either (transformers >= 4.44 and vLLM refuse to guess one); the caller may give a
// template file instead (from_file; examples/chatml.jinja is ChatML).
//
// A ChatTemplate is parsed once and is immutable: render() may be called from many threads.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace tf {

namespace jinja {
class Template;
}

class ChatTemplate {
 public:
  // Reads <dir>/tokenizer_config.json: chat_template (a string, or a list of {"name","template"}
  // where "default" is used), bos_token and eos_token (strings or {"content": ...} objects).
  // A <dir>/chat_template.jinja (where transformers >= 4.43 saves templates) takes precedence.
  // nullopt when the folder has neither. Errors name the file and field.
  static std::optional<ChatTemplate> from_model_dir(const std::string& dir);
  // The template of a model path: a GGUF file's tokenizer.chat_template (or that of the one
  // GGUF file a folder holds), else from_model_dir. nullopt when there is none.
  static std::optional<ChatTemplate> from_model(const std::string& path);
  // The template in the file `path` (e.g. --chat-template), with bos_token and eos_token from
  // the model (`model`: a folder's tokenizer_config.json or a GGUF file's tokens) when it has
  // them. Errors name the file.
  static ChatTemplate from_file(const std::string& path, const std::string& model);
  static ChatTemplate from_source(std::string source, std::string bos_token, std::string eos_token);

  // messages: JSON array of OpenAI-style messages ({"role", "content", ...}; content a string, or an
  // array of {"type":"text","text":...} parts which are joined); tools: JSON array or null.
  // extra: more variables for the template (e.g. enable_thinking). Throws tf::Error naming the
  // problem (bad message shape, raise_exception from the template, template syntax error with line).
  // As vLLM does before rendering: parts are joined with "\n", null or absent content is "",
  // an assistant's tool_calls[].function.arguments given as a JSON-object string is parsed to
  // the object, and an empty tool_calls list is dropped.
  // The template also sees bos_token/eos_token (when the model has them), tools (None when
  // null) and documents (None), as transformers' apply_chat_template passes them.
  std::string render(const nlohmann::json& messages, bool add_generation_prompt,
                     const nlohmann::json& tools = nullptr,
                     const nlohmann::json& extra = nlohmann::json::object()) const;

  // The same for a request parsed as nlohmann::ordered_json. Objects then keep the key order
  // the client sent, as Python's json.loads does, so `tool | tojson` prints a tool schema
  // exactly as transformers would; nlohmann::json sorts keys.
  std::string render_ordered(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                             const nlohmann::ordered_json& tools = nullptr,
                             const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  // The template's text (e.g. to find the tool-call format it teaches the model).
  const std::string& source() const { return source_; }
  // Whether the template's text contains `word` (e.g. "tools": whether it can list them).
  bool mentions(std::string_view word) const { return source_.find(word) != std::string::npos; }

 private:
  ChatTemplate(std::shared_ptr<const jinja::Template> tmpl, std::string source, std::string bos_token,
               std::string eos_token);
  template <typename Json>
  std::string render_any(const Json& messages, bool add_generation_prompt, const Json& tools,
                         const Json& extra) const;

  std::shared_ptr<const jinja::Template> template_;
  std::string source_;
  std::string bos_token_;  // "" when the model has none (then undefined in the template)
  std::string eos_token_;
};

}  // namespace tf

#include "chat/chat_template.h"

#include <string_view>
#include <utility>

#include "chat/jinja_json.h"
#include "chat/jinja_template.h"
#include "core/error.h"
#include "core/json_bounded.h"
#include "core/mapped_file.h"
#include "model/gguf/gguf_file.h"

namespace tf {

using json = nlohmann::json;

namespace {

json parse_json_file(const std::string& path) {
  const std::string text = read_text_file(path);
  return parse_json_bounded(text, path);
}

// bos_token / eos_token: a string, an AddedToken object {"content": ...}, null or absent ("").
std::string special_token(const json& config, const char* key, const std::string& path) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  fail("{}: field '{}' is {} (expected a string or an object with a string 'content')", path, key,
       it->dump());
}

// chat_template: a string, or a list of {"name", "template"} of which "default" is used.
// Returns "" when absent or null.
std::string template_source(const json& config, const std::string& path) {
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array())
    fail("{}: field 'chat_template' is a {} (expected a string or a list of named templates)",
         path, it->type_name());
  for (size_t i = 0; i < it->size(); ++i) {
    const json& entry = (*it)[i];
    auto name = entry.is_object() ? entry.find("name") : entry.end();
    auto body = entry.is_object() ? entry.find("template") : entry.end();
    if (!entry.is_object() || name == entry.end() || !name->is_string() || body == entry.end() ||
        !body->is_string())
      fail("{}: field 'chat_template[{}]' must be an object with string 'name' and 'template'",
           path, i);
    if (*name == "default") return body->get<std::string>();
  }
  fail("{}: field 'chat_template' lists named templates but none is named 'default'", path);
}

// OpenAI sends an assistant's tool-call arguments as a JSON string; chat templates expect the
// object (transformers documents them as dicts, and Llama-3.1-style templates `tojson` them),
// so a string holding a JSON object is parsed, as vLLM does; anything else stays as sent
// (vLLM would replace it with {}). An empty tool_calls list is dropped, as vLLM does, so
// templates that test `message.tool_calls is defined` take the plain-reply path.
template <typename Json>
Json with_parsed_arguments(const Json& m) {
  Json out = m;
  if (out["role"] != "assistant") return out;
  auto calls = out.find("tool_calls");
  if (calls == out.end() || !calls->is_array()) return out;
  if (calls->empty()) {
    out.erase(calls);
    return out;
  }
  for (Json& call : *calls) {
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
    Json& fn = call["function"];
    auto args = fn.find("arguments");
    if (args == fn.end() || !args->is_string()) continue;
    Json parsed;
    try {
      parsed = parse_json_bounded<Json>(args->template get_ref<const std::string&>(), "tool call arguments");
    } catch (const Error&) {
      continue;
    }
    if (parsed.is_object()) *args = std::move(parsed);
  }
  return out;
}

// One OpenAI message as the template sees it. Content: a string stays; null or absent becomes
// "" (an assistant turn that only calls tools); a list of text parts is joined with "\n", as
// vLLM does for templates that expect string content. Tool-call arguments are parsed (above).
// Other fields pass through.
template <typename Json>
jinja::Value message_value(const Json& m, size_t i) {
  if (!m.is_object()) fail("messages[{}]: expected an object, got {}", i, m.type_name());
  auto role = m.find("role");
  if (role == m.end() || !role->is_string())
    fail("messages[{}].role: expected a string ('system', 'user', 'assistant' or 'tool')", i);
  jinja::Value v = jinja::from_json(with_parsed_arguments(m));
  auto content = m.find("content");
  std::string text;
  if (content == m.end() || content->is_null()) {
    text = "";
  } else if (content->is_string()) {
    return v;
  } else if (content->is_array()) {
    for (size_t k = 0; k < content->size(); ++k) {
      const Json& part = (*content)[k];
      auto type = part.is_object() ? part.find("type") : part.end();
      auto part_text = part.is_object() ? part.find("text") : part.end();
      if (type == part.end() || !type->is_string())
        fail("messages[{}].content[{}]: expected an object with a string 'type'", i, k);
      if (*type != "text")
        fail("messages[{}].content[{}]: only text parts are supported, got type '{}'", i, k,
             type->template get<std::string>());
      if (part_text == part.end() || !part_text->is_string())
        fail("messages[{}].content[{}].text: expected a string", i, k);
      if (k) text += "\n";
      text += part_text->template get<std::string>();
    }
  } else {
    fail("messages[{}].content: expected a string, an array of text parts or null, got {}", i,
         content->type_name());
  }
  v.as_dict().set("content", jinja::Value(std::move(text)));
  return v;
}

}  // namespace

ChatTemplate::ChatTemplate(std::shared_ptr<const jinja::Template> tmpl, std::string source, std::string bos_token,
                           std::string eos_token)
    : template_(std::move(tmpl)),
      source_(std::move(source)),
      bos_token_(std::move(bos_token)),
      eos_token_(std::move(eos_token)) {}

namespace {

struct SpecialTokens {
  std::string bos, eos;
};

// bos_token / eos_token of <dir>/tokenizer_config.json ("" when absent), and its chat_template
// ("" when absent) into *source when source is not null.
SpecialTokens read_tokenizer_config(const std::string& dir, std::string* source) {
  const std::string path = dir + "/tokenizer_config.json";
  SpecialTokens t;
  if (!file_exists(path)) return t;
  const json config = parse_json_file(path);
  if (!config.is_object()) fail("{}: expected a JSON object at the top level", path);
  if (source) *source = template_source(config, path);
  t.bos = special_token(config, "bos_token", path);
  t.eos = special_token(config, "eos_token", path);
  return t;
}

// bos_token / eos_token of a model path: a GGUF file's (its tokenizer.ggml.*_token_id entries of
// tokenizer.ggml.tokens), else tokenizer_config.json's as above.
SpecialTokens model_special_tokens(const std::string& path) {
  const std::optional<std::string> gguf = find_gguf_model(path);
  if (!gguf) return read_tokenizer_config(path, nullptr);
  const GgufFile f(*gguf);
  auto token_text = [&](const char* key) -> std::string {
    const std::optional<uint64_t> id = f.opt_uint(key);
    if (!id || !f.has("tokenizer.ggml.tokens")) return "";
    const std::span<const std::string_view> tokens = f.get_strings("tokenizer.ggml.tokens");
    return *id < tokens.size() ? std::string(tokens[*id]) : "";
  };
  return {token_text("tokenizer.ggml.bos_token_id"), token_text("tokenizer.ggml.eos_token_id")};
}

// Parses `source`; a syntax error "chat template: line 3: ..." becomes "<origin>: line 3: ...".
ChatTemplate parse_named(std::string source, const std::string& origin, SpecialTokens tokens) {
  try {
    return ChatTemplate::from_source(std::move(source), std::move(tokens.bos), std::move(tokens.eos));
  } catch (const Error& e) {
    std::string what = e.what();
    constexpr std::string_view kPrefix = "chat template: ";
    if (what.rfind(kPrefix, 0) == 0) what.erase(0, kPrefix.size());
    fail("{}: {}", origin, what);
  }
}

}  // namespace

// Where the template comes from, as transformers loads it: chat_template.jinja beside
// tokenizer_config.json when there is one (how transformers >= 4.43 saves templates), else
// tokenizer_config.json's chat_template.
std::optional<ChatTemplate> ChatTemplate::from_model_dir(const std::string& dir) {
  const std::string jinja_path = dir + "/chat_template.jinja";
  std::string source;
  SpecialTokens tokens = read_tokenizer_config(dir, &source);
  std::string origin = dir + "/tokenizer_config.json: chat_template";
  if (file_exists(jinja_path)) {
    source = read_text_file(jinja_path);
    origin = jinja_path;
  }
  if (source.empty()) return std::nullopt;
  return parse_named(std::move(source), origin, std::move(tokens));
}

// A GGUF file keeps the template in tokenizer.chat_template and the special tokens as ids.
std::optional<ChatTemplate> ChatTemplate::from_model(const std::string& path) {
  const std::optional<std::string> gguf = find_gguf_model(path);
  if (!gguf) return from_model_dir(path);
  std::string source;
  {
    const GgufFile f(*gguf);
    source = std::string(f.opt_string("tokenizer.chat_template").value_or(""));
  }
  if (source.empty()) return std::nullopt;
  return parse_named(std::move(source), *gguf + ": tokenizer.chat_template", model_special_tokens(path));
}

ChatTemplate ChatTemplate::from_file(const std::string& path, const std::string& model) {
  if (!file_exists(path)) fail("{}: no such chat template file", path);
  return parse_named(read_text_file(path), path, model_special_tokens(model));
}

ChatTemplate ChatTemplate::from_source(std::string source, std::string bos_token,
                                       std::string eos_token) {
  auto tmpl = std::make_shared<const jinja::Template>(source);
  return ChatTemplate(std::move(tmpl), std::move(source), std::move(bos_token), std::move(eos_token));
}

// The variables transformers' apply_chat_template passes: messages, tools (None when
// absent), documents (None), add_generation_prompt, the special tokens the model has, and
// the caller's extra keyword arguments.
template <typename Json>
std::string ChatTemplate::render_any(const Json& messages, bool add_generation_prompt,
                                     const Json& tools, const Json& extra) const {
  if (!messages.is_array()) fail("messages: expected an array of messages, got {}", messages.type_name());
  if (!tools.is_null() && !tools.is_array()) fail("tools: expected an array or null, got {}", tools.type_name());
  if (!extra.is_object()) fail("chat template variables: expected an object, got {}", extra.type_name());
  jinja::Dict vars;
  try {
    std::vector<jinja::Value> list;
    for (size_t i = 0; i < messages.size(); ++i) list.push_back(message_value(messages[i], i));
    vars.set("messages", jinja::Value::list(std::move(list)));
    vars.set("tools", jinja::from_json(tools));
    vars.set("documents", jinja::Value(nullptr));
    vars.set("add_generation_prompt", jinja::Value(add_generation_prompt));
    if (!bos_token_.empty()) vars.set("bos_token", jinja::Value(bos_token_));
    if (!eos_token_.empty()) vars.set("eos_token", jinja::Value(eos_token_));
    for (auto it = extra.begin(); it != extra.end(); ++it) {
      if (it.key() == "messages" || it.key() == "tools" || it.key() == "documents" ||
          it.key() == "add_generation_prompt")
        fail("chat template variable '{}' is set by the request itself", it.key());
      vars.set(it.key(), jinja::from_json(it.value()));
    }
  } catch (const jinja::Failure& f) {
    fail("messages: {}", f.message);
  }
  return template_->render(vars);
}

std::string ChatTemplate::render(const json& messages, bool add_generation_prompt,
                                 const json& tools, const json& extra) const {
  return render_any(messages, add_generation_prompt, tools, extra);
}

std::string ChatTemplate::render_ordered(const nlohmann::ordered_json& messages,
                                         bool add_generation_prompt,
                                         const nlohmann::ordered_json& tools,
                                         const nlohmann::ordered_json& extra) const {
  return render_any(messages, add_generation_prompt, tools, extra);
}

}  // namespace tf

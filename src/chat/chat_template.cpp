#include "chat/chat_template.h"

#include <filesystem>
#include <utility>

#include "core/error.h"
#include "core/mapped_file.h"

namespace tf {

using json = nlohmann::json;

namespace jinja {
// Placeholder until the interpreter lands: keeps the source, refuses to render.
class Template {
 public:
  explicit Template(std::string source) : source_(std::move(source)) {}
  std::string source_;
};
}  // namespace jinja

namespace {

// The template transformers fell back to for models without one (ChatML).
constexpr const char* kChatMlTemplate =
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{% endif %}";

json parse_json_file(const std::string& path) {
  const std::string text = read_text_file(path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: malformed JSON: {}", path, e.what());
  }
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

}  // namespace

ChatTemplate::ChatTemplate(std::shared_ptr<const jinja::Template> tmpl, std::string bos_token,
                           std::string eos_token, bool is_default)
    : template_(std::move(tmpl)),
      bos_token_(std::move(bos_token)),
      eos_token_(std::move(eos_token)),
      is_default_(is_default) {}

ChatTemplate ChatTemplate::from_model_dir(const std::string& dir) {
  const std::string path = dir + "/tokenizer_config.json";
  std::string source, bos, eos;
  if (file_exists(path)) {
    const json config = parse_json_file(path);
    if (!config.is_object()) fail("{}: expected a JSON object at the top level", path);
    source = template_source(config, path);
    bos = special_token(config, "bos_token", path);
    eos = special_token(config, "eos_token", path);
  }
  if (source.empty()) {
    ChatTemplate t = from_source(kChatMlTemplate, std::move(bos), std::move(eos));
    t.is_default_ = true;
    return t;
  }
  return from_source(std::move(source), std::move(bos), std::move(eos));
}

ChatTemplate ChatTemplate::from_source(std::string source, std::string bos_token,
                                       std::string eos_token) {
  return ChatTemplate(std::make_shared<const jinja::Template>(std::move(source)),
                      std::move(bos_token), std::move(eos_token), /*is_default=*/false);
}

std::string ChatTemplate::render(const json& /*messages*/, bool /*add_generation_prompt*/,
                                 const json& /*tools*/, const json& /*extra*/) const {
  fail("chat template: rendering is not implemented yet (the Jinja interpreter is in progress)");
}

}  // namespace tf

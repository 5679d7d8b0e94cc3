// Field-by-field parsing of OpenAI request bodies; see openai_protocol.h for the field list.
#include "serve/openai_protocol.h"

#include <cctype>
#include <cmath>
#include <limits>

#include "serve/api_error.h"
#include "core/error.h"
#include "core/json_bounded.h"
#include "core/split.h"
#include "sample/json_schema.h"
#include "sample/regex_dfa.h"

namespace tf::serve {
namespace {

// Ordered: a chat body's objects reach the template in the client's key order (the body is
// parsed once).
using json = nlohmann::ordered_json;

// JSON type names as the OpenAI docs write them, for "expected X, got Y" messages.
std::string type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

[[noreturn]] void wrong_type(const std::string& field, const char* expected, const json& v) {
  bad_request(field, "'" + field + "' must be " + expected + ", got " + type_name(v));
}

// Reads optional fields of the request object; a null value counts as absent, as in the
// OpenAI API (the Python client sends no field at all for NOT_GIVEN, and null is "default").
class Fields {
 public:
  explicit Fields(const json& j) : j_(j) {}

  const json* get(const char* k) const {
    auto it = j_.find(k);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  std::optional<bool> boolean(const char* k) const {
    const json* v = get(k);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) wrong_type(k, "a boolean", *v);
    return v->get<bool>();
  }
  // An integer in [lo, hi].
  std::optional<int64_t> integer(const char* k, int64_t lo, int64_t hi) const {
    const json* v = get(k);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) wrong_type(k, "an integer", *v);
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      bad_request(k, fmt_range(k, lo, hi, v->dump()));
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) bad_request(k, fmt_range(k, lo, hi, std::to_string(x)));
    return x;
  }
  // A number that is finite as the float the engine keeps; range checks are the caller's
  // (they differ in open/closed ends) and are made on the float, so that 1e-300 (0 as a
  // float) cannot pass a "greater than 0" check.
  std::optional<float> number(const char* k) const {
    const json* v = get(k);
    if (!v) return std::nullopt;
    if (!v->is_number()) wrong_type(k, "a number", *v);
    const float x = float(v->get<double>());
    if (!std::isfinite(x)) bad_request(k, std::string("'") + k + "' must be a finite number (within float range)");
    return x;
  }

 private:
  static std::string fmt_range(const char* k, int64_t lo, int64_t hi, const std::string& got) {
    std::string msg = std::string("'") + k + "' must be ";
    if (hi == std::numeric_limits<int64_t>::max()) msg += "at least " + std::to_string(lo);
    else msg += "between " + std::to_string(lo) + " and " + std::to_string(hi);
    return msg + ", got " + got;
  }
  const json& j_;
};

json parse_body(std::string_view body) {
  json j;
  try {
    j = parse_json_bounded<json>(body, "the request body");
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "invalid_request_error");
  }
  if (!j.is_object())
    throw ApiError(400, "the request body must be a JSON object, got " + type_name(j), "invalid_request_error");
  return j;
}

// What becomes of each top-level request field:
//   Parsed       read by the parse_* functions below (with their own checks);
//   NoOp         accepted, type-checked, and without effect on the result: it only matters
//                to OpenAI's own service (billing, storage, abuse tracking, cache routing);
//   DefaultOnly  a feature twofold does not implement: accepted only at the value that asks
//                for nothing, refused by name otherwise.
// A field not in the table is refused by name, as the OpenAI API refuses an unrecognized
// argument: a client never gets a 200 that quietly ignored something it asked for (vLLM
// extensions such as guided_json included). A null value counts as absent.
enum class Use : uint8_t { Parsed, NoOp, DefaultOnly };
constexpr uint8_t kCompletions = 1, kChat = 2, kBoth = 3;

struct FieldRule {
  std::string_view name;
  uint8_t endpoints;
  Use use;
  bool (*ok)(const json&) = nullptr;  // NoOp: the type check; DefaultOnly: "asks for nothing"
  const char* accepted = nullptr;     // what `ok` accepts, for the error message
};

bool is_string(const json& v) { return v.is_string(); }
bool is_object(const json& v) { return v.is_object(); }
bool is_false(const json& v) { return v.is_boolean() && !v.get<bool>(); }
bool is_empty_array(const json& v) { return v.is_array() && v.empty(); }
bool never(const json&) { return false; }
bool is_none_or_auto(const json& v) { return v == "none" || v == "auto"; }
bool is_text_modality(const json& v) { return v == json::array({"text"}); }

constexpr FieldRule kFields[] = {
    {"model", kBoth, Use::Parsed},
    {"max_tokens", kBoth, Use::Parsed},
    {"temperature", kBoth, Use::Parsed},
    {"top_p", kBoth, Use::Parsed},
    {"top_k", kBoth, Use::Parsed},
    {"min_p", kBoth, Use::Parsed},
    {"repetition_penalty", kBoth, Use::Parsed},
    {"presence_penalty", kBoth, Use::Parsed},
    {"frequency_penalty", kBoth, Use::Parsed},
    {"seed", kBoth, Use::Parsed},
    {"stop", kBoth, Use::Parsed},
    {"n", kBoth, Use::Parsed},
    {"stream", kBoth, Use::Parsed},
    {"stream_options", kBoth, Use::Parsed},
    {"priority", kBoth, Use::Parsed},
    {"ignore_eos", kBoth, Use::Parsed},
    {"logit_bias", kBoth, Use::Parsed},
    {"logprobs", kBoth, Use::Parsed},
    {"guided_json", kBoth, Use::Parsed},
    {"guided_regex", kBoth, Use::Parsed},
    {"guided_choice", kBoth, Use::Parsed},
    {"prompt", kCompletions, Use::Parsed},
    {"echo", kCompletions, Use::Parsed},
    {"best_of", kCompletions, Use::Parsed},
    {"suffix", kCompletions, Use::Parsed},
    {"messages", kChat, Use::Parsed},
    {"max_completion_tokens", kChat, Use::Parsed},
    {"top_logprobs", kChat, Use::Parsed},
    {"add_generation_prompt", kChat, Use::Parsed},
    {"chat_template_kwargs", kChat, Use::Parsed},
    {"user", kBoth, Use::NoOp, is_string, "a string"},
    {"metadata", kChat, Use::NoOp, is_object, "an object"},
    {"service_tier", kChat, Use::NoOp, is_string, "a string"},
    {"safety_identifier", kChat, Use::NoOp, is_string, "a string"},
    {"prompt_cache_key", kChat, Use::NoOp, is_string, "a string"},
    {"parallel_tool_calls", kChat, Use::Parsed},
    {"store", kChat, Use::DefaultOnly, is_false, "false (nothing is stored)"},
    {"tools", kChat, Use::Parsed},
    {"tool_choice", kChat, Use::Parsed},
    {"functions", kChat, Use::DefaultOnly, is_empty_array, "an empty array (the deprecated form; use 'tools')"},
    {"function_call", kChat, Use::DefaultOnly, is_none_or_auto,
     "\"none\" or \"auto\" (the deprecated form; use 'tools')"},
    {"response_format", kChat, Use::Parsed},
    {"modalities", kChat, Use::DefaultOnly, is_text_modality, "[\"text\"]"},
    {"audio", kChat, Use::DefaultOnly, never, "absent (audio output is not implemented)"},
    {"prediction", kChat, Use::DefaultOnly, never, "absent (predicted outputs are not implemented)"},
    {"reasoning_effort", kChat, Use::DefaultOnly, never, "absent (reasoning controls are not implemented)"},
    {"verbosity", kChat, Use::DefaultOnly, never, "absent (verbosity control is not implemented)"},
    {"web_search_options", kChat, Use::DefaultOnly, never, "absent (web search is not implemented)"},
};

void check_fields(const json& j, Endpoint e) {
  const uint8_t mine = e == Endpoint::Chat ? kChat : kCompletions;
  for (const auto& [key, value] : j.items()) {
    const FieldRule* rule = nullptr;
    for (const FieldRule& r : kFields)
      if (r.name == key && (r.endpoints & mine)) rule = &r;
    const std::string name = key.substr(0, 100);
    if (!rule)
      throw ApiError(400, "unrecognized request argument supplied: '" + name + "' (twofold refuses fields it does not " +
                              "implement rather than ignore them; see README, Serving)",
                     "invalid_request_error", name, "unknown_parameter");
    if (rule->use == Use::Parsed || value.is_null()) continue;
    if (rule->use == Use::NoOp && !rule->ok(value)) wrong_type(name, rule->accepted, value);
    if (rule->use == Use::DefaultOnly && !rule->ok(value))
      throw ApiError(400, "'" + name + "' is not supported by twofold: it must be " + rule->accepted,
                     "invalid_request_error", name, "unsupported_parameter");
  }
}

void refuse_unless(bool ok, const char* field, const std::string& why) {
  if (!ok) bad_request(field, std::string("'") + field + "' " + why);
}

std::vector<std::string> parse_stop(const Fields& f) {
  const json* v = f.get("stop");
  if (!v) return {};
  if (v->is_string()) return {v->get<std::string>()};
  if (!v->is_array()) wrong_type("stop", "a string or an array of strings", *v);
  std::vector<std::string> out;
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) wrong_type("stop[" + std::to_string(i) + "]", "a string", (*v)[i]);
    if ((*v)[i].get_ref<const std::string&>().empty()) bad_request("stop", "'stop' strings must not be empty");
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

// The fields both endpoints share.
void parse_common(const json& j, ApiRequest& r) {
  const Fields f(j);
  if (const json* m = f.get("model")) {
    if (!m->is_string()) wrong_type("model", "a string", *m);
    r.model = m->get<std::string>();
  }
  constexpr int64_t kMaxI32 = std::numeric_limits<int32_t>::max();
  constexpr int64_t kMaxChoices = 128;  // OpenAI's bound on n
  if (auto v = f.integer("max_tokens", 0, kMaxI32)) r.max_tokens = int32_t(*v);  // 0: echo only (below)
  SamplingParams& s = r.sampling;
  if (auto v = f.number("temperature")) {
    refuse_unless(*v >= 0, "temperature", "must be at least 0, got " + std::to_string(*v));
    s.temperature = *v;
  }
  if (auto v = f.number("top_p")) {
    refuse_unless(*v > 0 && *v <= 1, "top_p", "must be in (0, 1], got " + std::to_string(*v));
    s.top_p = *v;
  }
  // -1 is vLLM's "off"; 0 is ours.
  if (auto v = f.integer("top_k", -1, kMaxI32)) s.top_k = int32_t(std::max<int64_t>(*v, 0));
  if (auto v = f.number("min_p")) {
    refuse_unless(*v >= 0 && *v <= 1, "min_p", "must be in [0, 1], got " + std::to_string(*v));
    s.min_p = *v;
  }
  if (auto v = f.number("repetition_penalty")) {
    refuse_unless(*v > 0, "repetition_penalty", "must be greater than 0, got " + std::to_string(*v));
    s.repetition_penalty = *v;
  }
  for (auto [k, field] : {std::pair{"presence_penalty", &s.presence_penalty}, {"frequency_penalty", &s.frequency_penalty}})
    if (auto v = f.number(k)) {
      refuse_unless(*v >= -2 && *v <= 2, k, "must be in [-2, 2], got " + std::to_string(*v));
      *field = *v;
    }
  if (const json* v = f.get("seed")) {
    if (!v->is_number_integer()) wrong_type("seed", "an integer", *v);
    s.seed = v->is_number_unsigned() ? v->get<uint64_t>() : uint64_t(v->get<int64_t>());
    r.seed_given = true;
  }
  s.stop = parse_stop(f);
  if (auto v = f.integer("n", 1, kMaxChoices)) r.n = int32_t(*v);
  if (auto v = f.boolean("stream")) r.stream = *v;
  if (const json* so = f.get("stream_options")) {
    if (!so->is_object()) wrong_type("stream_options", "an object", *so);
    refuse_unless(r.stream, "stream_options", "is only allowed when 'stream' is true");
    for (const auto& [key, value] : so->items())
      if (key != "include_usage" && key != "include_obfuscation")  // the latter only matters to OpenAI's service
        throw ApiError(400, "unrecognized request argument supplied: 'stream_options." + key.substr(0, 100) + "'",
                       "invalid_request_error", "stream_options." + key.substr(0, 100), "unknown_parameter");
    const Fields sf(*so);
    if (const json* io = sf.get("include_obfuscation"); io && !io->is_boolean())
      wrong_type("stream_options.include_obfuscation", "a boolean", *io);
    const json* iu = sf.get("include_usage");
    if (iu && !iu->is_boolean()) wrong_type("stream_options.include_usage", "a boolean", *iu);
    r.include_usage = iu && iu->get<bool>();
  }
  if (auto v = f.integer("priority", std::numeric_limits<int32_t>::min(), kMaxI32)) r.priority = int32_t(*v);
  if (auto v = f.boolean("ignore_eos")) s.ignore_eos = *v;
  if (const json* lb = f.get("logit_bias")) {
    if (!lb->is_object()) wrong_type("logit_bias", "an object", *lb);
    for (const auto& [key, value] : lb->items()) {
      // Keys are token ids written in decimal, as OpenAI's API takes them.
      const auto id = parse_int(key, 0, std::numeric_limits<int32_t>::max());
      refuse_unless(id.has_value(), "logit_bias",
                    "keys must be token ids (non-negative integers), got \"" + key.substr(0, 40) + "\"");
      if (!value.is_number()) wrong_type("logit_bias", "an object of numbers", value);
      const double bias = value.get<double>();
      refuse_unless(bias >= -100 && bias <= 100, "logit_bias",
                    "values must be in [-100, 100], got " + std::to_string(bias) + " for token " + key);
      s.logit_bias.emplace_back(int32_t(*id), float(bias));
    }
  }
}

std::vector<int32_t> parse_ids(const json& v, const std::string& field) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& x = v[i];
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > std::numeric_limits<int32_t>::max())
      bad_request(field, "'" + field + "' token ids must be non-negative integers; element " + std::to_string(i) +
                             " is " + x.dump());
    ids.push_back(x.get<int32_t>());
  }
  return ids;
}

// prompt: "text" | [ids...] | ["text"] | [[ids...]]; one prompt per request.
void parse_prompt(const json& j, ApiRequest& r) {
  auto it = j.find("prompt");
  if (it == j.end() || it->is_null()) bad_request("prompt", "'prompt' is required");
  json p = *it;
  if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = json(p[0]);
  else if (p.is_array() && !p.empty() && (p[0].is_string() || p[0].is_array()))
    bad_request("prompt", "'prompt' must be a single prompt (a string or a list of token ids); got " +
                              std::to_string(p.size()) + " prompts");
  if (p.is_string()) {
    r.prompt_text = p.get<std::string>();
    if (r.prompt_text.empty()) bad_request("prompt", "'prompt' must not be empty");
  } else if (p.is_array()) {
    r.prompt_ids = parse_ids(p, "prompt");
    r.prompt_is_ids = true;
    if (r.prompt_ids.empty()) bad_request("prompt", "'prompt' must not be empty");
  } else {
    wrong_type("prompt", "a string or an array of token ids", p);
  }
}

void parse_messages(const json& j, ApiRequest& r) {
  auto it = j.find("messages");
  if (it == j.end() || it->is_null()) bad_request("messages", "'messages' is required");
  if (!it->is_array()) wrong_type("messages", "an array of message objects", *it);
  if (it->empty()) bad_request("messages", "'messages' must not be empty");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) wrong_type(at, "an object", m);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) bad_request(at + ".role", "'" + at + ".role' must be a string");
    auto content = m.find("content");
    const bool null_ok = *role == "assistant";  // an assistant turn with only tool_calls
    if (content == m.end() || content->is_null()) {
      if (!null_ok) bad_request(at + ".content", "'" + at + ".content' is required");
      continue;
    }
    if (content->is_string()) continue;
    if (!content->is_array()) wrong_type(at + ".content", "a string or an array of content parts", *content);
    for (size_t k = 0; k < content->size(); ++k) {
      const json& part = (*content)[k];
      const std::string pat = at + ".content[" + std::to_string(k) + "]";
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
        bad_request(pat, "'" + pat + "' must be {\"type\": \"text\", \"text\": \"...\"} (only text parts are supported)");
    }
  }
}

bool is_function_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}],
// checked, then passed to the template as the client wrote them.
void parse_tools(const json& j, ApiRequest& r) {
  auto it = j.find("tools");
  if (it == j.end() || it->is_null()) return;
  if (!it->is_array()) bad_request("tools", "'tools' must be an array of tool objects");
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& t = (*it)[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) bad_request(at, "'" + at + "' must be an object");
    auto type = t.find("type");
    if (type == t.end() || *type != "function")
      bad_request(at + ".type", "'" + at + ".type' must be \"function\" (the only tool type twofold calls)");
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) bad_request(at + ".function", "'" + at + ".function' must be an object");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || !is_function_name(name->get<std::string>()))
      bad_request(at + ".function.name", "'" + at + ".function.name' must be a string of 1 to 64 letters, digits, "
                                         "underscores or dashes");
    if (auto d = fn->find("description"); d != fn->end() && !d->is_null() && !d->is_string())
      bad_request(at + ".function.description", "'" + at + ".function.description' must be a string");
    if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null() && !p->is_object())
      bad_request(at + ".function.parameters", "'" + at + ".function.parameters' must be an object (a JSON Schema)");
    if (auto s = fn->find("strict"); s != fn->end() && !s->is_null() && !s->is_boolean())
      bad_request(at + ".function.strict", "'" + at + ".function.strict' must be a boolean");
  }
  if (!it->empty()) r.tools = *it;
}

// "none" (the tools are not listed), "auto", "required" or {"type": "function", "function":
// {"name"}} (the output is one call: of any tool, or of that one).
void parse_tool_choice(const json& tc, ApiRequest& r) {
  if (tc.is_string()) {
    const std::string v = tc.get<std::string>();
    if (v != "none" && v != "auto" && v != "required")
      bad_request("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or a function "
                                 "({\"type\": \"function\", \"function\": {\"name\": ...}}), got " + tc.dump().substr(0, 100));
    if (v == "none") r.tools = nullptr;
    r.tool_required = v == "required";
  } else if (tc.is_object()) {
    const auto type = tc.find("type");
    const auto fn = tc.find("function");
    if (type == tc.end() || *type != "function")
      bad_request("tool_choice.type", "'tool_choice.type' must be \"function\"");
    if (fn == tc.end() || !fn->is_object()) wrong_type("tool_choice.function", "an object", fn == tc.end() ? json() : *fn);
    const auto name = fn->find("name");
    if (name == fn->end() || !name->is_string())
      bad_request("tool_choice.function.name", "'tool_choice.function.name' must be a string");
    r.tool_named = name->get<std::string>();
  } else {
    wrong_type("tool_choice", "a string or an object", tc);
  }
  if ((r.tool_required || r.tool_named) && r.tools.is_null())
    bad_request("tool_choice", "'tool_choice' asks for a call, but the request has no 'tools'");
}

// {"type": "text"}, {"type": "json_object"} (the output is constrained to one JSON object) or
// {"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}} (to
// what the schema allows; compiled here so that a schema outside the subset is a 400 naming
// the keyword).
void parse_response_format(const json& v, SamplingParams& s) {
  if (!v.is_object()) wrong_type("response_format", "an object", v);
  const auto type = v.find("type");
  if (type == v.end()) bad_request("response_format", "'response_format' must have a 'type'");
  if (!type->is_string()) wrong_type("response_format.type", "a string", *type);
  for (const auto& [key, value] : v.items())
    if (key != "type" && !(key == "json_schema" && *type == "json_schema"))
      bad_request("response_format", "'response_format' of type " + type->dump() + " takes no '" + key.substr(0, 100) +
                                          "'");
  if (*type == "text") return;
  if (*type == "json_object") {
    s.output_format = OutputFormat::JsonObject;
    return;
  }
  if (*type != "json_schema")
    bad_request("response_format.type", "'response_format.type' must be \"text\", \"json_object\" or "
                                        "\"json_schema\", got " + type->dump().substr(0, 100));
  const auto js = v.find("json_schema");
  if (js == v.end()) bad_request("response_format.json_schema", "'response_format.json_schema' is required");
  if (!js->is_object()) wrong_type("response_format.json_schema", "an object", *js);
  for (const auto& [key, value] : js->items()) {
    const std::string at = "response_format.json_schema." + key.substr(0, 100);
    if (key == "name" || key == "description") {
      if (!value.is_string()) wrong_type(at, "a string", value);
    } else if (key == "strict") {
      if (!value.is_boolean() && !value.is_null()) wrong_type(at, "a boolean", value);
    } else if (key != "schema") {
      bad_request(at, "'" + at + "' is not a field of json_schema (name, description, schema, strict)");
    }
  }
  const auto name = js->find("name");
  if (name == js->end()) bad_request("response_format.json_schema.name", "'response_format.json_schema.name' is required");
  const auto schema = js->find("schema");
  if (schema == js->end() || schema->is_null())
    bad_request("response_format.json_schema.schema", "'response_format.json_schema.schema' is required (twofold "
                                                      "does not write free-form JSON for a schema it is not given)");
  s.output_format = OutputFormat::JsonSchema;
  s.json_schema = schema->dump();
  try {
    compile_json_schema(s.json_schema, "response_format.json_schema.schema");
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "invalid_request_error", "response_format.json_schema.schema",
                   "unsupported_parameter");
  }
}

// vLLM's extensions: guided_json (a schema, as an object or as JSON text), guided_regex (the
// whole output matches it) or guided_choice (the output is one of the strings); at most one
// of them, and not beside response_format (which the caller parsed first into s).
void parse_guided(const Fields& f, SamplingParams& s) {
  const char* given = nullptr;
  for (const char* key : {"guided_json", "guided_regex", "guided_choice"}) {
    const json* v = f.get(key);
    if (v == nullptr) continue;
    if (given) bad_request(key, std::string("'") + key + "' and '" + given + "' both shape the output; send one");
    if (s.output_format != OutputFormat::Text)
      bad_request(key, std::string("'") + key + "' and 'response_format' both shape the output; send one");
    given = key;
    const std::string what = key;
    if (what == "guided_json" && !v->is_object() && !v->is_string())
      wrong_type(what, "an object or a string of JSON", *v);
    if (what == "guided_regex" && !v->is_string()) wrong_type(what, "a string", *v);
    if (what == "guided_choice") {
      if (!v->is_array() || v->empty()) wrong_type(what, "a non-empty array of strings", *v);
      for (size_t i = 0; i < v->size(); ++i)
        if (!(*v)[i].is_string()) wrong_type(what + "[" + std::to_string(i) + "]", "a string", (*v)[i]);
    }
    try {
      if (what == "guided_json") {
        s.output_format = OutputFormat::JsonSchema;
        s.json_schema = v->is_string() ? v->get<std::string>() : v->dump();
        compile_json_schema(s.json_schema, what);
        continue;
      }
      s.output_format = OutputFormat::Regex;
      if (what == "guided_regex") {
        s.regex = v->get<std::string>();
      } else {
        for (size_t i = 0; i < v->size(); ++i) {
          if (i > 0) s.regex += '|';
          s.regex += regex_escape((*v)[i].get<std::string>());
        }
      }
      compile_regex(s.regex, what, RegexUse::Text);
    } catch (const Error& e) {
      throw ApiError(400, e.what(), "invalid_request_error", what, "unsupported_parameter");
    }
  }
}

}  // namespace

const char* prompt_param(Endpoint e) { return e == Endpoint::Chat ? "messages" : "prompt"; }

ApiRequest parse_completion_request(std::string_view body) {
  const json j = parse_body(body);
  check_fields(j, Endpoint::Completions);
  ApiRequest r{.endpoint = Endpoint::Completions};
  parse_common(j, r);
  parse_prompt(j, r);
  const Fields f(j);
  if (auto v = f.integer("logprobs", 0, 20)) {
    r.want_logprobs = true;
    r.sampling.logprobs = int32_t(*v);
  }
  r.echo = f.boolean("echo").value_or(false);
  // echo with logprobs: the prompt tokens' too; max_tokens 0 asks for nothing but the prompt
  // (the engine then scores it and generates nothing).
  if (r.max_tokens == 0 && !r.echo) bad_request("max_tokens", "max_tokens is 0; it must be at least 1 (0 only with echo)");
  if (r.echo && (r.want_logprobs || r.max_tokens == 0)) r.sampling.prompt_logprobs = std::max(r.sampling.logprobs, 0);
  if (auto v = f.integer("best_of", 1, std::numeric_limits<int32_t>::max()))
    refuse_unless(*v == 1, "best_of", "must be 1");
  if (const json* v = f.get("suffix")) refuse_unless(v->is_string() && v->get_ref<const std::string&>().empty(),
                                                     "suffix", "is not supported");
  parse_guided(f, r.sampling);
  return r;
}

ApiRequest parse_chat_request(std::string_view body) {
  const json j = parse_body(body);
  check_fields(j, Endpoint::Chat);
  ApiRequest r{.endpoint = Endpoint::Chat};
  parse_common(j, r);
  parse_messages(j, r);
  r.messages = j.at("messages");
  parse_tools(j, r);
  const Fields f(j);
  if (const json* tc = f.get("tool_choice")) parse_tool_choice(*tc, r);
  if (auto v = f.boolean("parallel_tool_calls")) r.parallel_tool_calls = *v;
  // The newer name wins, as in the OpenAI API.
  if (auto v = f.integer("max_completion_tokens", 1, std::numeric_limits<int32_t>::max())) r.max_tokens = int32_t(*v);
  if (r.max_tokens == 0) bad_request("max_tokens", "max_tokens is 0; it must be at least 1");
  r.want_logprobs = f.boolean("logprobs").value_or(false);
  if (auto v = f.integer("top_logprobs", 0, 20)) {
    refuse_unless(r.want_logprobs, "top_logprobs", "requires 'logprobs' to be true");
    r.sampling.logprobs = int32_t(*v);
  } else if (r.want_logprobs) {
    r.sampling.logprobs = 0;
  }
  if (const json* v = f.get("response_format")) parse_response_format(*v, r.sampling);
  parse_guided(f, r.sampling);
  if (auto v = f.boolean("add_generation_prompt")) r.add_generation_prompt = *v;
  if (const json* k = f.get("chat_template_kwargs")) {
    if (!k->is_object()) wrong_type("chat_template_kwargs", "an object", *k);
    r.chat_template_kwargs = *k;
  }
  return r;
}

void fit_max_tokens(ApiRequest& r, int64_t n_prompt, int64_t max_position) {
  const int64_t room = max_position - n_prompt;
  if (room < 1)
    bad_request(prompt_param(r.endpoint),
                "the prompt is " + std::to_string(n_prompt) + " tokens but the model's context is " +
                    std::to_string(max_position) + " tokens; at most " + std::to_string(max_position - 1) +
                    " prompt tokens leave room for one new token");
  if (r.max_tokens && *r.max_tokens > room)
    bad_request("max_tokens", "max_tokens is " + std::to_string(*r.max_tokens) + " but the model's context is " +
                                  std::to_string(max_position) + " tokens and the prompt takes " +
                                  std::to_string(n_prompt) + ", leaving room for " + std::to_string(room) +
                                  " new tokens");
  const int64_t dflt = r.endpoint == Endpoint::Chat ? room : std::min<int64_t>(16, room);
  r.sampling.max_tokens = int32_t(r.max_tokens.value_or(int32_t(dflt)));
}

}  // namespace tf::serve

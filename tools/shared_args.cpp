// Flags more than one verb takes (see commands.h), defined once.
#include <charconv>
#include <cstdio>
#include <random>

#include "chat/chat_template.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "core/split.h"
#include "sample/json_schema.h"
#include "tools/commands.h"

namespace tf::cli {

void add_sampling_args(CLI::App* app, SamplingArgs& a) {
  app->add_option("-n,--max-tokens", a.max_tokens, "New tokens at most")->capture_default_str();
  app->add_option("--temp", a.temp, "Temperature (0 = greedy)")->capture_default_str();
  app->add_option("--top-p", a.top_p, "Nucleus sampling: keep the smallest set with this much probability")
      ->capture_default_str();
  app->add_option("--top-k", a.top_k, "Keep the k most likely tokens (0 = off)")->capture_default_str();
  app->add_option("--min-p", a.min_p, "Drop tokens below min_p * p(most likely) (0 = off)")->capture_default_str();
  app->add_option("--repeat-penalty", a.repeat_penalty, "Repetition penalty (1 = off)")->capture_default_str();
  app->add_option("--presence-penalty", a.presence_penalty,
                  "Subtracted from the logit of every token already generated (0 = off; -2 to 2)")
      ->capture_default_str()
      ->check(CLI::Range(-2.0f, 2.0f));
  app->add_option("--frequency-penalty", a.frequency_penalty,
                  "Subtracted from a token's logit once per time it was generated (0 = off; -2 to 2)")
      ->capture_default_str()
      ->check(CLI::Range(-2.0f, 2.0f));
  app->add_option("--logit-bias", a.logit_bias,
                  "ID=BIAS: add BIAS (-100 to 100) to token ID's logit before the penalties (repeatable; -100 bans "
                  "the token in practice, 100 forces it)");
  app->add_option("--seed", a.seed, "RNG seed (same seed, same output; default random)");
  app->add_option("--stop", a.stop, "Stop string (repeatable); not included in the output");
  app->add_flag("--ignore-eos", a.ignore_eos, "Keep generating past the end-of-sequence token");
  CLI::Option* object = app->add_flag(
      "--json-object", a.json,
      "Constrain the output to one JSON object (as the server's response_format json_object): tokens that "
      "would break it are never sampled, and it ends when the object closes");
  CLI::Option* schema = app->add_option("--json-schema", a.json_schema,
                                        "Constrain the output to one JSON value this JSON Schema (text) allows, as "
                                        "the server's response_format json_schema (README: the supported subset)");
  CLI::Option* file =
      app->add_option("--json-schema-file", a.json_schema_file, "The same, with the schema read from this file")
          ->check(CLI::ExistingFile);
  object->excludes(schema)->excludes(file);
  schema->excludes(file);
}

namespace {

// "ID=BIAS" -> (ID, BIAS); the engine checks ID against the vocabulary.
std::pair<int32_t, float> parse_logit_bias(const std::string& s) {
  const size_t eq = s.find('=');
  const std::optional<int64_t> id =
      eq == std::string::npos ? std::nullopt : parse_int(std::string_view(s).substr(0, eq), 0, INT32_MAX);
  // The bias must be read whole too: "5=1x" is an error.
  float bias = 0;
  const char* end = s.data() + s.size();
  const auto [ptr, ec] = id ? std::from_chars(s.data() + eq + 1, end, bias) : std::from_chars_result{};
  if (!id || ec != std::errc() || ptr != end)
    fail("--logit-bias: expected ID=BIAS with a token id and a number, got '{}'", s);
  if (!(bias >= -100 && bias <= 100)) fail("--logit-bias: the bias must be in [-100, 100], got '{}'", s);
  return {int32_t(*id), bias};
}

}  // namespace

SamplingParams sampling_params(const SamplingArgs& a, uint64_t seed) {
  SamplingParams p{.temperature = a.temp, .top_k = a.top_k, .top_p = a.top_p, .min_p = a.min_p,
                   .repetition_penalty = a.repeat_penalty, .presence_penalty = a.presence_penalty,
                   .frequency_penalty = a.frequency_penalty, .seed = seed,
                   .max_tokens = a.max_tokens, .stop = a.stop, .ignore_eos = a.ignore_eos,
                   .output_format = a.json ? OutputFormat::JsonObject : OutputFormat::Text};
  for (const std::string& s : a.logit_bias) p.logit_bias.push_back(parse_logit_bias(s));
  if (!a.json_schema.empty() || !a.json_schema_file.empty()) {
    const bool in_file = !a.json_schema_file.empty();
    p.output_format = OutputFormat::JsonSchema;
    p.json_schema = in_file ? read_text_file(a.json_schema_file) : a.json_schema;
    compile_json_schema(p.json_schema, in_file ? "--json-schema-file " + a.json_schema_file : "--json-schema");
  }
  return p;
}

uint64_t seed_of(const SamplingArgs& a) { return a.seed >= 0 ? uint64_t(a.seed) : std::random_device{}(); }

void add_spec_args(CLI::App* app, SpecArgs& a) {
  app->add_option("--spec", a.spec,
                  "Speculative decoding: draft:DIR (a small model with the same tokenizer proposes tokens) or ngram "
                  "(prompt lookup: tokens that followed the last few tokens earlier in prompt + output)");
  app->add_option("--spec-k", a.k, "Proposed tokens per sequence and step, at most")->capture_default_str();
  app->add_option("--spec-adaptive", a.adaptive,
                  "on: proposal length per sequence from its acceptance rate and per step from the measured cost of "
                  "verifying at that batch size (none where it does not pay); off: always --spec-k")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  app->add_option("--spec-costs", a.costs,
                  "Cost model for --spec-adaptive on (a `bench --spec ... --json` result or its spec_cost_model) "
                  "instead of measuring it at start-up")
      ->check(CLI::ExistingFile);
}

SpecOptions spec_options(const SpecArgs& a) {
  SpecOptions o{.k = a.k, .adaptive = a.adaptive == "on", .cost_model_file = a.costs};
  if (a.spec.empty()) return o;
  if (a.spec == "ngram") {
    o.method = "ngram";
  } else if (a.spec.rfind("draft:", 0) == 0 && a.spec.size() > 6) {
    o.method = "draft";
    o.draft_model_dir = a.spec.substr(6);
  } else {
    fail("--spec: expected draft:DIR or ngram, got '{}'", a.spec);
  }
  if (a.k < 1) fail("--spec-k: must be at least 1, got {}", a.k);
  return o;
}

CLI::Option* add_prompt_arg(CLI::App* app, std::string& prompt, const std::string& what) {
  return app->add_option("-p,--prompt", prompt, what + " (\"-\": read it from standard input, byte for byte)");
}

std::string prompt_text(const std::string& arg) {
  if (arg != "-") return arg;
  std::string text;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) text.append(buf, n);
  if (std::ferror(stdin)) fail("--prompt -: cannot read standard input");
  return text;
}

void add_chat_template_arg(CLI::App* app, std::string& path) {
  app->add_option("--chat-template", path,
                  "Jinja chat template file to render messages with instead of the model's own (needed when the "
                  "model has none; examples/chatml.jinja is ChatML)")
      ->check(CLI::ExistingFile);
}

std::optional<ChatTemplate> load_chat_template(const std::string& model, const std::string& file) {
  if (!file.empty()) return ChatTemplate::from_file(file, model);
  return ChatTemplate::from_model(model);
}

void add_chat_template_kwargs_arg(CLI::App* app, std::string& text) {
  app->add_option("--chat-template-kwargs", text,
                  "More variables for the chat template, a JSON object, e.g. '{\"enable_thinking\": false}' "
                  "(Qwen3: answer without a <think> block)")
      ->check([](const std::string& t) -> std::string {
        const auto j = nlohmann::ordered_json::parse(t, nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded()) return "not valid JSON: " + t.substr(0, 200);
        if (!j.is_object()) return "must be a JSON object, got " + std::string(j.type_name());
        return "";
      });
}

nlohmann::ordered_json chat_template_kwargs(const std::string& text) {
  if (text.empty()) return nlohmann::ordered_json::object();
  return nlohmann::ordered_json::parse(text);
}

}  // namespace tf::cli

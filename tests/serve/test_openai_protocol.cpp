// Parsing and validation of OpenAI request bodies (no model, no HTTP): every field's type
// and range errors name the field; fields twofold does not implement and fields it does not
// know are refused by name; defaults and fitting max_tokens to the context.
#include <gtest/gtest.h>

#include <tuple>

#include "serve/api_error.h"
#include "serve/openai_protocol.h"
#include "test_util.h"

namespace tf::serve {
namespace {

// The ApiError a body raises (a test failure if none).
ApiError error_of(Endpoint e, const std::string& body) {
  try {
    if (e == Endpoint::Chat) parse_chat_request(body);
    else parse_completion_request(body);
  } catch (const ApiError& err) {
    return err;
  }
  ADD_FAILURE() << "no error for " << body;
  return ApiError(0, "", "");
}

std::string param_of(const ApiError& e) {
  const auto p = e.to_json()["error"]["param"];
  return p.is_null() ? "<null>" : p.get<std::string>();
}

TEST(OpenAiProtocol, CompletionFieldsAndDefaults) {
  const ApiRequest r = parse_completion_request(
      R"({"model": "m", "prompt": "Hi", "max_tokens": 5, "temperature": 0, "top_p": 0.9, "top_k": 40,
          "min_p": 0.05, "repetition_penalty": 1.1, "presence_penalty": 0.5, "frequency_penalty": -1.5,
          "logit_bias": {"17": -100, "3": 2.5}, "seed": 7, "stop": ["\n", "END"], "n": 3,
          "stream": true, "stream_options": {"include_usage": true}, "logprobs": 3, "priority": 2,
          "ignore_eos": true, "user": "ignored"})");
  EXPECT_EQ(r.endpoint, Endpoint::Completions);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt_text, "Hi");
  EXPECT_FALSE(r.prompt_is_ids);
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.1f);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -1.5f);
  EXPECT_EQ(r.sampling.logit_bias, (std::vector<std::pair<int32_t, float>>{{17, -100.0f}, {3, 2.5f}}));
  EXPECT_EQ(r.sampling.seed, 7u);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.sampling.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.want_logprobs);
  EXPECT_EQ(r.sampling.logprobs, 3);
  EXPECT_EQ(r.priority, 2);
  EXPECT_EQ(r.n, 3);
  EXPECT_TRUE(r.sampling.ignore_eos);

  const ApiRequest d = parse_completion_request(R"({"prompt": "Hi", "temperature": null, "stop": "x"})");
  EXPECT_FALSE(d.model.has_value());
  EXPECT_FALSE(d.max_tokens.has_value());
  EXPECT_EQ(d.sampling.temperature, 1.0f);  // null is "default"
  EXPECT_FALSE(d.seed_given);
  EXPECT_FALSE(d.stream);
  EXPECT_FALSE(d.want_logprobs);
  EXPECT_EQ(d.sampling.logprobs, -1);
  EXPECT_EQ(d.sampling.stop, std::vector<std::string>{"x"});
}

// echo: the prompt's logprobs asked of the engine with logprobs, or with max_tokens 0 (which
// only scores the prompt); without either, none.
TEST(OpenAiProtocol, EchoAsksForThePromptsLogprobs) {
  ApiRequest r = parse_completion_request(R"({"prompt": "a b", "echo": true, "logprobs": 2})");
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.sampling.prompt_logprobs, 2);
  r = parse_completion_request(R"({"prompt": "a b", "echo": true, "max_tokens": 0})");
  EXPECT_EQ(r.max_tokens, 0);
  EXPECT_EQ(r.sampling.prompt_logprobs, 0);
  r = parse_completion_request(R"({"prompt": "a b", "echo": true})");
  EXPECT_EQ(r.sampling.prompt_logprobs, -1);
  r = parse_completion_request(R"({"prompt": "a b", "echo": false, "logprobs": 1})");
  EXPECT_FALSE(r.echo);
  EXPECT_EQ(r.sampling.prompt_logprobs, -1);
}

TEST(OpenAiProtocol, PromptForms) {
  EXPECT_EQ(parse_completion_request(R"({"prompt": ["one"]})").prompt_text, "one");
  const ApiRequest ids = parse_completion_request(R"({"prompt": [1, 2, 3]})");
  EXPECT_TRUE(ids.prompt_is_ids);
  EXPECT_EQ(ids.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(parse_completion_request(R"({"prompt": [[4, 5]]})").prompt_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(param_of(error_of(Endpoint::Completions, R"({"prompt": ["a", "b"]})")), "prompt");
  EXPECT_EQ(param_of(error_of(Endpoint::Completions, R"({"prompt": [1, -2]})")), "prompt");
  EXPECT_EQ(param_of(error_of(Endpoint::Completions, R"({"prompt": [1, "x"]})")), "prompt");
  EXPECT_EQ(param_of(error_of(Endpoint::Completions, R"({"prompt": []})")), "prompt");
  EXPECT_EQ(param_of(error_of(Endpoint::Completions, R"({"prompt": ""})")), "prompt");
  EXPECT_EQ(param_of(error_of(Endpoint::Completions, R"({"prompt": 5})")), "prompt");
  EXPECT_EQ(param_of(error_of(Endpoint::Completions, R"({"max_tokens": 5})")), "prompt");
}

TEST(OpenAiProtocol, InvalidJsonAndNonObjects) {
  for (const char* body : {"{", "", "{\"prompt\": \"a\",}", "nul"}) {
    const ApiError e = error_of(Endpoint::Completions, body);
    EXPECT_EQ(e.status(), 400);
    EXPECT_CONTAINS(std::string(e.what()), "not valid JSON");
    EXPECT_EQ(e.to_json()["error"]["type"], "invalid_request_error");
  }
  EXPECT_CONTAINS(std::string(error_of(Endpoint::Chat, "[1, 2]").what()), "must be a JSON object");
}

// Each (body, field) pair: a wrong type or an out-of-range value, reported as 400 naming the field.
TEST(OpenAiProtocol, WrongTypesAndRangesNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"prompt": "a", "max_tokens": "5"})", "max_tokens"},
      {R"({"prompt": "a", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "a", "max_tokens": 2.5})", "max_tokens"},
      {R"({"prompt": "a", "max_tokens": 99999999999})", "max_tokens"},
      {R"({"prompt": "a", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "a", "temperature": -1})", "temperature"},
      {R"({"prompt": "a", "top_p": 0})", "top_p"},
      {R"({"prompt": "a", "top_p": 1.5})", "top_p"},
      // Found by fuzz_openai_request: positive as a double, 0 (or infinite) as the float kept.
      {R"({"prompt": "a", "temperature": -0, "top_p": 1e-300})", "top_p"},
      {R"({"prompt": "a", "repetition_penalty": 1e-50})", "repetition_penalty"},
      {R"({"prompt": "a", "temperature": 1e300})", "temperature"},
      {R"({"prompt": "a", "top_k": -2})", "top_k"},
      {R"({"prompt": "a", "top_k": true})", "top_k"},
      {R"({"prompt": "a", "min_p": 2})", "min_p"},
      {R"({"prompt": "a", "repetition_penalty": 0})", "repetition_penalty"},
      {R"({"prompt": "a", "seed": "x"})", "seed"},
      {R"({"prompt": "a", "stop": 3})", "stop"},
      {R"({"prompt": "a", "stop": ["ok", 3]})", "stop[1]"},
      {R"({"prompt": "a", "n": 0})", "n"},
      {R"({"prompt": "a", "n": 129})", "n"},
      {R"({"prompt": "a", "n": 1.5})", "n"},
      {R"({"prompt": "a", "stream": "yes"})", "stream"},
      {R"({"prompt": "a", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": "a", "stream": true, "stream_options": {"include_usage": 1}})", "stream_options.include_usage"},
      {R"({"prompt": "a", "logprobs": 21})", "logprobs"},
      {R"({"prompt": "a", "logprobs": true})", "logprobs"},
      {R"({"prompt": "a", "priority": "high"})", "priority"},
      {R"({"prompt": "a", "model": 3})", "model"},
      {R"({"prompt": "a", "echo": 1})", "echo"},
      {R"({"prompt": "a", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "a", "max_tokens": -1, "echo": true})", "max_tokens"},
      {R"({"prompt": "a", "best_of": 3})", "best_of"},
      {R"({"prompt": "a", "presence_penalty": 2.5})", "presence_penalty"},
      {R"({"prompt": "a", "frequency_penalty": -3})", "frequency_penalty"},
      {R"({"prompt": "a", "frequency_penalty": "high"})", "frequency_penalty"},
      {R"({"prompt": "a", "logit_bias": {"5": 101}})", "logit_bias"},
      {R"({"prompt": "a", "logit_bias": {"x5": 1}})", "logit_bias"},
      {R"({"prompt": "a", "logit_bias": {"-5": 1}})", "logit_bias"},
      {R"({"prompt": "a", "logit_bias": {"5": "1"}})", "logit_bias"},
      {R"({"prompt": "a", "logit_bias": [5, 1]})", "logit_bias"},
  };
  for (const auto& [body, field] : cases) {
    const ApiError e = error_of(Endpoint::Completions, body);
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_EQ(param_of(e), field) << body << ": " << e.what();
    EXPECT_CONTAINS(std::string(e.what()), field);
  }
}

TEST(OpenAiProtocol, ChatMessagesAndLogprobs) {
  const ApiRequest r = parse_chat_request(
      R"({"messages": [{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                       {"role": "assistant", "content": null, "tool_calls": []}],
          "max_completion_tokens": 9, "max_tokens": 3, "logprobs": true, "top_logprobs": 2})");
  EXPECT_EQ(r.endpoint, Endpoint::Chat);
  EXPECT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.max_tokens, 9);  // max_completion_tokens wins
  EXPECT_TRUE(r.want_logprobs);
  EXPECT_EQ(r.sampling.logprobs, 2);
  EXPECT_TRUE(r.add_generation_prompt);
  EXPECT_EQ(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})").sampling.logprobs, 0);

  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": "hi"})", "messages"},
      {R"({"messages": [3]})", "messages[0]"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "user"}]})", "messages[1].content"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages[0].content[0]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})", "logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "prompt": "x"})", "prompt"},
  };
  for (const auto& [body, field] : cases) {
    const ApiError e = error_of(Endpoint::Chat, body);
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_EQ(param_of(e), field) << body << ": " << e.what();
  }
}

// A field the server does not implement changes what the client gets back, so it is refused
// by name unless it asks for nothing; a field it does not know at all is refused too (as
// the OpenAI API refuses unrecognized arguments), never silently ignored.
TEST(OpenAiProtocol, UnimplementedAndUnknownFieldsAreRefusedByName) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  auto chat = [&](const std::string& extra) { return "{" + msgs + ", " + extra + "}"; };
  const std::vector<std::string> refused = {
      R"("functions": [{"name": "f", "parameters": {}}])",
      R"("function_call": {"name": "f"})",
      R"("modalities": ["text", "audio"])",
      R"("audio": {"voice": "alloy", "format": "wav"})",
      R"("prediction": {"type": "content", "content": "x"})",
      R"("reasoning_effort": "low")",
      R"("verbosity": "low")",
      R"("web_search_options": {})",
      R"("store": true)",
  };
  for (const std::string& extra : refused) {
    const ApiError e = error_of(Endpoint::Chat, chat(extra));
    const std::string field = extra.substr(1, extra.find('"', 1) - 1);
    EXPECT_EQ(e.status(), 400) << extra;
    EXPECT_EQ(param_of(e), field) << extra;
    EXPECT_EQ(e.to_json()["error"]["code"], "unsupported_parameter") << extra;
    EXPECT_CONTAINS(std::string(e.what()), "not supported");
  }
  // The values that ask for nothing, and the fields without effect, are accepted.
  for (const char* extra :
       {R"("response_format": {"type": "text"})", R"("tools": [])", R"("tool_choice": "none")",
        R"("tool_choice": "auto")", R"("functions": [])", R"("function_call": "none")", R"("modalities": ["text"])",
        R"("store": false)", R"("audio": null)", R"("user": "u-1")", R"("metadata": {"k": "v"})",
        R"("service_tier": "auto")", R"("safety_identifier": "s")", R"("prompt_cache_key": "p")",
        R"("parallel_tool_calls": false)", R"("stream": true, "stream_options": {"include_obfuscation": false})"})
    EXPECT_NO_THROW(parse_chat_request(chat(extra))) << extra;
  EXPECT_EQ(param_of(error_of(Endpoint::Chat, chat(R"("user": 5)"))), "user");
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f"}}], )";
  EXPECT_TRUE(parse_chat_request(chat(tools + R"("tool_choice": "required")")).tool_required);
  EXPECT_EQ(parse_chat_request(chat(tools + R"("tool_choice": {"type": "function", "function": {"name": "f"}})"))
                .tool_named,
            "f");
  EXPECT_TRUE(parse_chat_request(chat(tools + R"("tool_choice": "none")")).tools.is_null());
  for (const auto& [extra, field] : std::vector<std::pair<std::string, std::string>>{
           {R"("tool_choice": "required")", "tool_choice"},  // no tools
           {tools + R"("tool_choice": "always")", "tool_choice"},
           {tools + R"("tool_choice": 1)", "tool_choice"},
           {tools + R"("tool_choice": {"type": "tool", "function": {"name": "f"}})", "tool_choice.type"},
           {tools + R"("tool_choice": {"type": "function"})", "tool_choice.function"},
           {tools + R"("tool_choice": {"type": "function", "function": {}})", "tool_choice.function.name"}}) {
    const ApiError e = error_of(Endpoint::Chat, chat(extra));
    EXPECT_EQ(e.status(), 400) << extra;
    EXPECT_EQ(param_of(e), field) << extra << ": " << e.what();
  }
  EXPECT_EQ(parse_chat_request(chat(R"("response_format": {"type": "text"})")).sampling.output_format,
            OutputFormat::Text);
  EXPECT_EQ(parse_chat_request(chat(R"("response_format": {"type": "json_object"})")).sampling.output_format,
            OutputFormat::JsonObject);
  EXPECT_EQ(parse_chat_request(chat(R"("response_format": null)")).sampling.output_format, OutputFormat::Text);
  const ApiRequest js = parse_chat_request(chat(
      R"("response_format": {"type": "json_schema", "json_schema": {"name": "p", "strict": true, "schema": )"
      R"({"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}}}})"));
  EXPECT_EQ(js.sampling.output_format, OutputFormat::JsonSchema);
  EXPECT_EQ(js.sampling.json_schema,  // the client's key order kept
            R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}}})");
  for (const auto& [extra, field] : std::vector<std::pair<std::string, std::string>>{
           {R"("response_format": "json_object")", "response_format"},
           {R"("response_format": {})", "response_format"},
           {R"("response_format": {"type": 1})", "response_format.type"},
           {R"("response_format": {"type": "xml"})", "response_format.type"},
           {R"("response_format": {"type": "json_object", "schema": {}})", "response_format"},
           {R"("response_format": {"type": "json_schema"})", "response_format.json_schema"},
           {R"("response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}})",
            "response_format.json_schema.name"},
           {R"("response_format": {"type": "json_schema", "json_schema": {"name": "x"}})",
            "response_format.json_schema.schema"},
           {R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "extra": 1}})",
            "response_format.json_schema.extra"},
           {R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}})",
            "response_format.json_schema.schema"},
           {R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object",)"
            R"( "properties": {"d": {"type": "string", "format": "uri"}}}}})",
            "response_format.json_schema.schema"}}) {
    const ApiError e = error_of(Endpoint::Chat, chat(extra));
    EXPECT_EQ(e.status(), 400) << extra;
    EXPECT_EQ(param_of(e), field) << extra << ": " << e.what();
  }
  EXPECT_EQ(param_of(error_of(Endpoint::Chat, chat(R"("metadata": "x")"))), "metadata");

  // Unknown fields, and the other endpoint's fields, name themselves.
  for (const auto& [e, body, field] : std::vector<std::tuple<Endpoint, std::string, std::string>>{
           {Endpoint::Completions, R"({"prompt": "a", "unknown_field": [1, 2]})", "unknown_field"},
           {Endpoint::Completions, R"({"prompt": "a", "guided_grammar": "root ::= x"})", "guided_grammar"},
           {Endpoint::Completions, R"({"prompt": "a", "response_format": {"type": "text"}})", "response_format"},
           {Endpoint::Completions, R"({"prompt": "a", "messages": []})", "messages"},
           {Endpoint::Chat, chat(R"("min_tokens": 3)"), "min_tokens"},
           {Endpoint::Chat, chat(R"("stream": true, "stream_options": {"chunk": 1})"), "stream_options.chunk"},
       }) {
    const ApiError err = error_of(e, body);
    EXPECT_EQ(err.status(), 400) << body;
    EXPECT_EQ(param_of(err), field) << body;
    EXPECT_EQ(err.to_json()["error"]["code"], "unknown_parameter") << body;
    EXPECT_CONTAINS(std::string(err.what()), "unrecognized request argument");
  }
}

// vLLM's guided_json, guided_regex and guided_choice, on both endpoints: what they set, and
// each fault named (two at once, beside response_format, wrong types, outside the subsets).
TEST(OpenAiProtocol, GuidedFieldsOfVllm) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  auto chat = [&](const std::string& extra) { return "{" + msgs + ", " + extra + "}"; };
  const ApiRequest js = parse_completion_request(R"({"prompt": "a", "guided_json": {"type": "object",
      "properties": {"b": {"type": "integer"}}}})");
  EXPECT_EQ(js.sampling.output_format, OutputFormat::JsonSchema);
  EXPECT_EQ(js.sampling.json_schema, R"({"type":"object","properties":{"b":{"type":"integer"}}})");
  EXPECT_EQ(parse_chat_request(chat(R"("guided_json": "{\"type\": \"object\"}")")).sampling.json_schema,
            R"({"type": "object"})");
  const ApiRequest re = parse_chat_request(chat(R"("guided_regex": "\\d{3}")"));
  EXPECT_EQ(re.sampling.output_format, OutputFormat::Regex);
  EXPECT_EQ(re.sampling.regex, R"(\d{3})");
  const ApiRequest choice = parse_completion_request(R"x({"prompt": "a", "guided_choice": ["yes", "no (1.5)"]})x");
  EXPECT_EQ(choice.sampling.output_format, OutputFormat::Regex);
  EXPECT_EQ(choice.sampling.regex, R"(yes|no \(1\.5\))");
  for (const auto& [e, body, field, words] : std::vector<std::tuple<Endpoint, std::string, std::string, std::string>>{
           {Endpoint::Completions, R"({"prompt": "a", "guided_regex": "a", "guided_choice": ["b"]})", "guided_choice",
            "'guided_choice' and 'guided_regex' both shape the output"},
           {Endpoint::Chat, chat(R"("response_format": {"type": "json_object"}, "guided_regex": "a")"), "guided_regex",
            "'guided_regex' and 'response_format'"},
           {Endpoint::Completions, R"({"prompt": "a", "guided_regex": 5})", "guided_regex", "a string"},
           {Endpoint::Completions, R"({"prompt": "a", "guided_choice": []})", "guided_choice", "non-empty array"},
           {Endpoint::Completions, R"({"prompt": "a", "guided_choice": ["a", 1]})", "guided_choice[1]", "a string"},
           {Endpoint::Completions, R"({"prompt": "a", "guided_json": 3})", "guided_json", "an object or a string"},
           {Endpoint::Completions, R"({"prompt": "a", "guided_regex": "(a)\\1"})", "guided_regex", "the escape \\1"},
           {Endpoint::Chat, chat(R"("guided_json": {"type": "object", "properties": {"u": {"format": "uri",
               "type": "string"}}})"), "guided_json", "guided_json: 'format' at '#/properties/u'"},
       }) {
    SCOPED_TRACE(body);
    const ApiError err = error_of(e, body);
    EXPECT_EQ(err.status(), 400);
    EXPECT_EQ(param_of(err), field);
    EXPECT_NE(std::string(err.what()).find(words), std::string::npos) << err.what();
  }
}

TEST(OpenAiProtocol, ToolsKeepTheClientsKeyOrderAndNameTheFieldAtFault) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "x", "name": "u"}])";
  const ApiRequest r = parse_chat_request(
      "{" + msgs + R"(, "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
                       "parameters": {"type": "object", "properties": {"zeta": {}, "alpha": {}}}, "strict": true}}]})");
  ASSERT_TRUE(r.tools.is_array());
  EXPECT_EQ(r.tools.dump(), R"([{"type":"function","function":{"name":"get_weather","description":"d","parameters":)"
                            R"({"type":"object","properties":{"zeta":{},"alpha":{}}},"strict":true}}])");
  EXPECT_EQ(r.messages.dump(), R"([{"role":"user","content":"x","name":"u"}])");  // not sorted
  // tool_choice "none": the tools are neither listed nor looked for; an empty list is none.
  EXPECT_TRUE(parse_chat_request("{" + msgs + R"(, "tools": [{"type": "function", "function": {"name": "f"}}],
                                  "tool_choice": "none"})").tools.is_null());
  EXPECT_TRUE(parse_chat_request("{" + msgs + R"(, "tools": []})").tools.is_null());
  EXPECT_FALSE(parse_chat_request("{" + msgs + R"(, "tools": [{"type": "function", "function": {"name": "f"}}],
                                   "tool_choice": "auto"})").tools.is_null());
  EXPECT_TRUE(parse_chat_request("{" + msgs + "}").parallel_tool_calls);
  EXPECT_FALSE(parse_chat_request("{" + msgs + R"(, "parallel_tool_calls": false})").parallel_tool_calls);
  EXPECT_EQ(param_of(error_of(Endpoint::Chat, "{" + msgs + R"(, "parallel_tool_calls": 0})")), "parallel_tool_calls");

  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("tools": "f")", "tools"},
      {R"("tools": [3])", "tools[0]"},
      {R"("tools": [{"function": {"name": "f"}}])", "tools[0].type"},
      {R"("tools": [{"type": "code_interpreter"}])", "tools[0].type"},
      {R"("tools": [{"type": "function"}])", "tools[0].function"},
      {R"("tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {}}])",
       "tools[1].function.name"},
      {R"("tools": [{"type": "function", "function": {"name": "get weather"}}])", "tools[0].function.name"},
      {R"("tools": [{"type": "function", "function": {"name": ")" + std::string(65, 'a') + R"("}}])",
       "tools[0].function.name"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "description": 1}}])",
       "tools[0].function.description"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "parameters": []}}])",
       "tools[0].function.parameters"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}])", "tools[0].function.strict"},
  };
  for (const auto& [extra, field] : cases) {
    const ApiError e = error_of(Endpoint::Chat, "{" + msgs + ", " + extra + "}");
    EXPECT_EQ(e.status(), 400) << extra;
    EXPECT_EQ(param_of(e), field) << extra << ": " << e.what();
  }
}

// nlohmann alone stops at a NUL; the bytes after it are not ignored: `{...}\0garbage` is a 400.
TEST(OpenAiProtocol, NulInTheBodyIs400) {
  using namespace std::string_literals;
  const ApiError e = error_of(Endpoint::Completions, "{\"prompt\": \"a\"}\0garbage"s);
  EXPECT_EQ(e.status(), 400);
  EXPECT_CONTAINS(std::string(e.what()), "NUL byte at offset 15");
}

// Found by fuzz_openai_request: the parse error quotes the client's invalid UTF-8, and the
// error body must still serialize (dump replaces it; a plain json::dump throws).
TEST(OpenAiProtocol, ErrorQuotingInvalidUtf8StillSerializes) {
  const ApiError e = error_of(Endpoint::Completions, "{\"prompt\": \"\xe9?\\ud83d\"}");
  EXPECT_EQ(e.status(), 400);
  std::string body;
  ASSERT_NO_THROW(body = dump(e.to_json()));
  EXPECT_TRUE(nlohmann::json::parse(body)["error"]["message"].is_string());
}

TEST(OpenAiProtocol, FitMaxTokensToTheContext) {
  ApiRequest c = parse_completion_request(R"({"prompt": "a"})");
  fit_max_tokens(c, 10, 1024);
  EXPECT_EQ(c.sampling.max_tokens, 16);  // OpenAI's completions default
  fit_max_tokens(c, 1020, 1024);
  EXPECT_EQ(c.sampling.max_tokens, 4);  // the default shrinks to the room left

  ApiRequest chat = parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}]})");
  fit_max_tokens(chat, 24, 1024);
  EXPECT_EQ(chat.sampling.max_tokens, 1000);  // chat: the rest of the context

  ApiRequest big = parse_completion_request(R"({"prompt": "a", "max_tokens": 1000})");
  fit_max_tokens(big, 24, 1024);
  EXPECT_EQ(big.sampling.max_tokens, 1000);
  try {
    fit_max_tokens(big, 25, 1024);
    ADD_FAILURE() << "max_tokens beyond the context accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(param_of(e), "max_tokens");
    EXPECT_CONTAINS(std::string(e.what()), "1024");
  }
  try {
    fit_max_tokens(chat, 1024, 1024);
    ADD_FAILURE() << "a prompt filling the context accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(param_of(e), "messages");
  }
}

}  // namespace
}  // namespace tf::serve

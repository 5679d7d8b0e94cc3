// Tool calls out of chat output (src/serve/tool_calls.*): the format a real template
// teaches, whole parsing per format, and streaming that ends with what whole parsing gives
// however the text arrives.
#include "serve/tool_calls.h"

#include <gtest/gtest.h>

#include "chat/chat_template.h"
#include "model/tokenizer/tokenizer.h"
#include "serve/openai_response.h"
#include "test_util.h"

namespace tf::serve {
namespace {

using nlohmann::json;

std::string counter_id() {
  static int n = 0;
  return "call_" + std::to_string(n++);
}

struct Call {
  std::string name;
  json arguments;
  bool operator==(const Call&) const = default;
};

std::vector<Call> calls_of(const ParsedOutput& p) {
  std::vector<Call> out;
  for (const ToolCall& c : p.calls) {
    EXPECT_TRUE(c.id.starts_with("call_"));
    out.push_back({c.name, json::parse(c.arguments)});
  }
  return out;
}

ParsedOutput whole(ToolCallFormat f, std::string_view text) { return parse_tool_calls(f, text, counter_id); }

TEST(ToolCallFormat, FromRealTemplates) {
  const auto qwen3 = ChatTemplate::from_model_dir(test::data_path("tokenizers/qwen3-151k")).value();
  EXPECT_EQ(tool_call_format_of_template(qwen3.source()), ToolCallFormat::Hermes);
  // Llama 3.0's template lists no tools.
  const auto llama3 = ChatTemplate::from_model_dir(test::data_path("tokenizers/llama3-128k")).value();
  EXPECT_EQ(tool_call_format_of_template(llama3.source()), ToolCallFormat::None);
  const auto chatml = ChatTemplate::from_file(test::source_path("examples/chatml.jinja"), "");
  EXPECT_EQ(tool_call_format_of_template(chatml.source()), ToolCallFormat::None);
  // The instruction Llama 3.1's template writes before the tools.
  EXPECT_EQ(tool_call_format_of_template(
                R"({{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }})"),
            ToolCallFormat::Llama3Json);
  EXPECT_EQ(tool_call_format_named("llama3-json"), ToolCallFormat::Llama3Json);
  EXPECT_EQ(tool_call_format_named("hermes"), ToolCallFormat::Hermes);
  EXPECT_EQ(tool_call_format_named("mistral"), ToolCallFormat::Mistral);
  EXPECT_EQ(tool_call_format_named("xml"), std::nullopt);
  // Mistral's templates write earlier calls after the [TOOL_CALLS] control token.
  EXPECT_EQ(tool_call_format_of_template("{%- if message.tool_calls %}{{- '[TOOL_CALLS]' }}{%- endif %}"),
            ToolCallFormat::Mistral);
}

TEST(ToolCallsHermes, OneCallAfterContent) {
  const ParsedOutput p = whole(ToolCallFormat::Hermes,
                               "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                               "{\"city\": \"Paris\", \"days\": 2}}\n</tool_call>");
  EXPECT_EQ(p.content, "Let me check.");
  EXPECT_EQ(calls_of(p), (std::vector<Call>{{"get_weather", {{"city", "Paris"}, {"days", 2}}}}));
}

TEST(ToolCallsHermes, ArgumentsKeepTheModelsKeyOrder) {
  const ParsedOutput p = whole(ToolCallFormat::Hermes,
                               "<tool_call>{\"name\": \"f\", \"arguments\": {\"zeta\": 1, \"alpha\": "
                               "{\"y\": 2, \"b\": \"\u00e9\"}}}</tool_call>");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{\"zeta\":1,\"alpha\":{\"y\":2,\"b\":\"\xc3\xa9\"}}");
}

TEST(ToolCallsHermes, SeveralCallsAListAndAnUnclosedLastCall) {
  const ParsedOutput two = whole(ToolCallFormat::Hermes,
                                 "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n"
                                 "<tool_call>{\"name\": \"b\", \"arguments\": {\"x\": [1, \"}\"]}}</tool_call>");
  EXPECT_EQ(two.content, "");
  EXPECT_EQ(calls_of(two), (std::vector<Call>{{"a", json::object()}, {"b", {{"x", {1, "}"}}}}}));
  // SmolLM2 writes a list inside one pair of tags.
  const ParsedOutput list = whole(ToolCallFormat::Hermes,
                                  "<tool_call>[{\"name\": \"a\", \"arguments\": {\"n\": 1}}, "
                                  "{\"name\": \"b\", \"arguments\": {}}]</tool_call>");
  EXPECT_EQ(calls_of(list), (std::vector<Call>{{"a", {{"n", 1}}}, {"b", json::object()}}));
  // The output ended (EOS) before the closing tag.
  const ParsedOutput open = whole(ToolCallFormat::Hermes, "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n");
  EXPECT_EQ(calls_of(open), (std::vector<Call>{{"a", json::object()}}));
}

TEST(ToolCallsHermes, ArgumentsAsAStringAndTextAfterTheCalls) {
  const ParsedOutput p = whole(ToolCallFormat::Hermes,
                               "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"k\\\": true}\"}</tool_call>\n"
                               "  Done.  ");
  EXPECT_EQ(p.content, "Done.");
  const ParsedOutput both = whole(ToolCallFormat::Hermes,
                                  "Sure.\n<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\nMore?");
  EXPECT_EQ(both.content, "Sure.\nMore?");
  EXPECT_EQ(calls_of(p), (std::vector<Call>{{"f", {{"k", true}}}}));
}

TEST(ToolCallsHermes, WhatDoesNotParseStaysContent) {
  for (const char* text : {
           "no calls at all",
           "<tool_call>{\"name\": \"f\", \"arguments\": {}</tool_call>",      // bad JSON
           "<tool_call>{\"arguments\": {}}</tool_call>",                      // no name
           "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",    // arguments not an object
           "<tool_call>{\"name\": \"f\", \"arguments\": \"[1]\"}</tool_call>",
           "<tool_call>[]</tool_call>",
           "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call><tool_call>oops</tool_call>",
       }) {
    const ParsedOutput p = whole(ToolCallFormat::Hermes, text);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

TEST(ToolCallsLlama3Json, CallsJoinedBySemicolons) {
  const ParsedOutput one = whole(ToolCallFormat::Llama3Json,
                                 "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}");
  EXPECT_EQ(one.content, "");
  EXPECT_EQ(calls_of(one), (std::vector<Call>{{"get_weather", {{"city", "Oslo"}}}}));
  const ParsedOutput two = whole(ToolCallFormat::Llama3Json,
                                 "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"s\": \"x; {y}\"}}; "
                                 "{\"name\": \"b\", \"arguments\": {}}");
  EXPECT_EQ(calls_of(two), (std::vector<Call>{{"a", {{"s", "x; {y}"}}}, {"b", json::object()}}));
  for (const char* text : {"The weather is fine.", "{\"name\": \"a\", \"parameters\": {}} and more",
                           "{\"name\": \"a\", \"parameters\": {}", "{\"city\": \"Oslo\"}"}) {
    const ParsedOutput p = whole(ToolCallFormat::Llama3Json, text);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

// Mistral: a JSON list after [TOOL_CALLS] (v0.3, NeMo, Small 3: ids allowed and ignored), or
// name[ARGS]{...} once per call (Small 3.1 and later, [CALL_ID] allowed); content before.
TEST(ToolCallsMistral, ListsAndNamedArguments) {
  const ParsedOutput list = whole(ToolCallFormat::Mistral,
                                  "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
                                  "{\"name\": \"get_time\", \"arguments\": {}, \"id\": \"abc123def\"}]");
  EXPECT_EQ(list.content, "");
  EXPECT_EQ(calls_of(list),
            (std::vector<Call>{{"get_weather", {{"city", "Paris"}}}, {"get_time", json::object()}}));
  const ParsedOutput nemo = whole(ToolCallFormat::Mistral,
                                  "Checking.[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\": [1, 2], "
                                  "\"q\": \"[TOOL_CALLS]\"}}]");
  EXPECT_EQ(nemo.content, "Checking.");
  EXPECT_EQ(calls_of(nemo), (std::vector<Call>{{"f", {{"x", {1, 2}}, {"q", "[TOOL_CALLS]"}}}}));
  const ParsedOutput v11 = whole(ToolCallFormat::Mistral,
                                 "Let me see.\n[TOOL_CALLS]add[ARGS]{\"a\": 3.5, \"b\": 4}"
                                 "[TOOL_CALLS]get_weather[CALL_ID]x1y2z3w4v[ARGS]{\"city\": \"[ARGS]\"}");
  EXPECT_EQ(v11.content, "Let me see.");
  EXPECT_EQ(calls_of(v11), (std::vector<Call>{{"add", {{"a", 3.5}, {"b", 4}}}, {"get_weather", {{"city", "[ARGS]"}}}}));
  for (const char* text : {"No calls here.", "[TOOL_CALLS] not json", "[TOOL_CALLS]f[ARGS]{\"a\": 1} trailing",
                           "[TOOL_CALLS][ARGS]{}", "[TOOL_CALLS]f[ARGS][1]", "x [TOOL_CALLS] [{\"name\": \"f\"}"}) {
    const ParsedOutput p = whole(ToolCallFormat::Mistral, text);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

// Whatever the pieces the text arrives in, the streamed content and the calls equal the
// whole parse; content before a call goes out before the call is complete.
void expect_stream_equals_whole(ToolCallFormat f, const std::string& text) {
  const ParsedOutput w = whole(f, text);
  std::vector<std::vector<size_t>> splits;
  for (size_t cut = 0; cut <= text.size(); ++cut) splits.push_back({cut});
  std::vector<size_t> every;
  for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
  splits.push_back(every);
  for (const std::vector<size_t>& cuts : splits) {
    ToolCallStream s(f, counter_id);
    std::string content;
    size_t from = 0;
    for (size_t cut : cuts) {
      content += s.feed(std::string_view(text).substr(from, cut - from));
      from = cut;
    }
    content += s.feed(std::string_view(text).substr(from));
    const ParsedOutput rest = s.finish();
    content += rest.content;
    const std::string how = cuts.size() == 1 ? "cut at " + std::to_string(cuts[0]) : "one byte at a time";
    EXPECT_EQ(content, w.content) << text << " / " << how;
    EXPECT_EQ(calls_of(rest), calls_of(w)) << text << " / " << how;
  }
}

TEST(ToolCallStream, EqualsTheWholeParse) {
  for (const char* text : {
           "Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"<tool_call>\"}}\n</tool_call>",
           "Sure <tool_c and more text <\n",
           "  \n<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"b\", "
           "\"arguments\": {}}</tool_call> after",
           "text then <tool_call>{broken}</tool_call> tail  ",
           "plain text with trailing spaces   ",
           "</fromol>\n\nFor each function call",
           "Sure.\n<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\nAnything else?",
       })
    expect_stream_equals_whole(ToolCallFormat::Hermes, text);
  for (const char* text : {"  {\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", \"parameters\": {}}",
                           "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}", "<|pyt not a tag",
                           "  Hello there", "{not json"})
    expect_stream_equals_whole(ToolCallFormat::Llama3Json, text);
  for (const char* text : {"Sure.\n[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"q\": \"[TOOL_CALLS]\"}}]",
                           "[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b[ARGS]{\"x\": 1}", "text [TOOL_ and more [",
                           "x [TOOL_CALLS] broken", "plain  "})
    expect_stream_equals_whole(ToolCallFormat::Mistral, text);
}

TEST(ToolCallStream, ContentGoesOutBeforeTheCallEnds) {
  ToolCallStream s(ToolCallFormat::Hermes, counter_id);
  EXPECT_EQ(s.feed("I will look it up"), "I will look it up");
  EXPECT_EQ(s.feed(" now.\n<tool"), " now.");  // the newline and the partial marker are held
  EXPECT_EQ(s.feed("_call>{\"name\": \"f\", "), "");
  EXPECT_EQ(s.feed("\"arguments\": {}}</tool_call>"), "");
  const ParsedOutput rest = s.finish();
  EXPECT_EQ(rest.content, "");
  EXPECT_EQ(calls_of(rest), (std::vector<Call>{{"f", json::object()}}));
  // Without a known format everything streams as it comes.
  ToolCallStream none(ToolCallFormat::None, counter_id);
  EXPECT_EQ(none.feed("a <tool_call> "), "a <tool_call> ");
  EXPECT_EQ(none.finish().content, "");
}

// parallel_tool_calls false: the calls past the first are dropped, whole and streamed, in
// both formats; content is unchanged, and text that does not parse stays content.
TEST(ToolCallsMax, OnlyTheFirstCallIsKept) {
  const std::string hermes = "Both.\n<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n"
                             "<tool_call>{\"name\": \"b\", \"arguments\": {\"x\": 1}}</tool_call>";
  const std::string llama3 = "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {}}";
  for (const auto& [f, text] : {std::pair{ToolCallFormat::Hermes, hermes}, std::pair{ToolCallFormat::Llama3Json, llama3}}) {
    const ParsedOutput all = parse_tool_calls(f, text, counter_id);
    ASSERT_EQ(all.calls.size(), 2u) << text;
    const ParsedOutput one = parse_tool_calls(f, text, counter_id, 1);
    EXPECT_EQ(calls_of(one), (std::vector<Call>{calls_of(all)[0]})) << text;
    EXPECT_EQ(one.content, all.content) << text;
    ToolCallStream s(f, counter_id, 1);
    std::string content;
    for (char c : text) content += s.feed(std::string(1, c));
    const ParsedOutput rest = s.finish();
    EXPECT_EQ(content + rest.content, all.content) << text;
    EXPECT_EQ(calls_of(rest), calls_of(one)) << text;
  }
  EXPECT_EQ(parse_tool_calls(ToolCallFormat::Hermes, "<tool_call>{broken}", counter_id, 1).content, "<tool_call>{broken}");
}

TEST(ToolCallJson, OpenAiShape) {
  const json j = tool_call_json(ToolCall{.id = "call_1", .name = "f", .arguments = "{\"a\":1}"});
  EXPECT_EQ(j, json::parse(R"({"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}})"));
}

// The response JSON around the calls, whole and streamed, as the OpenAI API shapes it.
TEST(ToolCallJson, ResponsesCarryTheCalls) {
  const auto tok = Tokenizer::from_dir(test::model_dir("tiny-main"));
  const ResponseMeta m{.endpoint = Endpoint::Chat, .id = "chatcmpl-1", .created = 1, .model = "m"};
  const std::vector<ToolCall> calls = {{"call_a", "f", "{}"}, {"call_b", "g", "{\"x\":1}"}};
  const json only = response_choice(m, *tok, 0, "", {}, FinishReason::Stop, calls);
  const json& msg = only["message"];
  EXPECT_TRUE(msg["content"].is_null());
  EXPECT_EQ(msg["tool_calls"], json::array({tool_call_json(calls[0]), tool_call_json(calls[1])}));
  EXPECT_EQ(only["finish_reason"], "tool_calls");
  const json said = response_choice(m, *tok, 0, "Checking.", {}, FinishReason::Stop, calls);
  EXPECT_EQ(said["message"]["content"], "Checking.");
  const json plain = response_choice(m, *tok, 0, "Hi", {}, FinishReason::Stop);
  EXPECT_FALSE(plain["message"].contains("tool_calls"));
  EXPECT_EQ(plain["finish_reason"], "stop");

  const json delta = stream_chunk(m, *tok, ChunkPart{.call = &calls[1], .call_index = 1})["choices"][0]["delta"];
  EXPECT_EQ(delta, json::parse(R"({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                                                   "function": {"name": "g", "arguments": "{\"x\":1}"}}]})"));
  const json end = stream_chunk(m, *tok, ChunkPart{.finish = FinishReason::Stop, .finish_with_tool_calls = true});
  EXPECT_EQ(end["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_TRUE(end["choices"][0]["delta"].empty());
}

}  // namespace
}  // namespace tf::serve

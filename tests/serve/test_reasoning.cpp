// Reasoning out of chat output (src/serve/reasoning.*): the format a real template implies,
// when a prompt leaves the block open, the whole split, and streaming that gives the whole
// split however the text arrives (byte by byte, at every cut, and in a real tokenizer's pieces).
#include "serve/reasoning.h"

#include <gtest/gtest.h>

#include "chat/chat_template.h"
#include "model/tokenizer/tokenizer.h"
#include "serve/openai_response.h"
#include "test_util.h"

namespace tf::serve {
namespace {

using nlohmann::json;

void expect_split(const ReasoningSplit& s, const std::string& reasoning, const std::string& content) {
  EXPECT_EQ(s.reasoning, reasoning);
  EXPECT_EQ(s.content, content);
}

TEST(ReasoningFormat, FromRealTemplatesAndPrompts) {
  const auto qwen3 = ChatTemplate::from_model_dir(test::data_path("tokenizers/qwen3-151k")).value();
  EXPECT_EQ(reasoning_format_of_template(qwen3.source()), ReasoningFormat::Think);
  const auto llama3 = ChatTemplate::from_model_dir(test::data_path("tokenizers/llama3-128k")).value();
  EXPECT_EQ(reasoning_format_of_template(llama3.source()), ReasoningFormat::None);
  const auto chatml = ChatTemplate::from_file(test::source_path("examples/chatml.jinja"), "");
  EXPECT_EQ(reasoning_format_of_template(chatml.source()), ReasoningFormat::None);
  EXPECT_EQ(reasoning_format_named("think"), ReasoningFormat::Think);
  EXPECT_EQ(reasoning_format_named("none"), ReasoningFormat::None);
  EXPECT_EQ(reasoning_format_named("qwen3"), ReasoningFormat::Think);
  EXPECT_EQ(reasoning_format_named("deepseek_r1"), ReasoningFormat::Think);
  EXPECT_EQ(reasoning_format_named("granite"), std::nullopt);
  EXPECT_STREQ(reasoning_format_name(ReasoningFormat::Think), "think");

  // Qwen3's own renders: thinking on leaves the model to open the block; off closes it.
  const json messages = json::array({{{"role", "user"}, {"content", "Hi"}}});
  const std::string on = qwen3.render(messages, true);
  const std::string off = qwen3.render(messages, true, nullptr, {{"enable_thinking", false}});
  EXPECT_TRUE(off.ends_with("<think>\n\n</think>\n\n")) << off;
  EXPECT_FALSE(prompt_opens_reasoning(on));
  EXPECT_FALSE(prompt_opens_reasoning(off));
  // Templates that open it (DeepSeek-R1's, Qwen3's thinking-only ones).
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_TRUE(prompt_opens_reasoning("<think>"));
  EXPECT_FALSE(prompt_opens_reasoning("<think>\nalready thinking"));
  EXPECT_FALSE(prompt_opens_reasoning("<think>a</think><think>b</think>\n"));
  EXPECT_TRUE(prompt_opens_reasoning("<think>a</think> then <think> \n"));
}

TEST(ReasoningSplit, TheBlockThenTheAnswer) {
  expect_split(split_reasoning("<think>\nThe user greets.\n</think>\n\nHello!", false), "\nThe user greets.\n",
               "Hello!");
  // Whitespace before the tag; a second block is content.
  expect_split(split_reasoning(" \n<think>a</think>b <think>c</think>", false), "a", "b <think>c</think>");
  // Cut off while thinking: all of it is reasoning.
  expect_split(split_reasoning("<think>Let me see. First", false), "Let me see. First", "");
  expect_split(split_reasoning("<think>x</thi", false), "x</thi", "");
  // Nothing but whitespace after the block.
  expect_split(split_reasoning("<think>x</think>\n\n", false), "x", "");
}

// usage's reasoning_tokens: the tokens that begin before the content.
TEST(ReasoningSplit, TokensBeforeTheContentAreReasoning) {
  using V = std::vector<std::string>;
  EXPECT_EQ(reasoning_token_count("<think>Hmm.</think>\n\nYes.", false, V{"<think>", "Hmm", ".", "</think>", "\n\n", "Yes", "."}), 5);
  EXPECT_EQ(reasoning_token_count("<think>Hmm. Fi", false, V{"<think>", "Hmm", ".", " Fi"}), 4);  // cut off: all
  EXPECT_EQ(reasoning_token_count("Hello <think>", false, V{"Hello", " <think>"}), 0);           // no block
  EXPECT_EQ(reasoning_token_count("", false, V{}), 0);
  EXPECT_EQ(reasoning_token_count("a</think>b", true, V{"a", "</", "think>", "b"}), 3);  // opened by the prompt
  // A token that straddles the tag's end and the content counts as reasoning.
  EXPECT_EQ(reasoning_token_count("<think>a</think>b", false, V{"<think>", "a</", "think>b"}), 3);
}

TEST(ReasoningSplit, NoBlockIsAllContent) {
  for (const char* text : {"Hello there", "  Hello <think>x</think>", "", " \n", "<thin", "Hi</think>", "<Think>x</Think>"})
    expect_split(split_reasoning(text, false), "", text);
}

TEST(ReasoningSplit, APromptThatOpenedTheBlock) {
  expect_split(split_reasoning("Hmm.\n</think>\n\nYes.", true), "Hmm.\n", "Yes.");
  expect_split(split_reasoning("still thinking", true), "still thinking", "");
  expect_split(split_reasoning("</think>Yes", true), "", "Yes");
  // The tag is not looked for again at the start.
  expect_split(split_reasoning("<think>x</think>y", true), "<think>x", "y");
}

ReasoningSplit streamed(const std::vector<std::string>& pieces, bool open) {
  ReasoningStream s(open);
  ReasoningSplit all;
  for (const std::string& p : pieces) {
    const ReasoningSplit out = s.feed(p);
    all.reasoning += out.reasoning;
    all.content += out.content;
  }
  const ReasoningSplit rest = s.finish();
  all.reasoning += rest.reasoning;
  all.content += rest.content;
  return all;
}

const std::vector<std::string> kTexts = {
    "<think>\nThe user greets.\n</think>\n\nHello!",
    " \n<think>a</think>b <think>c</think>",
    "<think>Let me see. First",
    "<think>x</thi",
    "<think>x</think>\n\n",
    "<think>a <</ </t </think x</think>done",
    "Hello there",
    "  Hello <think>x</think>",
    "",
    " \n",
    "<thin",
    "<thinking>",
    "  <think",
    "Hmm.\n</think>\n\nYes.",
    "</think>Yes",
    "<think>x</think>y",
};

TEST(ReasoningStream, EqualsTheWholeSplitAtEveryCut) {
  for (const bool open : {false, true})
    for (const std::string& text : kTexts) {
      const ReasoningSplit whole = split_reasoning(text, open);
      for (size_t cut = 0; cut <= text.size(); ++cut) {
        const ReasoningSplit s = streamed({text.substr(0, cut), text.substr(cut)}, open);
        EXPECT_EQ(s.reasoning, whole.reasoning) << text << " / open " << open << " / cut at " << cut;
        EXPECT_EQ(s.content, whole.content) << text << " / open " << open << " / cut at " << cut;
      }
      std::vector<std::string> bytes;
      for (char c : text) bytes.emplace_back(1, c);
      const ReasoningSplit s = streamed(bytes, open);
      EXPECT_EQ(s.reasoning, whole.reasoning) << text << " / open " << open << " / byte by byte";
      EXPECT_EQ(s.content, whole.content) << text << " / open " << open << " / byte by byte";
    }
}

// Pieces as Qwen3's tokenizer cuts a thinking answer (<think> and </think> are single added
// tokens there, and the text around them several).
TEST(ReasoningStream, QwenTokensAndWhatGoesOutWhen) {
  const auto tok = Tokenizer::from_files(std::string(TF_TOKENIZER_DATA_DIR) + "/qwen3-151k/tokenizer.json",
                                         test::data_path("tokenizers/qwen3-151k/tokenizer_config.json"));
  ASSERT_TRUE(tok);
  const std::string text = "<think>\nOkay, 2+2 is 4.\n</think>\n\nThe answer is 4.";
  const std::vector<int32_t> ids = tok->encode(text, false);
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(tok->token_bytes(id));
  ASSERT_EQ(pieces.front(), "<think>");
  const ReasoningSplit whole = split_reasoning(text, false);
  const ReasoningSplit s = streamed(pieces, false);
  EXPECT_EQ(s.reasoning, "\nOkay, 2+2 is 4.\n");
  EXPECT_EQ(s.reasoning, whole.reasoning);
  EXPECT_EQ(s.content, "The answer is 4.");
  EXPECT_EQ(s.content, whole.content);

  // Reasoning goes out as it comes, but for a suffix that may begin </think>.
  ReasoningStream r(false);
  expect_split(r.feed(" <thi"), "", "");
  expect_split(r.feed("nk>Step one"), "Step one", "");
  expect_split(r.feed(". </"), ". ", "");
  expect_split(r.feed("thin"), "", "");
  expect_split(r.feed("k>\n"), "", "");
  expect_split(r.feed("\nDone"), "", "Done");
  expect_split(r.feed(" <think>"), "", " <think>");
  expect_split(r.finish(), "", "");
  // Held whitespace that never became a tag is content, as the whole split gives it.
  ReasoningStream w(false);
  expect_split(w.feed("\n "), "", "");
  expect_split(w.finish(), "", "\n ");
}

TEST(ReasoningJson, ResponsesCarryIt) {
  const auto tok = Tokenizer::from_dir(test::model_dir("tiny-main"));
  const ResponseMeta m{.endpoint = Endpoint::Chat, .id = "chatcmpl-1", .created = 1, .model = "m"};
  const json whole = response_choice(m, *tok, 0, "Hi", {}, FinishReason::Stop, {}, std::string("Greeting."));
  EXPECT_EQ(whole["message"]["reasoning_content"], "Greeting.");
  EXPECT_EQ(whole["message"]["content"], "Hi");
  const json none = response_choice(m, *tok, 0, "Hi", {}, FinishReason::Stop, {}, std::string());
  EXPECT_TRUE(none["message"]["reasoning_content"].is_null());
  const json off = response_choice(m, *tok, 0, "Hi", {}, FinishReason::Stop);
  EXPECT_FALSE(off["message"].contains("reasoning_content"));
  const json chunk = stream_chunk(m, *tok, ChunkPart{.reasoning = "Hmm"});
  EXPECT_EQ(chunk["choices"][0]["delta"], json({{"reasoning_content", "Hmm"}}));
  const json both = stream_chunk(m, *tok, ChunkPart{.text = "A", .reasoning = "B"});
  EXPECT_EQ(both["choices"][0]["delta"], json({{"reasoning_content", "B"}, {"content", "A"}}));
}

}  // namespace
}  // namespace tf::serve

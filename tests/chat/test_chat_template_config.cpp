// ChatTemplate::from_model_dir and from_file: which template a model folder gives (none when it
// has none), a template file given by the user, and errors that name the file and the field.
#include <gtest/gtest.h>

#include <fstream>

#include "chat/chat_template.h"
#include "test_util.h"

namespace tf {
namespace {

using test::error_of;

class ChatConfigTest : public test::TempDirTest {
 protected:
  void write_config(const std::string& text) {
    std::ofstream(dir_ / "tokenizer_config.json") << text;
  }
};

TEST(ChatConfig, ModelWithoutTemplateHasNone) {
  EXPECT_FALSE(ChatTemplate::from_model_dir(test::model_dir("tiny-main")).has_value());
}

TEST(ChatConfig, RealTemplatesAreFound) {
  for (const char* name : {"llama3-128k", "qwen3-151k"})
    EXPECT_TRUE(ChatTemplate::from_model_dir(test::data_path("tokenizers/") + name).has_value());
}

TEST_F(ChatConfigTest, NoConfigFileHasNone) { EXPECT_FALSE(ChatTemplate::from_model_dir(dir_.string()).has_value()); }

TEST_F(ChatConfigTest, ConfigWithoutTemplateHasNone) {
  write_config(R"({"bos_token": "<s>", "chat_template": null})");
  EXPECT_FALSE(ChatTemplate::from_model_dir(dir_.string()).has_value());
}

TEST_F(ChatConfigTest, NamedTemplateListUsesDefault) {
  write_config(R"({"chat_template": [{"name": "tool_use", "template": "x"},
                                     {"name": "default", "template": "y"}]})");
  const auto t = ChatTemplate::from_model_dir(dir_.string());
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->render(nlohmann::json::array(), false), "y");
}

TEST_F(ChatConfigTest, TemplateFileTakesTheModelsSpecialTokens) {
  write_config(R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>"})");
  std::ofstream(dir_ / "mine.jinja") << "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}\n";
  const ChatTemplate t = ChatTemplate::from_file((dir_ / "mine.jinja").string(), dir_.string());
  EXPECT_EQ(t.render(nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])"), true), "<s>hi</s>");
  // A model folder without tokenizer_config.json: the tokens are undefined (empty here).
  const ChatTemplate bare = ChatTemplate::from_file((dir_ / "mine.jinja").string(), (dir_ / "none").string());
  EXPECT_EQ(bare.render(nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])"), true), "hi");

  EXPECT_CONTAINS(error_of([&] { ChatTemplate::from_file((dir_ / "missing.jinja").string(), dir_.string()); }),
                  "missing.jinja: no such chat template file");
  std::ofstream(dir_ / "bad.jinja") << "ok\n{% if %}";
  EXPECT_CONTAINS(error_of([&] { ChatTemplate::from_file((dir_ / "bad.jinja").string(), dir_.string()); }),
                  "bad.jinja: line 2");
}

TEST(ChatConfig, BundledChatMlTemplate) {
  const ChatTemplate t = ChatTemplate::from_file(test::source_path("examples/chatml.jinja"), test::model_dir("tiny-main"));
  EXPECT_EQ(t.render(nlohmann::json::parse(R"([{"role": "user", "content": "Hi"}])"), true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST_F(ChatConfigTest, ChatTemplateJinjaFileTakesPrecedence) {
  write_config(R"({"chat_template": "from config", "eos_token": "</s>"})");
  std::ofstream(dir_ / "chat_template.jinja") << "from file {{ eos_token }}\n";
  const auto t = ChatTemplate::from_model_dir(dir_.string());
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->render(nlohmann::json::array(), false), "from file </s>");

  std::ofstream(dir_ / "chat_template.jinja") << "line 1\n{{ oops( }}";
  const std::string msg = error_of([&] { ChatTemplate::from_model_dir(dir_.string()); });
  EXPECT_CONTAINS(msg, "chat_template.jinja: line 2");
}

TEST_F(ChatConfigTest, ErrorsNameFileAndField) {
  write_config(R"({"chat_template": 3})");
  std::string msg = error_of([&] { ChatTemplate::from_model_dir(dir_.string()); });
  EXPECT_CONTAINS(msg, "tokenizer_config.json");
  EXPECT_CONTAINS(msg, "chat_template");

  write_config(R"({"chat_template": [{"name": "tool_use", "template": "x"}]})");
  msg = error_of([&] { ChatTemplate::from_model_dir(dir_.string()); });
  EXPECT_CONTAINS(msg, "default");

  write_config(R"({"chat_template": "x", "bos_token": 5})");
  msg = error_of([&] { ChatTemplate::from_model_dir(dir_.string()); });
  EXPECT_CONTAINS(msg, "bos_token");

  write_config(R"({"chat_template": "x", )");
  msg = error_of([&] { ChatTemplate::from_model_dir(dir_.string()); });
  EXPECT_CONTAINS(msg, "not valid JSON");
}

}  // namespace
}  // namespace tf

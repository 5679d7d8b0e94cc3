// ChatTemplate::from_model_dir: which template a model folder gives, and errors that name the
// file and the field at fault.
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

TEST(ChatConfig, ModelWithoutTemplateGetsChatMl) {
  EXPECT_TRUE(ChatTemplate::from_model_dir(test::model_dir("tiny-main")).is_default());
}

TEST(ChatConfig, RealTemplatesAreNotTheDefault) {
  for (const char* name : {"llama3-128k", "qwen3-151k"})
    EXPECT_FALSE(ChatTemplate::from_model_dir(test::data_path("tokenizers/") + name).is_default());
}

TEST_F(ChatConfigTest, NoConfigFileGetsChatMl) {
  EXPECT_TRUE(ChatTemplate::from_model_dir(dir_.string()).is_default());
}

TEST_F(ChatConfigTest, NamedTemplateListUsesDefault) {
  write_config(R"({"chat_template": [{"name": "tool_use", "template": "x"},
                                     {"name": "default", "template": "y"}]})");
  EXPECT_FALSE(ChatTemplate::from_model_dir(dir_.string()).is_default());
}

TEST_F(ChatConfigTest, ChatTemplateJinjaFileTakesPrecedence) {
  write_config(R"({"chat_template": "from config", "eos_token": "</s>"})");
  std::ofstream(dir_ / "chat_template.jinja") << "from file {{ eos_token }}\n";
  const ChatTemplate t = ChatTemplate::from_model_dir(dir_.string());
  EXPECT_FALSE(t.is_default());
  EXPECT_EQ(t.render(nlohmann::json::array(), false), "from file </s>");

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

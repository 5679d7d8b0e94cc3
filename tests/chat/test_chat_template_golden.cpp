// Real chat templates rendered exactly as Hugging Face renders them:
//   - every chat_template_renders entry of the Llama-3 and Qwen3 goldens (transformers'
//     apply_chat_template, tests/data/tokenizers/*/golden.json);
//   - the same templates on tools, tool calls, reasoning and enable_thinking
//     (real_template_renders.json, jinja2 in transformers' environment);
//   - examples/chatml.jinja, the ChatML template README gives tiny-main (which has none).
#include <gtest/gtest.h>

#include <fstream>

#include "chat/chat_template.h"
#include "test_util.h"

namespace tf {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string tokenizer_dir(const std::string& name) { return test::data_path("tokenizers/" + name); }

TEST(ChatTemplateGolden, TransformersRenders) {
  int n_checked = 0;
  for (const char* name : {"llama3-128k", "qwen3-151k"}) {
    const ChatTemplate tmpl = ChatTemplate::from_model_dir(tokenizer_dir(name)).value();
    const json golden = test::load_json(tokenizer_dir(name) + "/golden.json");
    const json& renders = golden.at("chat_template_renders");
    ASSERT_FALSE(renders.empty()) << name;
    for (size_t i = 0; i < renders.size(); ++i) {
      const json& r = renders[i];
      // Texts only: the golden `ids` fields are not token ids.
      EXPECT_EQ(tmpl.render(r.at("messages"), r.at("add_generation_prompt").get<bool>()),
                r.at("text").get<std::string>())
          << name << " render " << i;
      ++n_checked;
    }
  }
  EXPECT_EQ(n_checked, 12);
}

TEST(ChatTemplateGolden, Jinja2RendersOfRealTemplates) {
  std::ifstream in(test::source_path("tests/chat/real_template_renders.json"));
  ASSERT_TRUE(in);
  const ojson cases = ojson::parse(in).at("cases");
  ASSERT_GE(cases.size(), 40u);
  for (const ojson& c : cases) {
    const ChatTemplate tmpl = ChatTemplate::from_model_dir(tokenizer_dir(c.at("model").get<std::string>())).value();
    const std::string what = c.at("model").get<std::string>() + " / " + c.at("name").get<std::string>() +
                             (c.at("add_generation_prompt").get<bool>() ? " (generation prompt)" : "");
    try {
      EXPECT_EQ(tmpl.render_ordered(c.at("messages"), c.at("add_generation_prompt").get<bool>(),
                                    c.at("tools"), c.at("extra")),
                c.at("text").get<std::string>())
          << what;
    } catch (const Error& e) {
      ADD_FAILURE() << what << " threw: " << e.what();
    }
  }
}

TEST(ChatTemplateGolden, BundledChatMl) {
  const ChatTemplate tmpl = ChatTemplate::from_file(test::source_path("examples/chatml.jinja"), test::model_dir("tiny-main"));
  const json messages = json::parse(R"([{"role": "system", "content": "Be kind."},
                                        {"role": "user", "content": "Hi there"},
                                        {"role": "assistant", "content": "Hello!"},
                                        {"role": "user", "content": "Bye"}])");
  const std::string turns =
      "<|im_start|>system\nBe kind.<|im_end|>\n"
      "<|im_start|>user\nHi there<|im_end|>\n"
      "<|im_start|>assistant\nHello!<|im_end|>\n"
      "<|im_start|>user\nBye<|im_end|>\n";
  EXPECT_EQ(tmpl.render(messages, /*add_generation_prompt=*/false), turns);
  EXPECT_EQ(tmpl.render(messages, /*add_generation_prompt=*/true), turns + "<|im_start|>assistant\n");
}

}  // namespace
}  // namespace tf

// Bad input through the command line: every case is a clear message naming what is wrong,
// exit status 1, and never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tools/cli_util.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::run_twofold;

// A copy of tiny-main in a temp folder that a test may break.
class BrokenModel : public test::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    for (const auto& e : fs::directory_iterator(test::model_dir("tiny-main")))
      fs::copy_file(e.path(), dir_ / e.path().filename());
  }
  json config() { return test::load_json((dir_ / "config.json").string()); }
  void write_config(const json& j) { std::ofstream(dir_ / "config.json") << j.dump(2); }
  test::CliResult generate() { return run_twofold("generate -m " + dir_.string() + " -p 'Hello' -n 2 --temp 0"); }
  void expect_error(const test::CliResult& r, const std::string& needle) {
    EXPECT_EQ(r.signal, 0) << "crashed";
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
  }
};

TEST_F(BrokenModel, MissingConfigField) {
  json c = config();
  c.erase("num_hidden_layers");
  write_config(c);
  expect_error(generate(), "num_hidden_layers");
}

TEST_F(BrokenModel, UnknownModelType) {
  json c = config();
  c["model_type"] = "gpt_neox";
  write_config(c);
  expect_error(generate(), "gpt_neox");
}

TEST_F(BrokenModel, TruncatedSafetensors) {
  const fs::path st = dir_ / "model.safetensors";
  fs::resize_file(st, fs::file_size(st) / 2);
  const auto r = generate();
  expect_error(r, "model.safetensors");
}

TEST_F(BrokenModel, WrongTensorShape) {
  json c = config();
  c["intermediate_size"] = 640;
  write_config(c);
  const auto r = generate();
  expect_error(r, "mlp.gate_proj.weight");
  EXPECT_NE(r.err.find("640"), std::string::npos) << r.err;
}

TEST_F(BrokenModel, MissingTokenizer) {
  fs::remove(dir_ / "tokenizer.json");
  expect_error(generate(), "tokenizer.json");
}

TEST(CliErrors, PromptLongerThanContext) {
  std::string prompt;
  for (int i = 0; i < 1100; ++i) prompt += " the";  // tiny-main's context is 1024 tokens
  const auto r = run_twofold("generate -m " + test::model_dir("tiny-main") + " -p '" + prompt + "' -n 4");
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("context"), std::string::npos) << r.err;
}

TEST(CliErrors, EmptyPrompt) {
  const auto r = run_twofold("generate -m " + test::model_dir("tiny-main") + " -p '' -n 4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("empty"), std::string::npos) << r.err;
}

TEST(CliErrors, BadSamplingParameter) {
  const auto r = run_twofold("generate -m " + test::model_dir("tiny-main") + " -p 'Hi' -n 4 --top-p 1.5");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("top_p"), std::string::npos) << r.err;
}

TEST(CliErrors, MissingModelFolder) {
  const auto r = run_twofold("generate -m /nonexistent/model -p 'Hi'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.signal, 0);
  EXPECT_NE(r.err.find("/nonexistent/model"), std::string::npos) << r.err;
}

TEST(CliErrors, MalformedPromptsFileLine) {
  const auto path = fs::temp_directory_path() / "twofold_bad_prompts.jsonl";
  std::ofstream(path) << "{\"prompt\": \"ok\"}\n{not json\n";
  const auto r = run_twofold("generate -m " + test::model_dir("tiny-main") + " --prompts-file " + path.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(":2"), std::string::npos) << r.err;
  fs::remove(path);
}

}  // namespace
}  // namespace tf

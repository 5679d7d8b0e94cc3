// Bad input through the command line: every case is a clear message naming what is wrong,
// exit status 1 (an option CLI11 itself refuses: its own non-zero status), and never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>

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
  test::CliResult info() { return run_twofold("info -m " + dir_.string()); }
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

// ---- issue 13: hostile model folders (the original inputs) -------------------------------------

// A config.json nested 100,000 levels deep overflowed the stack (segfault) in `info` and
// `generate`; now both refuse it naming the file.
TEST_F(BrokenModel, ConfigNested100kLevels) {
  const std::string arrays = std::string(100000, '[') + std::string(100000, ']');
  std::string objects = "{\"model_type\": \"llama\", \"x\": ";
  for (int i = 0; i < 100000; ++i) objects += "{\"a\": ";
  objects += "1" + std::string(100000, '}') + "}";
  for (const std::string& text : {arrays, objects}) {
    std::ofstream(dir_ / "config.json", std::ios::trunc) << text;
    for (const auto& r : {info(), generate()}) {
      expect_error(r, (dir_ / "config.json").string());
      EXPECT_NE(r.err.find("nested deeper than"), std::string::npos) << r.err;
    }
  }
}

// num_hidden_layers 2147483647 allocated 4.7 GB before it was killed.
TEST_F(BrokenModel, HugeLayerCount) {
  json c = config();
  c["num_hidden_layers"] = 2147483647;
  write_config(c);
  for (const auto& r : {info(), generate()}) {
    expect_error(r, "config.json");
    expect_error(r, "'num_hidden_layers' is 2147483647");
  }
}

// A tokenizer.json vocabulary id of 2e8 loaded (7.26 GB); one of 1e9 failed with a bare
// std::bad_alloc naming nothing.
TEST_F(BrokenModel, HugeTokenizerIds) {
  const json original = test::load_json((dir_ / "tokenizer.json").string());
  for (const int64_t id : {int64_t(200'000'000), int64_t(1'000'000'000)}) {
    json t = original;
    t["model"]["vocab"]["Hello"] = id;
    std::ofstream(dir_ / "tokenizer.json", std::ios::trunc) << t.dump();
    for (const auto& r : {generate(), run_twofold("tokenize -m " + dir_.string() + " -p 'Hello'")}) {
      expect_error(r, (dir_ / "tokenizer.json").string());
      expect_error(r, "model.vocab.Hello");
      expect_error(r, std::to_string(id));
      EXPECT_EQ(r.err.find("bad_alloc"), std::string::npos) << r.err;
    }
  }
}

// Loaded with a model, the tokenizer's ids must be below the model's vocab_size (8192 here).
TEST_F(BrokenModel, TokenizerIdsPastTheModelVocabulary) {
  json t = test::load_json((dir_ / "tokenizer.json").string());
  t["added_tokens"][2]["id"] = 9000;
  std::ofstream(dir_ / "tokenizer.json", std::ios::trunc) << t.dump();
  const auto r = generate();
  expect_error(r, "tokenizer.json: token ids reach 9000");
  expect_error(r, "vocab_size is 8192");
}

// generation_config.json's ids are token ids of the model too.
TEST_F(BrokenModel, GenerationConfigIdPastTheVocabulary) {
  std::ofstream(dir_ / "generation_config.json", std::ios::trunc) << R"({"eos_token_id": 1000000000})";
  const auto r = generate();
  expect_error(r, "generation_config.json");
  expect_error(r, "1000000000");
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

// A command the CLI refuses (any non-zero status, no signal), with each of `needles` in stderr.
void expect_refused(const std::string& args, std::initializer_list<std::string> needles) {
  const auto r = run_twofold(args);
  EXPECT_NE(r.exit_code, 0) << args;
  EXPECT_EQ(r.signal, 0) << args << ": crashed";
  for (const std::string& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << r.err;
}

TEST(CliErrors, MissingModelFolder) {
  expect_refused("generate -m /nonexistent/model -p 'Hi'", {"/nonexistent/model"});
}

TEST(CliErrors, ServePortOutsideTheRange) {
  expect_refused("serve -m " + test::model_dir("tiny-main") + " --port 99999", {"--port", "99999"});
}

TEST(CliErrors, ThreadCountPastTheLimit) {
  expect_refused("generate -m " + test::model_dir("tiny-main") + " -p 'Hi' -n 2 -t 100000", {"--threads"});
}

TEST(CliErrors, BenchGenZeroNamesTheOption) {
  expect_refused("bench -m " + test::model_dir("tiny-main") + " --gen 0", {"--gen"});
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

// Bad tokenizer files are reported as tf::Error naming the file (and the field at fault).
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "tokenizer_test_util.h"

namespace tf {
namespace {

using nlohmann::json;

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + "tf_tokenizer_errors_" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// A small valid byte-level tokenizer.json to break in one place at a time.
json valid_tokenizer() {
  json vocab = json::object();
  for (int i = 0; i < 26; ++i) vocab[std::string(1, char('a' + i))] = i;
  vocab["ab"] = 26;
  vocab["\xC4\xA0"] = 27;  // "Ġ"
  return json{
      {"version", "1.0"},
      {"added_tokens", json::array({{{"id", 28}, {"content", "<eos>"}, {"special", true}, {"normalized", false},
                                     {"lstrip", false}, {"rstrip", false}, {"single_word", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"a b"})}}},
  };
}

// Runs `fn`, expects a tf::Error and returns its message.
template <typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no tf::Error thrown";
  return "";
}

TEST(TokenizerErrors, ValidSmallFileLoads) {
  const std::string path = write_file("valid.json", valid_tokenizer().dump());
  const auto tok = Tokenizer::from_files(path);
  EXPECT_EQ(tok->encode("ab a"), (std::vector<int32_t>{26, 27, 0}));
  EXPECT_EQ(tok->n_vocab(), 29);
  EXPECT_EQ(tok->bos_id(), std::nullopt);  // no tokenizer_config.json
}

TEST(TokenizerErrors, MissingFile) {
  const std::string path = testing::TempDir() + "tf_tokenizer_errors_does_not_exist.json";
  const std::string msg = error_of([&] { Tokenizer::from_files(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  const std::string dir = testing::TempDir() + "tf_tokenizer_errors_no_such_dir";
  const std::string msg2 = error_of([&] { Tokenizer::from_dir(dir); });
  EXPECT_NE(msg2.find(dir + "/tokenizer.json"), std::string::npos) << msg2;
}

TEST(TokenizerErrors, MalformedJson) {
  const std::string path = write_file("malformed.json", R"({"model": {"type": "BPE", "vocab": {"a": 0,)");
  const std::string msg = error_of([&] { Tokenizer::from_files(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
}

TEST(TokenizerErrors, UnsupportedModelType) {
  json j = valid_tokenizer();
  j["model"] = {{"type", "WordPiece"}, {"vocab", {{"a", 0}}}, {"unk_token", "[UNK]"}};
  const std::string path = write_file("wordpiece.json", j.dump());
  const std::string msg = error_of([&] { Tokenizer::from_files(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.type"), std::string::npos) << msg;
  EXPECT_NE(msg.find("WordPiece"), std::string::npos) << msg;
}

// Each broken field is named in the message.
TEST(TokenizerErrors, BadFieldsAreNamed) {
  struct Case {
    const char* name;
    void (*edit)(json&);
    const char* field;
  };
  const Case cases[] = {
      {"pretok", [](json& j) { j["pre_tokenizer"] = {{"type", "UnicodeScripts"}}; }, "pre_tokenizer.type"},
      {"seq", [](json& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({{{"type", "FixedLength"}}})}};
       }, "pre_tokenizer.pretokenizers[0].type"},
      {"norm", [](json& j) { j["normalizer"] = {{"type", "BertNormalizer"}}; }, "normalizer.type"},
      {"delim", [](json& j) { j["pre_tokenizer"] = {{"type", "CharDelimiterSplit"}, {"delimiter", "ab"}}; },
       "pre_tokenizer.delimiter"},
      {"punct", [](json& j) { j["pre_tokenizer"] = {{"type", "Punctuation"}, {"behavior", "Sideways"}}; },
       "pre_tokenizer.behavior"},
      {"digits", [](json& j) { j["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", 1}}; },
       "pre_tokenizer.individual_digits"},
      {"strip", [](json& j) { j["normalizer"] = {{"type", "Strip"}, {"strip_left", "yes"}}; }, "normalizer.strip_left"},
      {"bpedec", [](json& j) { j["decoder"] = {{"type", "BPEDecoder"}, {"suffix", 3}}; }, "decoder.suffix"},
      {"dec", [](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "decoder.type"},
      {"post", [](json& j) { j["post_processor"] = {{"type", "Nonsense"}}; }, "post_processor.type"},
      {"regex", [](json& j) {
         j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
       }, "pre_tokenizer.pattern.Regex"},
      {"merge", [](json& j) { j["model"]["merges"] = json::array({"a b", "a zz"}); }, "model.merges[1]"},
      {"merge2", [](json& j) { j["model"]["merges"] = json::array({"a b c"}); }, "model.merges[0]"},
      {"vocab", [](json& j) { j["model"]["vocab"]["q"] = "seven"; }, "model.vocab.q"},
      {"unk", [](json& j) { j["model"]["unk_token"] = "<unk>"; }, "model.unk_token"},
      {"added", [](json& j) { j["added_tokens"][0].erase("id"); }, "added_tokens[0].id"},
      {"dropout", [](json& j) { j["model"]["dropout"] = 0.1; }, "model.dropout"},
  };
  for (const Case& c : cases) {
    json j = valid_tokenizer();
    c.edit(j);
    const std::string path = write_file(std::string("bad_") + c.name + ".json", j.dump());
    const std::string msg = error_of([&] { Tokenizer::from_files(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << c.name << ": " << msg;
    EXPECT_NE(msg.find(c.field), std::string::npos) << c.name << ": " << msg;
  }
}

// Issue 13: a vocabulary id of 2e8 loaded (7.26 GB of tables sized by the id) and one of 1e9
// failed with a bare std::bad_alloc. Ids must stay below the number of tokens the file defines
// plus a slack of 65536 (id_limit.h); each such id is refused naming the file, the field and
// the id, before anything is sized from it.
TEST(TokenizerErrors, HugeIdsAreRefusedNamingFileFieldAndId) {
  struct Case {
    const char* name;
    void (*edit)(json&, int64_t);
    const char* field;
  };
  const Case cases[] = {
      {"vocab", [](json& j, int64_t id) { j["model"]["vocab"]["zz"] = id; }, "model.vocab.zz"},
      {"added", [](json& j, int64_t id) { j["added_tokens"][0]["id"] = id; }, "added_tokens[0].id"},
      {"post", [](json& j, int64_t id) {
         j["post_processor"] = {{"type", "BertProcessing"}, {"cls", {"<eos>", id}}, {"sep", {"<eos>", 28}}};
       }, "post_processor.cls[1]"},
  };
  for (const Case& c : cases) {
    for (const int64_t id : {int64_t(200'000'000), int64_t(1'000'000'000), int64_t(1) << 40}) {
      json j = valid_tokenizer();
      c.edit(j, id);
      const std::string path = write_file(std::string("huge_id_") + c.name + ".json", j.dump());
      const std::string msg = error_of([&] { Tokenizer::from_files(path); });
      EXPECT_CONTAINS(msg, path);
      EXPECT_CONTAINS(msg, c.field);
      EXPECT_CONTAINS(msg, std::to_string(id));
      EXPECT_CONTAINS(msg, "out of range");
    }
  }
}

// Gaps up to the slack load: 29 tokens defined, so ids up to 29 + 65535 are allowed.
TEST(TokenizerErrors, IdsWithinTheSlackLoad) {
  json j = valid_tokenizer();
  j["added_tokens"][0]["id"] = 29 + 65535;
  const std::string path = write_file("slack_ok.json", j.dump());
  const auto tok = Tokenizer::from_files(path);
  EXPECT_EQ(tok->n_vocab(), 29 + 65536);
  EXPECT_EQ(tok->token_id("<eos>"), 29 + 65535);
  j["added_tokens"][0]["id"] = 29 + 65536;
  const std::string bad = write_file("slack_bad.json", j.dump());
  const std::string msg = error_of([&] { Tokenizer::from_files(bad); });
  EXPECT_CONTAINS(msg, "ids must be below 65565");
}

TEST(TokenizerErrors, BadConfig) {
  const std::string tok_path = write_file("cfg_tok.json", valid_tokenizer().dump());
  const std::string bad_json = write_file("cfg_malformed.json", "{\"bos_token\": ");
  std::string msg = error_of([&] { Tokenizer::from_files(tok_path, bad_json); });
  EXPECT_NE(msg.find(bad_json), std::string::npos) << msg;

  const std::string unknown = write_file("cfg_unknown.json", R"({"bos_token": "<s>", "eos_token": "<eos>"})");
  msg = error_of([&] { Tokenizer::from_files(tok_path, unknown); });
  EXPECT_NE(msg.find(unknown), std::string::npos) << msg;
  EXPECT_NE(msg.find("bos_token"), std::string::npos) << msg;

  // Both spellings of a token: a string and an {"content": ...} object.
  const std::string good = write_file("cfg_good.json", R"({"bos_token": {"content": "a"}, "eos_token": "<eos>"})");
  const auto tok = Tokenizer::from_files(tok_path, good);
  EXPECT_EQ(tok->bos_id(), 0);
  EXPECT_EQ(tok->eos_id(), 28);
}

}  // namespace
}  // namespace tf

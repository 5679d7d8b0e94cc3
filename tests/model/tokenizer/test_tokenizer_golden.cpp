// Encoding and decoding match the Hugging Face `tokenizers` library exactly, on the golden
// ids recorded next to each tokenizer.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "tokenizer_test_util.h"

namespace tf {
namespace {

using nlohmann::json;

std::vector<int32_t> ids_of(const json& j) { return j.get<std::vector<int32_t>>(); }

// Caches loaded tokenizers across tests of one binary (the big ones take a moment).
const Tokenizer& cached(const std::string& key, const std::string& json_path, const std::string& config) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& t = cache[key];
  if (!t) t = Tokenizer::from_files(json_path, config);
  return *t;
}

const Tokenizer& tiny(const std::string& model) {
  const std::string dir = test::model_dir(model);
  return cached(model, dir + "/tokenizer.json", dir + "/tokenizer_config.json");
}

const Tokenizer& real(const std::string& name) {
  return cached(name, test::real_tokenizer_json(name), test::real_tokenizer_config(name));
}

TEST(TokenizerGolden, TinyMainTokenizerCases) {
  const Tokenizer& tok = tiny("tiny-main");
  const json golden = test::load_json(test::data_path("golden-tiny-main.json"));
  const json& cases = golden.at("tokenizer_cases");
  ASSERT_GE(cases.size(), 20u);
  for (const json& c : cases) {
    const std::string text = c.at("text");
    SCOPED_TRACE(text);
    const std::vector<int32_t> ids = tok.encode(text, /*add_special=*/true);
    EXPECT_EQ(ids, ids_of(c.at("ids")));
    // This tokenizer's post-processor (ByteLevel) adds nothing.
    EXPECT_EQ(tok.encode(text, /*add_special=*/false), ids);
    EXPECT_EQ(tok.decode(ids), text);
    const std::vector<std::string> tokens = c.at("tokens");
    ASSERT_EQ(tokens.size(), ids.size());
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(tok.token_text(ids[i]), tokens[i]) << "token " << i;
  }
}

TEST(TokenizerGolden, TinyMainSpecialTokens) {
  const Tokenizer& tok = tiny("tiny-main");
  EXPECT_EQ(tok.n_vocab(), 8192);
  EXPECT_EQ(tok.bos_id(), 0);  // tokenizer_config.json: "<|bos|>"
  EXPECT_EQ(tok.eos_id(), 1);  // "<|eos|>"
  EXPECT_EQ(tok.token_id("<|pad|>"), 2);
  EXPECT_TRUE(tok.is_special(0));
  EXPECT_FALSE(tok.is_special(3));
  // Added tokens are matched in raw text, and skip_special drops them again.
  const std::vector<int32_t> ids = tok.encode("<|bos|>Hello<|eos|>");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 0);
  EXPECT_EQ(ids.back(), 1);
  EXPECT_EQ(tok.decode(ids), "<|bos|>Hello<|eos|>");
  EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), "Hello");
}

struct PromptSet {
  const char* golden;
  const char* model;
  friend void PrintTo(const PromptSet& p, std::ostream* os) { *os << p.model; }
};

class TokenizerPrompts : public testing::TestWithParam<PromptSet> {};

TEST_P(TokenizerPrompts, MatchInputIds) {
  const Tokenizer& tok = tiny(GetParam().model);
  const json golden = test::load_json(test::data_path(GetParam().golden));
  const json& prompts = golden.at("prompts");
  ASSERT_FALSE(prompts.empty());
  for (const json& p : prompts) {
    const std::string text = p.at("text");
    SCOPED_TRACE(text);
    const std::vector<int32_t> ids = tok.encode(text);
    EXPECT_EQ(ids, ids_of(p.at("input_ids")));
    EXPECT_EQ(tok.decode(ids), text);
  }
}

INSTANTIATE_TEST_SUITE_P(All, TokenizerPrompts,
                         testing::Values(PromptSet{"golden-tiny-main.json", "tiny-main"},
                                         PromptSet{"golden-tiny-draft.json", "tiny-draft"},
                                         PromptSet{"golden-llama-mha.json", "parity/llama-mha"},
                                         PromptSet{"golden-qwen2.json", "parity/qwen2"}),
                         [](const auto& info) {
                           std::string s = info.param.model;
                           for (char& c : s) {
                             if (!isalnum(uint8_t(c))) c = '_';
                           }
                           return s;
                         });

struct RealCase {
  const char* name;
  std::optional<int32_t> bos, eos;
  friend void PrintTo(const RealCase& c, std::ostream* os) { *os << c.name; }
};

class TokenizerReal : public testing::TestWithParam<RealCase> {};

TEST_P(TokenizerReal, GoldenCases) {
  const Tokenizer& tok = real(GetParam().name);
  const json golden = test::load_json(test::data_path(std::string("tokenizers/") + GetParam().name + "/golden.json"));
  const json& cases = golden.at("cases");
  ASSERT_GE(cases.size(), 30u);
  for (const json& c : cases) {
    const std::string text = c.at("text");
    SCOPED_TRACE(text);
    EXPECT_EQ(tok.encode(text, /*add_special=*/true), ids_of(c.at("ids")));
    const std::vector<int32_t> plain = tok.encode(text, /*add_special=*/false);
    EXPECT_EQ(plain, ids_of(c.at("ids_no_special")));
    EXPECT_EQ(tok.decode(ids_of(c.at("ids_no_special"))), c.at("decoded").get<std::string>());
    const std::vector<std::string> tokens = c.at("tokens");
    ASSERT_EQ(tokens.size(), plain.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      EXPECT_EQ(tok.token_text(plain[i]), tokens[i]) << "token " << i;
      EXPECT_EQ(tok.token_id(tokens[i]), plain[i]) << "token " << i;
    }
  }
}

TEST_P(TokenizerReal, SpecialIds) {
  const Tokenizer& tok = real(GetParam().name);
  EXPECT_EQ(tok.bos_id(), GetParam().bos);
  EXPECT_EQ(tok.eos_id(), GetParam().eos);
  ASSERT_TRUE(tok.eos_id());
  EXPECT_TRUE(tok.is_special(*tok.eos_id()));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{*tok.eos_id()}, /*skip_special=*/true), "");
}

INSTANTIATE_TEST_SUITE_P(All, TokenizerReal,
                         testing::Values(RealCase{"spm-mistral-32k", 1, 2},
                                         RealCase{"llama3-128k", 128000, 128001},
                                         RealCase{"qwen3-151k", std::nullopt, 151645}),
                         [](const auto& info) {
                           std::string s = info.param.name;
                           for (char& c : s) {
                             if (!isalnum(uint8_t(c))) c = '_';
                           }
                           return s;
                         });

TEST(TokenizerGolden, RealVocabSizes) {
  EXPECT_EQ(real("spm-mistral-32k").n_vocab(), 32000);
  EXPECT_EQ(real("llama3-128k").n_vocab(), 128256);
  EXPECT_EQ(real("qwen3-151k").n_vocab(), 151669);
}

// The SentencePiece decoder chain: "▁" -> " ", <0xNN> -> bytes, and one leading space
// stripped, only from the very start of the output.
TEST(TokenizerGolden, SpmDecoderChain) {
  const Tokenizer& tok = real("spm-mistral-32k");
  const std::vector<int32_t> ids = tok.encode("Hi\n", /*add_special=*/false);
  EXPECT_EQ(tok.decode(ids), "Hi\n");
  EXPECT_EQ(tok.token_text(13), "<0x0A>");
  EXPECT_EQ(tok.token_bytes(13), "\n");
  EXPECT_EQ(tok.token_bytes(*tok.token_id("\xE2\x96\x81the")), " the");
  // A lone byte of a multi-byte character decodes to U+FFFD, as HF's ByteFallback does.
  const auto e6 = tok.token_id("<0xE6>");
  ASSERT_TRUE(e6);
  EXPECT_EQ(tok.decode(std::vector<int32_t>{*e6}), "\xEF\xBF\xBD");
  EXPECT_EQ(tok.token_bytes(*e6), "\xE6");
}

}  // namespace
}  // namespace tf

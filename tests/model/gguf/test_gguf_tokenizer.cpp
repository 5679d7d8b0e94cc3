// Tokenizers built from GGUF metadata (gguf_vocab.h) against the Hugging Face `tokenizers`
// library on the same vocabulary and merges. make_gguf_cases.py (run by the build) writes the
// GGUF files from real tokenizer.json files as llama.cpp's converter would (SentencePiece
// Mistral: tokenizer.ggml.model llama; Llama 3: gpt2 + llama-bpe; Qwen3: gpt2 + qwen2;
// tiny-main's vocabulary: gpt2 + gpt-2) and the library's ids and decoded text for ~37 texts
// each (Unicode, digits, whitespace runs, special tokens, chat markup).
#include <gtest/gtest.h>

#include "model/gguf/gguf_bytes.h"
#include "model/gguf/gguf_file.h"
#include "model/tokenizer/gguf_vocab.h"
#include "model/tokenizer/tokenizer.h"
#include "param_name.h"
#include "test_util.h"

namespace tf {
namespace {

using test::GgufBytes;

std::string cases_path(const std::string& name) { return std::string(TF_GGUF_CASES_DIR) + "/" + name; }

class GgufTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufTokenizer, EqualsTheTokenizersLibrary) {
  const std::string name = GetParam();
  const nlohmann::json ref = test::load_json(cases_path(name + ".json"));
  const auto tok = Tokenizer::from_model(cases_path(name + ".gguf"));
  ASSERT_EQ(ref["texts"].size(), ref["ids"].size());
  for (size_t i = 0; i < ref["texts"].size(); ++i) {
    const std::string text = ref["texts"][i];
    const std::vector<int32_t> ids = ref["ids"][i];
    EXPECT_EQ(tok->encode(text, /*add_special=*/true), ids) << name << " text " << i << ": " << text;
    EXPECT_EQ(tok->decode(ids), ref["decoded"][i].get<std::string>()) << name << " text " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, GgufTokenizer,
                         ::testing::Values("spm-mistral-32k", "llama3-128k", "qwen3-151k", "tiny-gpt2", "qwen3-151k-r1",
                                           "llama3-128k-tekken", "llama3-128k-gpt4o"),
                         test::ParamName());

TEST(GgufTokenizerSpecials, IdsAndFlagsFromTheMetadata) {
  const auto mistral = Tokenizer::from_model(cases_path("spm-mistral-32k.gguf"));
  EXPECT_EQ(mistral->bos_id(), 1);
  EXPECT_EQ(mistral->eos_id(), 2);
  EXPECT_TRUE(mistral->is_special(1));
  EXPECT_EQ(mistral->encode("hi", /*add_special=*/true).front(), 1);   // add_bos_token
  EXPECT_NE(mistral->encode("hi", /*add_special=*/false).front(), 1);
  const auto qwen = Tokenizer::from_model(cases_path("qwen3-151k.gguf"));
  const auto im_start = qwen->token_id("<|im_start|>");
  ASSERT_TRUE(im_start.has_value());
  EXPECT_TRUE(qwen->is_special(*im_start));               // CONTROL
  EXPECT_FALSE(qwen->is_special(*qwen->token_id("<tool_call>")));  // USER_DEFINED: matched, not special
  EXPECT_EQ(qwen->encode("x<tool_call>y", false).size(), 3u);
}

// Bad tokenizer metadata: each a tf::Error naming the file and the key.
std::string tokenizer_error(const GgufBytes& g) {
  return test::error_of([&] {
    const GgufFile f(std::span<const uint8_t>(g.bytes().data(), g.bytes().size()), "tok.gguf");
    gguf_tokenizer(f);
  });
}

GgufBytes& tokens(GgufBytes& g, std::vector<std::string> list) {
  g.str("tokenizer.ggml.tokens").u32(9).u32(8).u64(list.size());
  for (const std::string& t : list) g.str(t);
  return g;
}

TEST(GgufTokenizerErrors, NameTheKey) {
  GgufBytes a;
  a.header(0, 2).kv_str("tokenizer.ggml.model", "bert");
  tokens(a, {"a"});
  EXPECT_CONTAINS(tokenizer_error(a), "tok.gguf: metadata 'tokenizer.ggml.model': is \"bert\"");
  GgufBytes b;
  b.header(0, 3).kv_str("tokenizer.ggml.model", "gpt2").kv_str("tokenizer.ggml.pre", "falcon");
  tokens(b, {"a"});
  EXPECT_CONTAINS(tokenizer_error(b), "metadata 'tokenizer.ggml.pre': is \"falcon\": this pre-tokenizer is not supported");
  GgufBytes c;
  c.header(0, 1).kv_str("tokenizer.ggml.model", "gpt2");
  EXPECT_CONTAINS(tokenizer_error(c), "metadata 'tokenizer.ggml.tokens': is missing");
  GgufBytes d;
  d.header(0, 3).kv_str("tokenizer.ggml.model", "gpt2").str("tokenizer.ggml.token_type").u32(9).u32(5).u64(1).u32(1);
  tokens(d, {"a", "b"});
  EXPECT_CONTAINS(tokenizer_error(d), "metadata 'tokenizer.ggml.token_type': has 1 entries for 2 tokens");
  GgufBytes e;
  e.header(0, 3).kv_str("tokenizer.ggml.model", "llama").str("tokenizer.ggml.scores").u32(9).u32(6).u64(2)
      .num(1.0f).num(std::numeric_limits<float>::quiet_NaN());
  tokens(e, {"a", "b"});
  EXPECT_CONTAINS(tokenizer_error(e), "metadata 'tokenizer.ggml.scores': entry 1 is NaN");
  GgufBytes f;
  f.header(0, 3).kv_str("tokenizer.ggml.model", "gpt2").kv_u32("tokenizer.ggml.bos_token_id", 7);
  tokens(f, {"a"});
  EXPECT_CONTAINS(tokenizer_error(f), "metadata 'tokenizer.ggml.bos_token_id': is 7, outside the vocabulary of 1 tokens");
  GgufBytes g;  // a merge naming a token that is not in the vocabulary
  g.header(0, 3).kv_str("tokenizer.ggml.model", "gpt2").str("tokenizer.ggml.merges").u32(9).u32(8).u64(1).str("a z");
  tokens(g, {"a", "b"});
  EXPECT_CONTAINS(tokenizer_error(g), "tok.gguf: model.merges[0]: token \"z\" is not in model.vocab");
}

}  // namespace
}  // namespace tf

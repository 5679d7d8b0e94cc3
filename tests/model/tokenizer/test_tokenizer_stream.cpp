// StreamDecoder emits only whole UTF-8 characters, holding back bytes of a character that
// is split across tokens, and its pieces add up to the text.
#include <gtest/gtest.h>

#include "model/tokenizer/json_field.h"
#include "model/tokenizer/normalizer.h"
#include "model/tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace tf {
namespace {

// Text whose multi-byte characters byte-level BPE splits across several tokens (rare CJK,
// emoji with modifiers and ZWJ, combining marks), mixed with ordinary words.
const std::string kText =
    "Emoji: \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD\xF0\x9F\x9A\x80 family "
    "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 "
    "CJK: 漢字かなカナ 한국어 中文测试。 rare: 龘靐齉 \xF0\xA0\x80\x80 "
    "Accents: e\xCC\x81 \xE1\xBA\xA1\xCC\x82 ｶﾀｶﾅ \xF4\x8F\xBF\xBF end.";

struct StreamResult {
  std::string joined;
  size_t n_split_tokens = 0;  // tokens whose bytes are not whole UTF-8 on their own
  size_t n_held_back = 0;     // pushes that returned less than everything seen so far
};

StreamResult stream(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  StreamResult r;
  StreamDecoder dec(tok);
  std::string all_bytes;
  for (int32_t id : ids) {
    const std::string bytes = tok.token_bytes(id);
    all_bytes += bytes;
    r.n_split_tokens += !tok::utf8_is_valid(bytes);
    const std::string piece = dec.push(id);
    EXPECT_TRUE(tok::utf8_is_valid(piece)) << "piece for id " << id << " is not valid UTF-8";
    r.joined += piece;
    r.n_held_back += r.joined.size() < all_bytes.size();
  }
  r.joined += dec.flush();
  return r;
}

TEST(TokenizerStream, ByteLevelSplitCharacters) {
  for (const char* name : {"tiny-main", "llama3-128k", "qwen3-151k"}) {
    SCOPED_TRACE(name);
    const auto tok = std::string(name) == "tiny-main" ? Tokenizer::from_dir(test::model_dir("tiny-main"))
                                                     : test::load_real_tokenizer(name);
    const std::vector<int32_t> ids = tok->encode(kText);
    const StreamResult r = stream(*tok, ids);
    // Qwen3 normalizes to NFC first; the others give back the bytes.
    std::string expected = kText;
    if (std::string(name) == "qwen3-151k") {
      tok::make_normalizer(nlohmann::json{{"type", "NFC"}}, tok::JsonAt{"(test)", "normalizer"})->normalize(expected);
      EXPECT_NE(expected, kText);
    }
    EXPECT_EQ(r.joined, expected);
    EXPECT_EQ(r.joined, tok->decode(ids));
    // The test means something only if characters really were split across tokens.
    EXPECT_GT(r.n_split_tokens, 0u);
    EXPECT_GT(r.n_held_back, 0u);
  }
}

// SentencePiece-style: byte-fallback tokens <0xNN> carry one byte each. Streaming gives the
// raw token bytes, so the "▁" the normalizer prepended shows as a leading space (decode()
// strips it as the whole-sequence Strip decoder does).
TEST(TokenizerStream, SpmByteFallback) {
  const auto tok = test::load_real_tokenizer("spm-mistral-32k");
  const std::vector<int32_t> ids = tok->encode(kText, /*add_special=*/false);
  const StreamResult r = stream(*tok, ids);
  EXPECT_EQ(r.joined, " " + kText);
  EXPECT_EQ(tok->decode(ids), kText);
  EXPECT_GT(r.n_split_tokens, 0u);
  EXPECT_GT(r.n_held_back, 0u);
}

TEST(TokenizerStream, SpecialTokensSkippedOrKept) {
  const auto tok = test::load_real_tokenizer("llama3-128k");
  const std::vector<int32_t> ids = tok->encode("<|begin_of_text|>Hi<|eot_id|>");
  ASSERT_EQ(ids.size(), 3u);
  StreamDecoder skip(*tok);
  std::string a;
  for (int32_t id : ids) a += skip.push(id);
  EXPECT_EQ(a + skip.flush(), "Hi");
  StreamDecoder keep(*tok, /*skip_special=*/false);
  std::string b;
  for (int32_t id : ids) b += keep.push(id);
  EXPECT_EQ(b + keep.flush(), "<|begin_of_text|>Hi<|eot_id|>");
}

// A character cut off at the end of the stream becomes U+FFFD on flush, as in decode().
TEST(TokenizerStream, IncompleteTailOnFlush) {
  const auto tok = test::load_real_tokenizer("llama3-128k");
  const std::vector<int32_t> ids = tok->encode("\xF0\xA0\x80\x80");  // U+20000: several tokens
  ASSERT_GE(ids.size(), 2u);
  StreamDecoder dec(*tok);
  std::string out;
  for (size_t i = 0; i + 1 < ids.size(); ++i) out += dec.push(ids[i]);
  EXPECT_EQ(out, "");  // nothing complete yet
  EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD");
  const std::vector<int32_t> partial(ids.begin(), ids.end() - 1);
  EXPECT_EQ(tok->decode(partial), "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace tf

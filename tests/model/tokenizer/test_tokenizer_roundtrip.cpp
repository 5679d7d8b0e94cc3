// decode(encode(s)) gives s back, for many random valid UTF-8 strings.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "model/tokenizer/json_field.h"
#include "model/tokenizer/normalizer.h"
#include "model/tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace tf {
namespace {

// Pieces random strings are built from: ASCII, whitespace runs, Latin with precomposed and
// combining accents, Greek, Cyrillic, Arabic, Hebrew, CJK, kana, Hangul, emoji with skin tone
// and ZWJ, controls, the largest code point, look-alike spaces, digits, contractions.
const std::vector<std::string> kAtoms = {
    "a", "Z", "the", " the", "Hello", "7", "42", "1234567", "3.14", ".", ",", "!", "?", "'s", "'LL", "\"",
    "(", ")", "{", "}", "<", ">", "<|", "|>", "#", "_", "-", "=", "/", "\\", "`", "~", "@", "$", "%",
    " ", "  ", "   ", "\n", "\n\n", "\r\n", "\t", " \n ", "\t\t",
    "é", "e\xCC\x81", "n\xCC\x83", "\xC3\x85", "A\xCC\x8A", "ß", "Œ", "ﬁ", "ǅ",
    "α", "Ωμέγα", "Привет", "ё", "مرحبا", "שלום", "漢字", "中文测试", "。", "かな", "カナ", "ｶﾀｶﾅ", "한국어",
    "\xF0\x9F\x98\x80", "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
    "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7", "\xF0\x9F\x9A\x80",
    "\x01", "\x7F", "\xF4\x8F\xBF\xBF", "\xC2\xA0", "\xE2\x80\x8B", "\xE3\x80\x80", "\xE2\x80\xA8",
    "Ｆｕｌｌ", "１２３", "\xCC\x81", "\xE0\xA4\xB9\xE0\xA4\xBF\xE0\xA4\x82", "ก่", "ÿþ",
};

// A random valid scalar value (no surrogates), weighted towards the lower planes.
uint32_t random_code_point(std::mt19937& rng) {
  static const uint32_t kTop[] = {0x80, 0x800, 0x10000, 0x110000};
  for (;;) {
    const uint32_t top = kTop[rng() % 4];
    const uint32_t cp = 1 + rng() % (top - 1);
    if (cp < 0xD800 || cp > 0xDFFF) return cp;
  }
}

std::vector<std::string> random_strings(uint32_t seed, size_t n) {
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    std::string s;
    const size_t n_atoms = rng() % 40;
    for (size_t k = 0; k < n_atoms; ++k) {
      if (rng() % 5 == 0) {
        tok::utf8_append(s, random_code_point(rng));
      } else {
        s += kAtoms[rng() % kAtoms.size()];
      }
    }
    EXPECT_TRUE(tok::utf8_is_valid(s));
    out.push_back(std::move(s));
  }
  return out;
}

class TokenizerRoundTrip : public testing::TestWithParam<std::string> {};

std::unique_ptr<Tokenizer> load(const std::string& name) {
  if (name == "tiny-main") return Tokenizer::from_dir(test::model_dir("tiny-main"));
  return test::load_real_tokenizer(name);
}

// Byte-level tokenizers without a normalizer give back exactly the input bytes.
TEST_P(TokenizerRoundTrip, ByteLevelExact) {
  const auto tok = load(GetParam());
  size_t n_tokens = 0;
  for (const std::string& s : random_strings(1234, 400)) {
    const std::vector<int32_t> ids = tok->encode(s);
    n_tokens += ids.size();
    ASSERT_EQ(tok->decode(ids), s) << "ids: " << testing::PrintToString(ids);
  }
  EXPECT_GT(n_tokens, 1000u);
}

INSTANTIATE_TEST_SUITE_P(All, TokenizerRoundTrip, testing::Values("tiny-main", "llama3-128k"),
                         [](const auto& info) { return info.param == "tiny-main" ? "tiny_main" : "llama3"; });

// Qwen3 normalizes to NFC first, so it gives back the NFC form of the input.
TEST(TokenizerRoundTripNfc, Qwen3GivesNfc) {
  const auto tok = test::load_real_tokenizer("qwen3-151k");
  const auto nfc = tok::make_normalizer(nlohmann::json{{"type", "NFC"}}, tok::JsonAt{"(test)", "normalizer"});
  size_t n_changed = 0;
  for (const std::string& s : random_strings(99, 400)) {
    std::string expected = s;
    nfc->normalize(expected);
    n_changed += expected != s;
    ASSERT_EQ(tok->decode(tok->encode(s)), expected);
  }
  EXPECT_GT(n_changed, 10u);  // the atoms include decomposed accents, so NFC did change some
  // NFC composes e + U+0301 into U+00E9 ("é").
  EXPECT_EQ(tok->decode(tok->encode("e\xCC\x81")), "\xC3\xA9");
}

// SentencePiece-style: the normalizer prepends "▁" and the decoder strips one leading space
// again, so the text comes back exactly; with BOS the "▁" shows as a space after "<s>".
TEST(TokenizerRoundTripSpm, MistralGivesInput) {
  const auto tok = test::load_real_tokenizer("spm-mistral-32k");
  for (const std::string& s : random_strings(7, 400)) {
    ASSERT_EQ(tok->decode(tok->encode(s, /*add_special=*/false)), s);
    const std::vector<int32_t> with_bos = tok->encode(s, /*add_special=*/true);
    ASSERT_FALSE(with_bos.empty());
    EXPECT_EQ(with_bos.front(), 1);
    EXPECT_EQ(tok->decode(with_bos, /*skip_special=*/true), s);
    EXPECT_EQ(tok->decode(with_bos), s.empty() ? "<s>" : "<s> " + s);
  }
}

// Chat-template renders mix special tokens and text; they come back unchanged.
TEST(TokenizerRoundTripChat, TemplateRenders) {
  for (const char* name : {"llama3-128k", "qwen3-151k"}) {
    const auto tok = test::load_real_tokenizer(name);
    const auto golden = test::load_json(test::data_path(std::string("tokenizers/") + name + "/golden.json"));
    const auto& renders = golden.at("chat_template_renders");
    ASSERT_FALSE(renders.empty());
    for (const auto& r : renders) {
      const std::string text = r.at("text");
      const std::vector<int32_t> ids = tok->encode(text, /*add_special=*/false);
      EXPECT_EQ(tok->decode(ids), text) << name;
      size_t n_special = 0;
      for (int32_t id : ids) n_special += tok->is_special(id);
      EXPECT_GE(n_special, 2u) << name << ": " << text;  // the role markers are single tokens
    }
  }
}

// A long text (every golden string many times over) survives too.
TEST(TokenizerRoundTripLong, Llama3LongText) {
  const auto tok = test::load_real_tokenizer("llama3-128k");
  const auto golden = test::load_json(test::data_path("tokenizers/llama3-128k/golden.json"));
  std::string text;
  for (int rep = 0; rep < 20; ++rep) {
    for (const auto& c : golden.at("cases")) text += c.at("text").get<std::string>() + "\n\n";
  }
  EXPECT_EQ(tok->decode(tok->encode(text)), text);
}

// encode() is const and shares a word cache between threads: several threads encoding at
// once get the same ids as one thread alone.
TEST(TokenizerThreads, ConcurrentEncodeMatchesSerial) {
  const auto tok = test::load_real_tokenizer("qwen3-151k");
  const std::vector<std::string> inputs = random_strings(555, 200);
  std::vector<std::vector<int32_t>> serial;
  for (const std::string& s : inputs) serial.push_back(tok->encode(s));
  const auto fresh = test::load_real_tokenizer("qwen3-151k");  // empty cache
  constexpr int kThreads = 4;
  const size_t n = inputs.size();
  std::vector<std::vector<std::vector<int32_t>>> results(kThreads, std::vector<std::vector<int32_t>>(n));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t rep = 0; rep < 3; ++rep) {
        for (size_t i = 0; i < n; ++i) {
          // Each thread walks the inputs in its own order (rotated, and reversed for odd t).
          const size_t r = (i + 17 * size_t(t) + rep) % n;
          const size_t k = t % 2 ? n - 1 - r : r;
          results[t][k] = fresh->encode(inputs[k]);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(results[t][i], serial[i]) << "thread " << t << " input " << i;
  }
}

}  // namespace
}  // namespace tf

// The tokenizer's parts on small hand-made cases: UTF-8 helpers, pre-tokenizer split rules,
// added-token flags, post-processors, BPE options the real tokenizers do not exercise.
#include <gtest/gtest.h>

#include <fstream>

#include "model/tokenizer/bpe.h"
#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/json_field.h"
#include "model/tokenizer/normalizer.h"
#include "model/tokenizer/pretokenizer.h"
#include "model/tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace tf {
namespace {

using nlohmann::json;
const std::string kFffd = "\xEF\xBF\xBD";
const std::string kMeta = "\xE2\x96\x81";  // "▁"

std::unique_ptr<Tokenizer> from_json(const json& j, const std::string& name) {
  const std::string path = testing::TempDir() + "tf_tokenizer_units_" + name + ".json";
  std::ofstream(path, std::ios::binary) << j.dump();
  return Tokenizer::from_files(path);
}

tok::JsonAt here(const char* field) { return {"(test)", field}; }

// ---- UTF-8 -----------------------------------------------------------------------------

TEST(TokenizerUtf8, LossyMatchesRustMaximalSubparts) {
  EXPECT_EQ(tok::utf8_lossy("plain é 😀"), "plain é 😀");
  EXPECT_EQ(tok::utf8_lossy("a\xE2\x82"), "a" + kFffd);           // truncated: one U+FFFD
  EXPECT_EQ(tok::utf8_lossy("\xE2\x82" "A"), kFffd + "A");         // cut short by 'A'
  EXPECT_EQ(tok::utf8_lossy("\xC0\x80"), kFffd + kFffd);           // overlong: each byte
  EXPECT_EQ(tok::utf8_lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // surrogate
  EXPECT_EQ(tok::utf8_lossy("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  EXPECT_EQ(tok::utf8_lossy("\xF0\x9F\x98" "x\xFF"), kFffd + "x" + kFffd);
}

TEST(TokenizerUtf8, CompletePrefixHoldsBackOnlyTruncatedTail) {
  EXPECT_EQ(tok::utf8_complete_prefix("ab\xE6\x97"), 2u);
  EXPECT_EQ(tok::utf8_complete_prefix("ab\xE6\x97\xA5"), 5u);
  EXPECT_EQ(tok::utf8_complete_prefix("a\xF0\x9F\x98"), 1u);
  EXPECT_EQ(tok::utf8_complete_prefix("a\xF0"), 1u);
  EXPECT_EQ(tok::utf8_complete_prefix("a\xFF"), 2u);          // never valid: not held back
  EXPECT_EQ(tok::utf8_complete_prefix("a\xE2\x82" "b"), 4u);  // already broken: not held back
  EXPECT_EQ(tok::utf8_complete_prefix(""), 0u);
}

TEST(TokenizerByteLevel, Gpt2Map) {
  EXPECT_EQ(tok::byte_to_unicode(' '), "\xC4\xA0");   // Ġ
  EXPECT_EQ(tok::byte_to_unicode('\n'), "\xC4\x8A");  // Ċ
  EXPECT_EQ(tok::byte_to_unicode('A'), "A");
  EXPECT_EQ(tok::byte_to_unicode(0xAD), "\xC5\x83");  // the last shifted byte: U+0143
  for (int b = 0; b < 256; ++b) {
    size_t i = 0;
    const std::string_view ch = tok::byte_to_unicode(uint8_t(b));
    EXPECT_EQ(tok::unicode_to_byte(tok::utf8_next(ch, i)), b);
  }
  EXPECT_EQ(tok::unicode_to_bytes("\xC4\xA0the"), " the");
  EXPECT_EQ(tok::unicode_to_bytes("<|x|>"), "<|x|>");
  EXPECT_EQ(tok::unicode_to_bytes("日本"), "日本");  // not in the map: kept as is
}

// ---- normalizers and pre-tokenizers ----------------------------------------------------

TEST(TokenizerNormalizer, SequencePrependReplaceNfc) {
  const auto n = tok::make_normalizer(
      json{{"type", "Sequence"},
           {"normalizers", json::array({{{"type", "NFC"}},
                                        {{"type", "Prepend"}, {"prepend", kMeta}},
                                        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}},
                                        {{"type", "Replace"}, {"pattern", {{"Regex", "\\d+"}}}, {"content", "#"}}})}},
      here("normalizer"));
  std::string s = "cafe\xCC\x81 no 42";
  n->normalize(s);
  EXPECT_EQ(s, kMeta + "caf\xC3\xA9" + kMeta + "no" + kMeta + "#");
  std::string empty;
  n->normalize(empty);
  EXPECT_EQ(empty, "");  // Prepend leaves an empty piece empty
}

std::vector<std::string> pre_tokenize(const json& j, const std::string& text) {
  const auto p = tok::make_pre_tokenizer(j, here("pre_tokenizer"));
  std::vector<tok::PreToken> pieces{{text, true}};
  p->pre_tokenize(pieces);
  std::vector<std::string> out;
  for (auto& t : pieces) out.push_back(t.text);
  return out;
}

// The examples of HF's SplitDelimiterBehavior documentation.
TEST(TokenizerPreTokenizer, SplitBehaviors) {
  auto split = [](const char* behavior, bool invert = false) {
    return pre_tokenize({{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}},
                        "the-final--countdown");
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Removed"), (V{"the", "final", "countdown"}));
  EXPECT_EQ(split("Isolated"), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithPrevious"), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithNext"), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split("Contiguous"), (V{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(split("Removed", /*invert=*/true), (V{"-", "-", "-"}));
}

TEST(TokenizerPreTokenizer, ByteLevelGpt2Regex) {
  using V = std::vector<std::string>;
  const std::string g = "\xC4\xA0";  // Ġ
  EXPECT_EQ(pre_tokenize({{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}},
                         "Hello world's  42!"),
            (V{g + "Hello", g + "world", "'s", g, g + "42", "!"}));
  EXPECT_EQ(pre_tokenize({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}, "a b\n"),
            (V{"a" + g + "b\xC4\x8A"}));
}

TEST(TokenizerPreTokenizer, UnicodeClassesInSplitRegex) {
  // Llama-3's pattern: letters of any script, numbers in runs of at most three.
  const json split = {{"type", "Split"},
                      {"pattern", {{"Regex", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                                             "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                                             "\\s+(?!\\S)|\\s+"}}},
                      {"behavior", "Isolated"}};
  using V = std::vector<std::string>;
  EXPECT_EQ(pre_tokenize(split, "Ελληνικά 12345 IT'S\u00A0ok"),
            (V{"Ελληνικά", " ", "123", "45", " IT", "'S", "\u00A0ok"}));
}

TEST(TokenizerPreTokenizer, MetaspaceFirstAndSplit) {
  const json meta = {{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", "first"}, {"split", true}};
  const auto p = tok::make_pre_tokenizer(meta, here("pre_tokenizer"));
  std::vector<tok::PreToken> first{{"Hello  world", true}}, later{{"Hello world", false}};
  p->pre_tokenize(first);
  p->pre_tokenize(later);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first[0].text, kMeta + "Hello");
  EXPECT_EQ(first[1].text, kMeta);
  EXPECT_EQ(first[2].text, kMeta + "world");
  ASSERT_EQ(later.size(), 2u);
  EXPECT_EQ(later[0].text, "Hello");  // "first": only the piece at the start of the input
  EXPECT_EQ(later[1].text, kMeta + "world");
}

// ---- whole tokenizers ------------------------------------------------------------------

// A byte-level tokenizer whose vocab holds every byte's character (ids 0..255) plus `extra`
// words of two or more characters (ids 256...; ignore_merges makes a word found in the vocab
// a single token).
json byte_level_tokenizer(const std::vector<std::string>& extra, json added = json::array()) {
  json vocab = json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b) vocab[std::string(tok::byte_to_unicode(uint8_t(b)))] = id++;
  for (const auto& w : extra) vocab[w] = id++;
  return {{"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}, {"ignore_merges", true}}}};
}

json added_token(int id, const std::string& content, json flags = json::object()) {
  json t = {{"id", id}, {"content", content}, {"special", true}, {"single_word", false},
            {"lstrip", false}, {"rstrip", false}, {"normalized", false}};
  t.update(flags);
  return t;
}

std::vector<std::string> texts(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(tok.token_text(id));
  return out;
}

TEST(TokenizerAddedTokens, LongestMatchAndFlags) {
  const json added = json::array({added_token(300, "<A>"), added_token(301, "<A><B>"),
                                  added_token(302, "<L>", {{"lstrip", true}}),
                                  added_token(303, "<R>", {{"rstrip", true}}),
                                  added_token(304, "<W>", {{"single_word", true}}),
                                  added_token(305, "<n>", {{"special", false}})});
  const auto tok = from_json(byte_level_tokenizer({"\xC4\xA0" "b"}, added), "added");
  using V = std::vector<std::string>;
  EXPECT_EQ(texts(*tok, tok->encode("a<A><B>b<A>")), (V{"a", "<A><B>", "b", "<A>"}));
  EXPECT_EQ(texts(*tok, tok->encode("a  <L>b")), (V{"a", "<L>", "b"}));  // spaces join <L>
  EXPECT_EQ(texts(*tok, tok->encode("a<R> \n b")), (V{"a", "<R>", "b"}));  // ... and <R>
  EXPECT_EQ(texts(*tok, tok->encode("a <W> b")), (V{"a", "\xC4\xA0", "<W>", "\xC4\xA0" "b"}));
  // Touching a word character, a single_word token is left as text.
  EXPECT_EQ(tok->encode("a<W>").size(), 4u);
  EXPECT_EQ(tok->decode(tok->encode("a<W>b")), "a<W>b");
  EXPECT_EQ(tok->token_id("<A><B>"), 301);
  EXPECT_TRUE(tok->is_special(300));
  EXPECT_FALSE(tok->is_special(305));
  EXPECT_EQ(tok->decode(tok->encode("a<A>b<n>"), /*skip_special=*/true), "ab<n>");
  EXPECT_EQ(tok->n_vocab(), 306);
}

// A normalized added token is matched in the normalized text, by its normalized form.
TEST(TokenizerAddedTokens, NormalizedTokens) {
  json j = byte_level_tokenizer({}, json::array({added_token(400, "xx", {{"normalized", true}})}));
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", "y"}}}, {"content", "x"}};
  const auto tok = from_json(j, "normalized_added");
  EXPECT_EQ(tok->encode("yy"), (std::vector<int32_t>{400}));
  EXPECT_EQ(tok->encode("xyx"), (std::vector<int32_t>{400, *tok->token_id("x")}));
}

TEST(TokenizerPostProcessor, TemplateBertRobertaSequence) {
  json j = byte_level_tokenizer({"hi"}, json::array({added_token(300, "<s>"), added_token(301, "</s>")}));
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}})},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {300}}, {"tokens", {"<s>"}}}},
                          {"</s>", {{"id", "</s>"}, {"ids", {301}}, {"tokens", {"</s>"}}}}}}};
  const int32_t hi = 256;
  auto tok = from_json(j, "template");
  EXPECT_EQ(tok->encode("hi"), (std::vector<int32_t>{300, hi, 301}));
  EXPECT_EQ(tok->encode("hi", /*add_special=*/false), (std::vector<int32_t>{hi}));
  EXPECT_EQ(tok->encode(""), (std::vector<int32_t>{300, 301}));

  j["post_processor"] = {{"type", "RobertaProcessing"}, {"cls", {"<s>", 300}}, {"sep", {"</s>", 301}},
                         {"trim_offsets", true}, {"add_prefix_space", false}};
  tok = from_json(j, "roberta");
  EXPECT_EQ(tok->encode("hi"), (std::vector<int32_t>{300, hi, 301}));

  // Llama-3.1 style: ByteLevel (adds nothing) then a BOS-only template.
  j["post_processor"] = {
      {"type", "Sequence"},
      {"processors", json::array({{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false},
                                   {"use_regex", true}},
                                  {{"type", "TemplateProcessing"},
                                   {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                                           {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                                   {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {300}}, {"tokens", {"<s>"}}}}}}}})}};
  tok = from_json(j, "sequence_post");
  EXPECT_EQ(tok->encode("hi"), (std::vector<int32_t>{300, hi}));
}

// SentencePiece-style BPE options: byte fallback, unk, fuse_unk.
TEST(TokenizerBpe, ByteFallbackUnkFuse) {
  json vocab = {{"<unk>", 0}, {"a", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}};
  json j = {{"normalizer", nullptr}, {"pre_tokenizer", nullptr}, {"added_tokens", json::array()},
            {"decoder", {{"type", "Sequence"}, {"decoders", json::array({{{"type", "ByteFallback"}}, {{"type", "Fuse"}}})}}},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}, {"unk_token", "<unk>"},
                       {"byte_fallback", true}, {"fuse_unk", false}}}};
  auto tok = from_json(j, "fallback");
  using I = std::vector<int32_t>;
  EXPECT_EQ(tok->encode("a\xC3\xA9"), (I{1, 2, 3}));      // é: both bytes have tokens
  EXPECT_EQ(tok->encode("a\xE2\x82\xAC\xE2\x82\xAC"), (I{1, 0, 0}));  // €: no <0xE2>: unk each
  EXPECT_EQ(tok->decode(I{1, 2, 3}), "a\xC3\xA9");
  EXPECT_EQ(tok->decode(I{2, 1}), kFffd + "a");
  j["model"]["fuse_unk"] = true;
  tok = from_json(j, "fallback_fuse");
  EXPECT_EQ(tok->encode("a\xE2\x82\xAC\xE2\x82\xAC" "a"), (I{1, 0, 1}));
}

TEST(TokenizerBpe, MergeRanksAndSubwordPrefix) {
  // "abc": merges rank "b c" before "a b", so b+c merges first and "a bc" then applies.
  json j = {{"normalizer", nullptr}, {"pre_tokenizer", nullptr}, {"added_tokens", json::array()}, {"decoder", nullptr},
            {"model", {{"type", "BPE"},
                       {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}}},
                       {"merges", json::array({json::array({"b", "c"}), json::array({"a", "b"}), "a bc"})}}}};
  auto tok = from_json(j, "ranks");
  using I = std::vector<int32_t>;
  EXPECT_EQ(tok->encode("abc"), (I{5}));
  EXPECT_EQ(tok->encode("abab"), (I{3, 3}));
  EXPECT_EQ(tok->decode(I{3, 2}), "ab c");  // no decoder: HF joins tokens with spaces
  j["model"]["merges"] = json::array({"a b", "b c"});
  tok = from_json(j, "ranks2");
  EXPECT_EQ(tok->encode("abc"), (I{3, 2}));

  json wp = {{"normalizer", nullptr}, {"pre_tokenizer", nullptr}, {"added_tokens", json::array()}, {"decoder", nullptr},
             {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"##b", 1}, {"ab", 2}}}, {"merges", json::array({"a ##b"})},
                        {"continuing_subword_prefix", "##"}}}};
  tok = from_json(wp, "prefix");
  EXPECT_EQ(tok->encode("ab"), (I{2}));
}

// Merges given as "a b" strings and as [a, b] pairs mean the same.
TEST(TokenizerBpe, MergesStringsEqualPairs) {
  json j = test::load_json(test::model_dir("tiny-main") + "/tokenizer.json");
  ASSERT_TRUE(j["model"]["merges"][0].is_array());
  json strings = json::array();
  for (const auto& m : j["model"]["merges"]) strings.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  const auto pairs_tok = from_json(j, "pairs");
  j["model"]["merges"] = strings;
  const auto strings_tok = from_json(j, "strings");
  const std::string text = "The quick brown fox, 1234 jumps! Über straße — 漢字 😀\n\n  end";
  EXPECT_EQ(pairs_tok->encode(text), strings_tok->encode(text));
  EXPECT_GT(pairs_tok->encode(text).size(), 10u);
}

// Long words go through a bucket queue instead of a heap; both must merge in the same order.
// Checked on the real Mistral and Qwen3 models with long words of varied text.
TEST(TokenizerBpe, BucketQueueEqualsHeap) {
  const std::string text =
      "The quick brown fox jumps over the lazy dog; 1234567 numbers, café, naïve, 漢字かな, "
      "\xF0\x9F\x98\x80 emoji, aaaaaaaaaaaaaaaaaaaaaa, abababababab, \t tabs \n\n newlines.  ";
  for (const char* name : {"spm-mistral-32k", "qwen3-151k"}) {
    const json j = test::load_json(test::real_tokenizer_json(name));
    const tok::Bpe bpe(j.at("model"), {name, "model"});
    std::string word;
    for (int rep = 0; rep < 40; ++rep) {
      for (char c : text) {
        // Alphabet of the vocab: "▁" for spaces (SPM), GPT-2 characters (byte-level).
        if (std::string(name) == "spm-mistral-32k") {
          word += c == ' ' ? kMeta : std::string(1, c);
        } else {
          word += tok::byte_to_unicode(uint8_t(c));
        }
      }
    }
    std::vector<int32_t> heap, buckets;
    bpe.tokenize(word, heap, tok::Bpe::Queue::Heap);
    bpe.tokenize(word, buckets, tok::Bpe::Queue::Buckets);
    EXPECT_GT(heap.size(), 1000u) << name;
    EXPECT_EQ(heap, buckets) << name;
  }
}

// Ill-formed UTF-8 input is repaired with U+FFFD (Rust strings cannot hold it) instead of
// reaching the regex engine.
TEST(TokenizerBpe, InvalidUtf8InputIsRepaired) {
  const auto tok = Tokenizer::from_dir(test::model_dir("tiny-main"));
  EXPECT_EQ(tok->decode(tok->encode("ok\xFF\xE2\x82")), "ok" + kFffd + kFffd);
}

}  // namespace
}  // namespace tf

#include "model/tokenizer/gguf_vocab.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "core/error.h"
#include "model/gguf/gguf_file.h"
#include "model/tokenizer/hf_tokenizer.h"

namespace tf {
namespace tok {

using json = nlohmann::json;

namespace {

// The word-splitting regexes of the tokenizer.json files these names stand for (llama.cpp
// applies the same ones for the same tokenizer.ggml.pre values).
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Mistral's Tekken (Mistral NeMo, Small 3) and OpenAI's o200k (Phi-4): words split at case
// changes, digits one at a time (Tekken) or in threes (o200k), '/' kept with punctuation.
constexpr const char* kTekkenPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt4oPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kSpace = "\xE2\x96\x81";  // "▁", SentencePiece's space

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum TokenType : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// Token ids must fit the tokenizer's id checks (json_need_id).
constexpr size_t kMaxTokens = size_t(1) << 30;
// Tokens longer than this take no part in derived SentencePiece merges: splitting one costs
// time quadratic in its length, and real vocabularies hold nothing near it.
constexpr size_t kMaxMergedTokenBytes = 1024;

json split_isolated(const char* regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}
json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", use_regex}};
}
json pre_sequence(json a, json b) { return {{"type", "Sequence"}, {"pretokenizers", {std::move(a), std::move(b)}}}; }

struct PreRule {
  json pre_tokenizer;
  bool ignore_merges = false;
  bool add_bos = false;  // llama.cpp's default when tokenizer.ggml.add_bos_token is absent
};

PreRule pre_rule(const GgufFile& f) {
  const std::string pre(f.opt_string("tokenizer.ggml.pre").value_or("default"));
  if (pre == "default" || pre == "gpt-2" || pre == "gpt2") return {byte_level(true)};
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3")
    return {pre_sequence(split_isolated(kLlama3Pattern), byte_level(false)), /*ignore_merges=*/true, /*add_bos=*/true};
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return {pre_sequence(split_isolated(kQwen2Pattern), byte_level(false))};
  if (pre == "tekken")
    return {pre_sequence(split_isolated(kTekkenPattern), byte_level(false)), /*ignore_merges=*/true, /*add_bos=*/true};
  if (pre == "gpt-4o") return {pre_sequence(split_isolated(kGpt4oPattern), byte_level(false))};
  if (pre == "smollm" || pre == "starcoder") return {pre_sequence(split_isolated(R"(\p{N})"), byte_level(true))};
  f.fail_key("tokenizer.ggml.pre", "is \"{}\": this pre-tokenizer is not supported (supported: default, gpt-2, "
             "llama-bpe, qwen2, deepseek-r1-qwen, tekken, gpt-4o, smollm, starcoder)", pre);
}

struct Vocab {
  std::vector<std::string> tokens;  // [n_tokens]
  std::vector<int64_t> types;       // [n_tokens]
};

Vocab read_vocab(const GgufFile& f) {
  Vocab v;
  const std::span<const std::string_view> tokens = f.get_strings("tokenizer.ggml.tokens");
  if (tokens.empty()) f.fail_key("tokenizer.ggml.tokens", "is empty");
  if (tokens.size() > kMaxTokens) f.fail_key("tokenizer.ggml.tokens", "has {} tokens (at most {})", tokens.size(), kMaxTokens);
  v.tokens.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i)  // llama.cpp renames empty tokens the same way
    v.tokens.emplace_back(tokens[i].empty() ? fmt::format("[EMPTY_{}]", i) : std::string(tokens[i]));
  if (f.has("tokenizer.ggml.token_type")) {
    v.types = f.get_ints("tokenizer.ggml.token_type");
    if (v.types.size() != tokens.size())
      f.fail_key("tokenizer.ggml.token_type", "has {} entries for {} tokens", v.types.size(), tokens.size());
  } else {
    v.types.assign(tokens.size(), kNormal);
  }
  return v;
}

// An id key (bos_token_id, ...) that must name a token; nullopt when absent.
std::optional<int32_t> token_id_key(const GgufFile& f, const char* key, size_t n_tokens) {
  const std::optional<uint64_t> id = f.opt_uint(key);
  if (id && *id >= n_tokens) f.fail_key(key, "is {}, outside the vocabulary of {} tokens", *id, n_tokens);
  return id ? std::optional<int32_t>(int32_t(*id)) : std::nullopt;
}

json added_tokens(const Vocab& v) {
  json out = json::array();
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const int64_t t = v.types[i];
    if (t != kControl && t != kUnknown && t != kUserDefined) continue;
    out.push_back({{"id", int64_t(i)}, {"content", v.tokens[i]}, {"special", t != kUserDefined},
                   {"normalized", false}, {"lstrip", false}, {"rstrip", false}, {"single_word", false}});
  }
  return out;
}

// What encode(text, add_special=true) puts around the ids: BOS and/or EOS.
json post_processor(const GgufFile& f, const Vocab& v, bool add_bos_default) {
  const size_t n = v.tokens.size();
  const std::optional<int32_t> bos = token_id_key(f, "tokenizer.ggml.bos_token_id", n);
  const std::optional<int32_t> eos = token_id_key(f, "tokenizer.ggml.eos_token_id", n);
  const std::optional<bool> add_bos_key = f.opt_bool("tokenizer.ggml.add_bos_token");
  const std::optional<bool> add_eos_key = f.opt_bool("tokenizer.ggml.add_eos_token");
  if (add_bos_key.value_or(false) && !bos) f.fail_key("tokenizer.ggml.add_bos_token", "is true, but tokenizer.ggml.bos_token_id is missing");
  if (add_eos_key.value_or(false) && !eos) f.fail_key("tokenizer.ggml.add_eos_token", "is true, but tokenizer.ggml.eos_token_id is missing");
  const bool add_bos = add_bos_key.value_or(add_bos_default) && bos;
  const bool add_eos = add_eos_key.value_or(false) && eos;
  if (!add_bos && !add_eos) return nullptr;
  json single = json::array(), specials = json::object();
  auto special = [&](int32_t id) {
    const std::string name = "id" + std::to_string(id);  // a key unique per id
    specials[name] = {{"id", name}, {"ids", {id}}, {"tokens", {v.tokens[size_t(id)]}}};
    single.push_back({{"SpecialToken", {{"id", name}, {"type_id", 0}}}});
  };
  if (add_bos) special(*bos);
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (add_eos) special(*eos);
  return {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", specials}};
}

// SentencePiece BPE merges from the scores, as transformers' SentencePieceExtractor derives
// them: for each token (in id order), every split into two tokens (ordered by their ids), all
// then stably sorted by the merged token's score, highest first.
json spm_merges(const GgufFile& f, const Vocab& v) {
  const std::vector<float> scores = f.get_floats("tokenizer.ggml.scores");
  if (scores.size() != v.tokens.size())
    f.fail_key("tokenizer.ggml.scores", "has {} entries for {} tokens", scores.size(), v.tokens.size());
  for (size_t i = 0; i < scores.size(); ++i)
    if (std::isnan(scores[i])) f.fail_key("tokenizer.ggml.scores", "entry {} is NaN", i);
  std::unordered_map<std::string_view, int32_t> index;
  index.reserve(v.tokens.size());
  for (size_t i = 0; i < v.tokens.size(); ++i) index.emplace(v.tokens[i], int32_t(i));

  struct Merge { float score; int32_t left, right; };
  std::vector<Merge> merges;
  std::vector<std::pair<int32_t, int32_t>> local;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const std::string_view t = v.tokens[i];
    if (t.size() > kMaxMergedTokenBytes) continue;
    local.clear();
    for (size_t p = 1; p < t.size(); ++p) {
      if ((uint8_t(t[p]) & 0xC0) == 0x80) continue;  // inside a UTF-8 character
      auto l = index.find(t.substr(0, p)), r = index.find(t.substr(p));
      if (l != index.end() && r != index.end()) local.emplace_back(l->second, r->second);
    }
    std::sort(local.begin(), local.end());
    for (const auto& [l, r] : local) merges.push_back({scores[i], l, r});
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) { return a.score > b.score; });
  json out = json::array();
  for (const Merge& m : merges) out.push_back({v.tokens[size_t(m.left)], v.tokens[size_t(m.right)]});
  return out;
}

json gpt2_json(const GgufFile& f, const Vocab& v) {
  const PreRule rule = pre_rule(f);
  json merges = json::array();
  if (f.has("tokenizer.ggml.merges"))
    for (std::string_view m : f.get_strings("tokenizer.ggml.merges")) merges.push_back(std::string(m));
  return {{"model", {{"type", "BPE"}, {"merges", std::move(merges)}, {"ignore_merges", rule.ignore_merges}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", rule.pre_tokenizer},
          {"decoder", byte_level(false)},
          {"post_processor", post_processor(f, v, rule.add_bos)},
          {"added_tokens", added_tokens(v)}};
}

json spm_json(const GgufFile& f, const Vocab& v) {
  if (f.opt_bool("tokenizer.ggml.remove_extra_whitespaces").value_or(false))
    f.fail_key("tokenizer.ggml.remove_extra_whitespaces", "is true, which is not supported");
  const bool add_space_prefix = f.opt_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  std::optional<int32_t> unk = token_id_key(f, "tokenizer.ggml.unknown_token_id", v.tokens.size());
  if (!unk) {
    auto it = std::find(v.types.begin(), v.types.end(), kUnknown);
    if (it != v.types.end()) unk = int32_t(it - v.types.begin());
  }
  json model = {{"type", "BPE"}, {"merges", spm_merges(f, v)}, {"byte_fallback", true}, {"fuse_unk", true}};
  if (unk) model["unk_token"] = v.tokens[size_t(*unk)];

  json normalizers = json::array();
  if (add_space_prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", kSpace}});
  normalizers.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}});
  json decoders = {{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                   {{"type", "ByteFallback"}},
                   {{"type", "Fuse"}}};
  if (add_space_prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  return {{"model", std::move(model)},
          {"normalizer", {{"type", "Sequence"}, {"normalizers", std::move(normalizers)}}},
          {"pre_tokenizer", nullptr},
          {"decoder", {{"type", "Sequence"}, {"decoders", std::move(decoders)}}},
          {"post_processor", post_processor(f, v, /*add_bos_default=*/true)},
          {"added_tokens", added_tokens(v)}};
}

}  // namespace

json gguf_tokenizer_json(const GgufFile& f, VocabEntries& vocab) {
  const std::string model(f.get_string("tokenizer.ggml.model"));
  if (model != "gpt2" && model != "llama")
    f.fail_key("tokenizer.ggml.model", "is \"{}\": this tokenizer model is not supported (supported: gpt2, llama)", model);
  const Vocab v = read_vocab(f);
  json j = model == "gpt2" ? gpt2_json(f, v) : spm_json(f, v);
  vocab.clear();
  vocab.reserve(v.tokens.size());
  for (size_t i = 0; i < v.tokens.size(); ++i) vocab.emplace_back(v.tokens[i], json(int64_t(i)));
  return j;
}

}  // namespace tok

std::unique_ptr<Tokenizer> gguf_tokenizer(const GgufFile& f) {
  tok::VocabEntries vocab;
  const nlohmann::json j = tok::gguf_tokenizer_json(f, vocab);
  const size_t n = vocab.size();
  tok::HfTokenizer::SpecialIds special{.bos = tok::token_id_key(f, "tokenizer.ggml.bos_token_id", n),
                                       .eos = tok::token_id_key(f, "tokenizer.ggml.eos_token_id", n)};
  return std::make_unique<tok::HfTokenizer>(j, std::move(vocab), f.path(), special);
}

}  // namespace tf

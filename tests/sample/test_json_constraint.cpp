// MachineConstraint<JsonMachine> over a made-up vocabulary (every byte, and multi-byte tokens that cross
// JSON's token boundaries): the mask equals feeding each token's bytes to a copy of the
// machine, EOS is allowed exactly when the object is complete, and random draws under the
// mask always end in an object the reference parser reads.
#include "sample/json_machine.h"
#include "sample/token_constraint.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <random>

#include "core/error.h"
#include "masked_draw.h"

namespace tf {
namespace {

constexpr int32_t kEos = 0;

// Id 0 is EOS, ids 1..256 the bytes 0..255, then multi-byte tokens; one special (empty) id.
ConstraintVocab make_vocab() {
  ConstraintVocab v;
  v.bytes.push_back("</s>");  // EOS: its bytes never count
  for (int b = 0; b < 256; ++b) v.bytes.push_back(std::string(1, char(b)));
  for (const char* t : {"{\"", "\":", "\": \"", "\",", "\"}", "}}", "]}", "},", "true", "false", "null", "123",
                        "-0.5e", "e+10", " \"", "\\u", "\\ud83d", "\\ude00", "\xc3\xa9", "\xe4\xb8", "\xad", "ab",
                        "abc", "abc", ", \"", "[{", "\n  ", "\n\n\n\n"})
    v.bytes.push_back(t);
  v.bytes.push_back("");  // a special token: never allowed
  v.eos = {kEos};
  return v;
}

// What the mask must be: id allowed iff its bytes feed a copy of m (EOS iff m is complete).
std::vector<bool> brute_force(const ConstraintVocab& v, const JsonMachine& m) {
  std::vector<bool> ok(v.bytes.size());
  for (size_t i = 0; i < v.bytes.size(); ++i) {
    JsonMachine c = m;
    ok[i] = i == size_t(kEos) ? m.complete() : !v.bytes[i].empty() && c.feed(v.bytes[i]);
  }
  return ok;
}

// Draws from logits (Gumbel-max) under the mask, with the closing bytes favoured so that
// objects end; returns the text and whether the draw ended in EOS.
using JsonMasks = MaskSet<JsonMachine>;
using JsonConstraint = MachineConstraint<JsonMachine>;

std::shared_ptr<JsonMasks> masks_of(ConstraintVocab v) {
  return std::make_shared<JsonMasks>(std::make_shared<const TokenTrie>(std::move(v)));
}

std::pair<std::string, bool> draw(const ConstraintVocab& v, const std::shared_ptr<JsonMasks>& jv, std::mt19937& rng,
                                  int max_tokens, JsonConstraint* out = nullptr) {
  JsonConstraint c(jv, JsonMachine{});
  std::normal_distribution<float> normal;
  std::string text;
  for (int t = 0; t < max_tokens; ++t) {
    std::vector<float> logits(v.bytes.size() + 3);  // ids past the vocabulary are masked too
    for (size_t i = 0; i < logits.size(); ++i) {
      logits[i] = normal(rng);
      if (i < v.bytes.size()) {
        const std::string& b = v.bytes[i];
        if (b == "\"" || b == "}" || b == "]" || b == "\"}" || b == "}}") logits[i] += 3.0f;
        if (b == "{" || b == "[" || b == "[{") logits[i] -= 2.0f;
      }
    }
    logits[kEos] += 5.0f;
    c.mask(logits);
    const int32_t best = test::gumbel_max(logits, rng);
    EXPECT_GE(best, 0) << "every id masked after " << text;
    EXPECT_LT(best, int32_t(v.bytes.size()));
    if (best < 0) break;
    c.accept(best);
    if (best == kEos) {
      if (out != nullptr) *out = c;
      return {text, true};
    }
    text += v.bytes[size_t(best)];
  }
  if (out != nullptr) *out = c;
  return {text, false};
}

TEST(SampleJsonConstraint, MaskIsWhatEachTokenFeeds) {
  const ConstraintVocab v = make_vocab();
  auto jv = masks_of(v);
  // States along texts that visit every mode: start, keys, values of each kind, escapes,
  // surrogates, UTF-8, the end.
  const std::string text =
      "{ \"k\": [1, -0.5e+10, true, null, \"a\\ud83d\\ude00\xc3\xa9\xe4\xb8\xad\"], \"o\": {\"\": {}}, \"n\": 0}";
  JsonMachine m;
  for (size_t i = 0; i <= text.size(); ++i) {
    SCOPED_TRACE(text.substr(0, i));
    ASSERT_TRUE(i == 0 || m.feed(uint8_t(text[i - 1])));
    JsonConstraint at(jv, JsonMachine{});
    for (size_t j = 0; j < i; ++j) at.accept(1 + int32_t(uint8_t(text[j])));  // byte tokens
    const std::vector<bool> want = brute_force(v, m);
    std::vector<float> logits(v.bytes.size(), 0.0f);
    at.mask(logits);
    for (size_t id = 0; id < v.bytes.size(); ++id) {
      ASSERT_EQ(!std::isinf(logits[id]), bool(want[id])) << "id " << id << " '" << v.bytes[id] << "'";
      ASSERT_EQ(at.allows(int32_t(id)), bool(want[id])) << "id " << id;
    }
    EXPECT_EQ(at.complete(), i == text.size());
  }
  EXPECT_GT(jv->n_hits(), 0);  // the second JsonConstraint at each state found the first's set
}

TEST(SampleJsonConstraint, EosOnlyWhenCompleteAndThenOnlyEos) {
  auto jv = masks_of(make_vocab());
  JsonConstraint c(jv, JsonMachine{});
  EXPECT_FALSE(c.allows(kEos));
  c.accept(1 + '{');
  EXPECT_FALSE(c.allows(kEos));
  c.accept(1 + '}');
  EXPECT_TRUE(c.complete());
  std::vector<float> logits(size_t(jv->trie().n_vocab()), 1.0f);
  c.mask(logits);
  for (size_t i = 0; i < logits.size(); ++i) EXPECT_EQ(std::isinf(logits[i]), i != size_t(kEos)) << i;
  EXPECT_THROW(c.accept(1 + ' '), Error);
  c.accept(kEos);
}

TEST(SampleJsonConstraint, RefusedTokenThrowsAndSpecialTokensNeverPass) {
  const ConstraintVocab v = make_vocab();
  auto jv = masks_of(v);
  JsonConstraint c(jv, JsonMachine{});
  EXPECT_THROW(c.accept(1 + 'x'), Error);
  EXPECT_THROW(c.accept(int32_t(v.bytes.size())), Error);  // past the vocabulary
  c.accept(1 + '{');
  c.accept(1 + '"');
  EXPECT_FALSE(c.allows(int32_t(v.bytes.size()) - 1));  // the empty (special) id, inside a string
  EXPECT_TRUE(c.allows(1 + 'a'));
}

// A vocabulary without the bytes the state needs: EOS rather than nothing at all.
TEST(SampleJsonConstraint, DeadEndVocabularyAllowsEos) {
  ConstraintVocab v;
  v.bytes = {"</s>", "{", "x"};
  v.eos = {0};
  JsonConstraint c(masks_of(v), JsonMachine{});
  c.accept(1);
  EXPECT_TRUE(c.allows(0));
  EXPECT_FALSE(c.allows(2));
}

TEST(SampleJsonConstraint, RandomDrawsEndInObjectsTheReferenceReads) {
  const ConstraintVocab v = make_vocab();
  auto jv = masks_of(v);
  std::mt19937 rng(3);
  int n_ended = 0;
  for (int run = 0; run < 400; ++run) {
    JsonConstraint c(jv, JsonMachine{});
    const auto [text, ended] = draw(v, jv, rng, 3000, &c);
    if (!ended) continue;
    ++n_ended;
    SCOPED_TRACE(text);
    ASSERT_TRUE(nlohmann::json::accept(text));
    ASSERT_TRUE(nlohmann::json::parse(text).is_object());
    EXPECT_TRUE(c.complete());
  }
  EXPECT_GE(n_ended, 380);  // the closing bytes are favoured: nearly every draw ends
}

}  // namespace
}  // namespace tf

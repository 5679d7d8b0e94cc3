// SamplingParams::presence_penalty, frequency_penalty and logit_bias through the engine: greedy
// decoding with them equals a reference loop over Engine::score (the raw model outside the
// scheduler) that applies OpenAI's rule written out here, counting only the generated tokens;
// batched with plain requests, each request gives what it gives alone.
#include <gtest/gtest.h>

#include <map>

#include "test_util.h"
#include "tiny_engine_suite.h"
#include "twofold/engine.h"

namespace tf {
namespace {

const std::string kTiny = test::model_dir("tiny-main");

std::vector<int32_t> run_alone(Engine& e, const GenerateRequest& req, std::vector<int32_t>* prompt = nullptr) {
  const RequestId id = e.add_request(req);
  while (e.has_unfinished()) e.step();
  if (prompt) *prompt = e.prompt_ids(id);
  std::vector<int32_t> out = e.output_ids(id);
  e.release(id);
  return out;
}

// Greedy with OpenAI's penalties, one score() per token: logit -= count * frequency +
// (count > 0) * presence, counts over the tokens generated so far.
std::vector<int32_t> reference_greedy(Engine& e, const std::vector<int32_t>& prompt, int32_t n, float presence,
                                      float frequency, const std::map<int32_t, float>& bias = {}) {
  std::vector<int32_t> seq = prompt, out;
  std::map<int32_t, int> counts;
  for (int32_t t = 0; t < n; ++t) {
    std::vector<float> logits = e.score(seq, /*all_positions=*/false);
    for (const auto& [id, b] : bias) logits[size_t(id)] += b;
    for (const auto& [id, c] : counts) logits[size_t(id)] -= float(c) * frequency + (c > 0 ? presence : 0.0f);
    const int32_t best = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(best);
    seq.push_back(best);
    ++counts[best];
  }
  return out;
}

class Penalties : public test::TinyEngineSuite {};

const char* const kPrompts[] = {"The LORD is my shepherd;", "And God said, Let there be light: and there was",
                                "the the the the the the the the"};

TEST_F(Penalties, GreedyEqualsTheReferenceRule) {
  const std::pair<float, float> settings[] = {{0.0f, 2.0f}, {2.0f, 0.0f}, {0.7f, 0.4f}, {-1.0f, -0.5f}};
  for (const char* prompt : kPrompts) {
    std::vector<int32_t> plain_prompt;
    const std::vector<int32_t> plain =
        run_alone(*engine_, {.prompt = prompt, .sampling = {.temperature = 0, .max_tokens = 24, .ignore_eos = true}},
                  &plain_prompt);
    int changed = 0;
    for (const auto& [presence, frequency] : settings) {
      SCOPED_TRACE(std::string(prompt) + " presence " + std::to_string(presence) + " frequency " +
                   std::to_string(frequency));
      const GenerateRequest req{.prompt = prompt,
                                .sampling = {.temperature = 0, .presence_penalty = presence,
                                             .frequency_penalty = frequency, .max_tokens = 24, .ignore_eos = true}};
      std::vector<int32_t> p;
      const std::vector<int32_t> got = run_alone(*engine_, req, &p);
      EXPECT_EQ(got, reference_greedy(*engine_, p, 24, presence, frequency));
      // Nothing is generated before the first token, so the prompt's tokens are not penalised.
      ASSERT_FALSE(got.empty());
      EXPECT_EQ(got[0], plain[0]);
      changed += got != plain;
    }
    EXPECT_GT(changed, 0) << "no setting changed the output of '" << prompt << "'";
  }
}

// A bias of -100 on the plain greedy token of every step but the first bans it; +100 forces one.
TEST_F(Penalties, LogitBiasBansAndForcesTokens) {
  std::vector<int32_t> p;
  const std::vector<int32_t> plain = run_alone(
      *engine_, {.prompt = kPrompts[0], .sampling = {.temperature = 0, .max_tokens = 12, .ignore_eos = true}}, &p);
  std::map<int32_t, float> ban;
  for (size_t i = 1; i < plain.size(); ++i) ban[plain[i]] = -100.0f;
  ban.erase(plain[0]);
  GenerateRequest req{.prompt = kPrompts[0], .sampling = {.temperature = 0, .presence_penalty = 0.5f,
                                                         .max_tokens = 12, .ignore_eos = true}};
  req.sampling.logit_bias.assign(ban.begin(), ban.end());
  const std::vector<int32_t> got = run_alone(*engine_, req);
  EXPECT_EQ(got, reference_greedy(*engine_, p, 12, 0.5f, 0.0f, ban));
  for (int32_t t : got) EXPECT_EQ(ban.count(t), 0u) << "banned token " << t << " generated";

  req.sampling.logit_bias = {{plain[3], 100.0f}};
  req.sampling.presence_penalty = 0.0f;
  req.sampling.temperature = 0.9f;  // sampled: the +100 token's probability is 1 to float precision
  EXPECT_EQ(run_alone(*engine_, req), std::vector<int32_t>(12, plain[3]));
}

// The penalised and biased rows are sampled on the host; batched with plain requests (sampled where the
// logits live) each request gives what it gives alone.
TEST_F(Penalties, BatchedRequestsGiveWhatTheyGiveAlone) {
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    GenerateRequest r{.prompt = kPrompts[i % 3],
                      .sampling = {.temperature = i < 3 ? 0.0f : 0.8f, .seed = uint64_t(i), .max_tokens = 20,
                                   .ignore_eos = true}};
    if (i % 2 == 0) r.sampling.frequency_penalty = 1.0f, r.sampling.presence_penalty = 0.5f;
    if (i % 3 == 1) r.sampling.logit_bias = {{13, 5.0f}, {0, -3.0f}};
    reqs.push_back(r);
  }
  std::vector<std::vector<int32_t>> alone;
  for (const GenerateRequest& r : reqs) alone.push_back(run_alone(*engine_, r));
  Engine batched(EngineOptions{.model_dir = kTiny, .max_seqs = 8});
  std::vector<RequestId> ids;
  for (const GenerateRequest& r : reqs) ids.push_back(batched.add_request(r));
  while (batched.has_unfinished()) batched.step();
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(batched.output_ids(ids[i]), alone[i]) << "request " << i;
}

TEST_F(Penalties, OutOfRangeIsRejectedNamingTheField) {
  EXPECT_CONTAINS(test::error_of([] { engine_->add_request({.prompt = "x", .sampling = {.presence_penalty = 2.5f}}); }),
                  "presence_penalty");
  EXPECT_CONTAINS(
      test::error_of([] { engine_->add_request({.prompt = "x", .sampling = {.frequency_penalty = -3.0f}}); }),
      "frequency_penalty");
  EXPECT_CONTAINS(test::error_of([] {
                    engine_->add_request({.prompt = "x", .sampling = {.logit_bias = {{1 << 30, 1.0f}}}});
                  }),
                  "logit_bias token id 1073741824 is outside the vocabulary");
}

}  // namespace
}  // namespace tf

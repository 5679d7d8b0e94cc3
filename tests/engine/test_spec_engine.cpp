// Speculative decoding inside the batching engine on tiny-main (CPU): with a draft model
// (tiny-draft) and with prompt lookup, fixed and adaptive lengths, proposals padded to one
// width per step or not,
// - greedy ids (and logprobs, stops, finish reasons, repetition penalty) are those of the
//   engine without speculation, for every golden prompt, in one batch and mixed with
//   prefills, chunked prefill, preemption (a small KV pool) and shared prefixes;
// - the scheduler's, both KV managers' and the pools' invariants hold after every step, and
//   when all is done no block is held (target pool and draft pool), aborts included;
// - sampled tokens have the distribution of plain sampling: a chi-square fit of 3-token
//   outputs, with top-k 3 (27 outcomes), to the exact distribution computed from the
//   target's logits, on a case where about half the draft's proposals are rejected.
// Ids, text and finish reasons are compared exactly; logprobs to 1e-4 (a verification's rows
// and a decode's row take different CPU matmul kernels, which round differently).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <map>

#include "engine/golden_util.h"
#include "model/config.h"
#include "model/tokenizer/tokenizer.h"
#include "sample/sampler.h"
#include "spec/spec_policy.h"
#include "stats_util.h"
#include "twofold/engine.h"

namespace tf {
namespace {

const std::string kMain = test::model_dir("tiny-main");
const std::string kDraft = test::model_dir("tiny-draft");

struct Outcome {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<SampledLogprobs>> logprobs;
  std::vector<std::string> text;       // streamed text, several tokens' worth per verification
  std::vector<FinishReason> finish;
  EngineMetrics metrics;
};

// Runs `reqs` through one engine, request i added at step arrival[i] (none: all at once);
// checks every invariant after every step and that nothing is held at the end.
Outcome run(const EngineOptions& opt, const std::vector<GenerateRequest>& reqs, const std::vector<int>& arrival = {}) {
  Engine e(opt);
  std::map<size_t, RequestId> ids;
  Outcome out;
  out.logprobs.resize(reqs.size());
  out.text.resize(reqs.size());
  out.finish.resize(reqs.size());
  std::map<RequestId, size_t> index;
  for (int step = 0; ids.size() < reqs.size() || e.has_unfinished(); ++step) {
    for (size_t i = 0; i < reqs.size(); ++i)
      if (!ids.count(i) && (arrival.empty() || arrival[i] <= step)) index[ids[i] = e.add_request(reqs[i])] = i;
    for (const RequestOutput& o : e.step()) {
      const size_t i = index[o.id];
      for (const SampledLogprobs& lp : o.logprobs) out.logprobs[i].push_back(lp);
      out.text[i] += o.text;
      if (o.finished) out.finish[i] = o.finish_reason;
    }
    const std::string broken = e.check_invariants();
    EXPECT_EQ(broken, "") << "after step " << step;
    if (step > 5000 || !broken.empty()) {
      ADD_FAILURE() << "stopped at step " << step;
      break;
    }
  }
  for (size_t i = 0; i < reqs.size(); ++i) out.ids.push_back(e.output_ids(ids[i]));
  out.metrics = e.metrics();
  EXPECT_EQ(e.n_kv_blocks_free(), e.n_kv_blocks_total()) << "target blocks leaked";
  EXPECT_EQ(out.metrics.kv_blocks_used, 0);
  EXPECT_EQ(out.metrics.spec_kv_blocks_used, 0) << "draft blocks leaked";
  return out;
}

GenerateRequest greedy(std::vector<int32_t> ids, int32_t max_tokens) {
  return {.prompt_ids = std::move(ids), .sampling = {.temperature = 0, .max_tokens = max_tokens, .ignore_eos = true}};
}

// Every golden prompt, greedy; some with a stop string, EOS, logprobs, a repetition penalty or
// with it frequency and presence penalties.
std::vector<GenerateRequest> golden_requests() {
  std::vector<GenerateRequest> reqs;
  const auto golden = test::load_golden("tiny-main");
  for (size_t i = 0; i < golden.size(); ++i) {
    GenerateRequest r = greedy(golden[i].input_ids, 24 + int32_t(i));
    if (i % 4 == 1) r.sampling.stop = {"."};
    if (i % 4 == 2) r.sampling.ignore_eos = false, r.sampling.logprobs = 2, r.sampling.stop = {"\n"};
    if (i % 4 == 3) r.sampling.repetition_penalty = 1.3f;
    if (i % 8 == 3) r.sampling.frequency_penalty = 0.6f, r.sampling.presence_penalty = 0.3f;
    reqs.push_back(r);
  }
  return reqs;
}

// A device-like cost model (batch 1 memory-bound, costs growing with tokens past 64), so the
// adaptive tests do not spend their time measuring this CPU.
std::string write_cost_model(const std::string& dir) {
  SpecCostModel m{.batches = {1, 4, 16, 64}, .ks = {0, 1, 2, 4, 8}};
  for (int32_t b : m.batches) {
    for (int32_t k : m.ks) m.verify_s.push_back(1e-3 * (0.2 + std::max(1.0, b * (1.0 + k) / 64.0)));
    m.draft_s.push_back(1e-4 * (0.2 + std::max(1.0, b / 64.0)));
  }
  const std::string path = dir + "/costs.json";
  std::ofstream(path) << m.to_json().dump();
  return path;
}

class SpecEngine : public test::TempDirTest {
 protected:
  EngineOptions options(const std::string& method, bool adaptive) {
    return EngineOptions{.model_dir = kMain,
                         .spec = {.method = method, .draft_model_dir = method == "draft" ? kDraft : "", .k = 4,
                                  .adaptive = adaptive, .cost_model_file = adaptive ? write_cost_model(dir_.string()) : ""}};
  }
  static void expect_same(const Outcome& got, const Outcome& want) {
    ASSERT_EQ(got.ids.size(), want.ids.size());
    for (size_t i = 0; i < got.ids.size(); ++i) {
      EXPECT_EQ(got.ids[i], want.ids[i]) << "request " << i;
      EXPECT_EQ(got.text[i], want.text[i]) << "request " << i;
      EXPECT_EQ(got.finish[i], want.finish[i]) << "request " << i;
      ASSERT_EQ(got.logprobs[i].size(), want.logprobs[i].size()) << "request " << i;
      for (size_t t = 0; t < got.logprobs[i].size(); ++t) {
        EXPECT_EQ(got.logprobs[i][t].sampled.id, want.logprobs[i][t].sampled.id);
        // A verification's rows go through the CPU backend's multi-row GEMM, a decode's through
        // its one-row kernel: another summation order, so logprobs agree to float rounding.
        EXPECT_NEAR(got.logprobs[i][t].sampled.logprob, want.logprobs[i][t].sampled.logprob, 1e-4);
        ASSERT_EQ(got.logprobs[i][t].top.size(), want.logprobs[i][t].top.size());
      }
    }
  }
  // Fixed k: proposals were verified, some accepted and some rejected. Adaptive: proposals were
  // verified; how many after the first steps depends on the speculation gate, which compares
  // measured step times (SpeculationGate), so acceptance is asserted only with fixed k.
  static void expect_speculated(const Outcome& r, bool adaptive = false) {
    EXPECT_GT(r.metrics.spec_drafts, 0);
    EXPECT_LE(r.metrics.spec_accepted_tokens, r.metrics.spec_draft_tokens);
    if (adaptive) return;
    EXPECT_GT(r.metrics.spec_accepted_tokens, 0);
    EXPECT_LT(r.metrics.spec_accepted_tokens, r.metrics.spec_draft_tokens) << "some proposals should be rejected";
  }
};

TEST_F(SpecEngine, GreedyIdsOfEveryGoldenPromptAreThoseWithoutSpeculation) {
  const std::vector<GenerateRequest> reqs = golden_requests();
  const Outcome plain = run({.model_dir = kMain}, reqs);
  EXPECT_GE(std::count(plain.finish.begin(), plain.finish.end(), FinishReason::Stop), 2)
      << "stops inside a verified run must be covered";
  for (const char* method : {"draft", "ngram"}) {
    for (bool adaptive : {false, true}) {
      for (const char* uniform : {"auto", "on"}) {  // auto: off on the CPU; on: padded to one width per step
        SCOPED_TRACE(std::string(method) + (adaptive ? " adaptive" : " fixed k") + " uniform width " + uniform);
        EngineOptions o = options(method, adaptive);
        o.spec.uniform_width = uniform;
        const Outcome spec = run(o, reqs);
        expect_same(spec, plain);
        expect_speculated(spec, adaptive);
      }
    }
  }
}

// Staggered arrivals, chunked prefill beside verifications (a 48-token budget), prompts
// sharing a long prefix (prefix cache hits in both pools) and a pool so small that sequences
// are preempted and recomputed (their draft state released with them).
TEST_F(SpecEngine, MixedBatchWithChunkedPrefillPreemptionAndSharedPrefixes) {
  Engine tok_engine(EngineOptions{.model_dir = kMain, .n_kv_blocks = 64, .max_seqs = 1});
  std::vector<GenerateRequest> reqs = golden_requests();
  const auto golden = test::load_golden("tiny-main");
  std::string system;
  for (const auto& g : golden) system += g.text + "\n";
  for (int i = 0; i < 3; ++i) reqs.push_back(greedy(tok_engine.tokenizer().encode(system + golden[size_t(i)].text), 20));
  std::vector<int> arrival;
  for (size_t i = 0; i < reqs.size(); ++i) arrival.push_back(int(i * 3 % 7));
  const Outcome plain = run({.model_dir = kMain}, reqs);
  for (const char* method : {"draft", "ngram"}) {
    for (const char* uniform : {"auto", "on"}) {
      SCOPED_TRACE(std::string(method) + " uniform width " + uniform);
      EngineOptions o = options(method, /*adaptive=*/false);
      o.spec.uniform_width = uniform;
      o.block_size = 8;
      o.n_kv_blocks = 48;
      o.max_batch_tokens = 48;
      const Outcome spec = run(o, reqs, arrival);
      expect_same(spec, plain);
      expect_speculated(spec);
      EXPECT_GT(spec.metrics.n_preemptions, 0) << "the 48-block pool was meant to force preemption";
      EXPECT_GT(spec.metrics.prefix_hit_tokens, 0);
    }
  }
}

// Aborting requests that are speculating (proposals verified in their last step, draft KV
// held) frees their blocks in both pools at once; the others finish as without speculation.
TEST_F(SpecEngine, AbortDuringSpeculationFreesEverything) {
  const std::vector<GenerateRequest> reqs = golden_requests();
  const Outcome plain = run({.model_dir = kMain}, reqs);
  Engine e(options("draft", /*adaptive=*/false));
  std::vector<RequestId> ids;
  for (const GenerateRequest& r : reqs) ids.push_back(e.add_request(r));
  for (int i = 0; i < 3; ++i) e.step();
  ASSERT_GT(e.metrics().spec_drafts, 0) << "speculation had started";
  const EngineMetrics before = e.metrics();
  ASSERT_GT(before.spec_kv_blocks_used, 0);
  for (size_t i = 0; i < ids.size(); i += 2) e.abort(ids[i]);
  EXPECT_EQ(e.check_invariants(), "");
  EXPECT_LT(e.metrics().kv_blocks_used, before.kv_blocks_used);
  EXPECT_LT(e.metrics().spec_kv_blocks_used, before.spec_kv_blocks_used);
  while (e.has_unfinished()) {
    e.step();
    ASSERT_EQ(e.check_invariants(), "");
  }
  for (size_t i = 1; i < ids.size(); i += 2) EXPECT_EQ(e.output_ids(ids[i]), plain.ids[i]) << "request " << i;
  EXPECT_EQ(e.metrics().kv_blocks_used, 0);
  EXPECT_EQ(e.metrics().spec_kv_blocks_used, 0);
}

// The adaptive policy with a cost model measured at start-up (the default): still the greedy
// ids; and a cost model where verifying costs as much per token as decoding turns
// speculation off.
TEST_F(SpecEngine, MeasuredCostModelAndNoSpeculationWhereItDoesNotPay) {
  const auto golden = test::load_golden("tiny-main");
  const std::vector<GenerateRequest> reqs = {greedy(golden[0].input_ids, 20), greedy(golden[4].input_ids, 20)};
  const Outcome plain = run({.model_dir = kMain, .max_seqs = 4}, reqs);
  EngineOptions o = options("ngram", /*adaptive=*/true);
  o.max_seqs = 4;
  o.spec.cost_model_file.clear();
  {
    Engine e(o);
    const SpecCostModel& m = e.spec_cost_model();
    EXPECT_EQ(m.batches, (std::vector<int32_t>{1, 4}));
    EXPECT_EQ(m.ks, (std::vector<int32_t>{0, 1, 2, 4}));
    for (double t : m.verify_s) EXPECT_GT(t, 0.0);
    EXPECT_EQ(e.metrics().kv_blocks_used, 0) << "measuring leaves no blocks held";
  }
  expect_same(run(o, reqs), plain);
  SpecCostModel linear{.batches = {1, 64}, .ks = {0, 4}, .verify_s = {1.0, 5.0, 64.0, 320.0}, .draft_s = {0.0, 0.0}};
  const std::string path = (dir_ / "linear.json").string();
  std::ofstream(path) << linear.to_json().dump();
  o.spec.cost_model_file = path;
  const Outcome off = run(o, reqs);
  expect_same(off, plain);
  EXPECT_EQ(off.metrics.spec_drafts, 0) << "verifying costs a decode per token: no proposal pays";
}

// A draft model that costs about what the target does (tiny-draft against tiny-main on the
// H200): at full acceptance one proposal would pay (c[1] = 1.8 < 2), so the policy used to
// probe it every 32 idle steps, each probe running the draft over every token it had skipped.
// Its catch-up now counts (probe_due): nothing is proposed, and the output is plain decoding's.
TEST_F(SpecEngine, ADraftAsCostlyAsTheTargetIsNotProbed) {
  const auto golden = test::load_golden("tiny-main");
  std::vector<GenerateRequest> reqs;
  for (size_t i = 0; i < 8; ++i) reqs.push_back(greedy(golden[i % golden.size()].input_ids, 96));
  const Outcome plain = run({.model_dir = kMain, .max_seqs = 8}, reqs);
  SpecCostModel m{.batches = {1, 4, 16, 64}, .ks = {0, 1, 2, 4, 8}};
  for (int32_t b : m.batches) {
    for (int32_t k : m.ks) m.verify_s.push_back(1e-3 * (0.2 + std::max(1.0, b * (1.0 + k) / 64.0)));
    m.draft_s.push_back(0.8 * m.verify_s[m.verify_s.size() - m.ks.size()]);
  }
  ASSERT_TRUE(proposals_can_pay(proposal_costs(m, 8, 4)));
  const std::string path = (dir_ / "costly_draft.json").string();
  std::ofstream(path) << m.to_json().dump();
  EngineOptions o = options("draft", /*adaptive=*/true);
  o.max_seqs = 8;
  o.spec.cost_model_file = path;
  const Outcome got = run(o, reqs);
  expect_same(got, plain);
  EXPECT_EQ(got.metrics.spec_drafts, 0);
  // No rate the sequences can reach pays, with the least catch-up among them added: the steps
  // are quiet but where the policy looks again (every 33 steps) or the gate first measures.
  EXPECT_GE(got.metrics.spec_quiet_steps, 80) << "of " << got.metrics.n_steps << " steps";
}

TEST_F(SpecEngine, BadOptionsAreRefusedWithTheirName) {
  EngineOptions o = options("draft", false);
  o.spec.draft_model_dir = "/nonexistent/draft";
  EXPECT_CONTAINS(test::error_of([&] { Engine e(o); }), "/nonexistent/draft");
  o = options("medusa", false);
  EXPECT_CONTAINS(test::error_of([&] { Engine e(o); }), "medusa");
  o = options("ngram", false);
  o.spec.k = 0;
  EXPECT_CONTAINS(test::error_of([&] { Engine e(o); }), "k");
  o = options("ngram", true);
  o.spec.cost_model_file = (dir_ / "missing.json").string();
  EXPECT_CONTAINS(test::error_of([&] { Engine e(o); }), "missing.json");
  o = options("ngram", false);
  o.spec.uniform_width = "sometimes";
  EXPECT_CONTAINS(test::error_of([&] { Engine e(o); }), "sometimes");
}

// Sampled tokens: 3 new tokens per request, temperature 1 with top-k 3, so every output is
// one of 27 sequences whose exact probabilities follow from the target's logits (13 scored
// prefixes). The first token comes from the prefill step, the second always from a
// verification (one proposal, drawn from the draft's top-3 distribution; about half are
// rejected), the third from the bonus draw or a plain step. The outputs must fit the exact
// distribution (chi-square, p > 0.001, fixed seeds), and must not fit the distribution of a
// verifier that resamples a rejected proposal from p instead of the residual max(0, p - q)
// (second token min(p, q)(b) + (1 - sum min(p, q)) p(b), q from the draft's logits): the
// sample is large enough to tell that error apart.
TEST_F(SpecEngine, SampledOutputsHaveThePlainDistribution) {
  const auto golden = test::load_golden("tiny-main");
  const std::vector<int32_t> prompt = golden[6].input_ids;  // 22 tokens: one block is a prefix hit
  const SamplingParams sp{.temperature = 1.0f, .top_k = 3, .max_tokens = 3, .ignore_eos = true};
  constexpr int32_t kRequests = 400;
  std::vector<GenerateRequest> reqs;
  for (int32_t i = 0; i < kRequests; ++i) {
    GenerateRequest r{.prompt_ids = prompt, .sampling = sp};
    r.sampling.seed = uint64_t(1000 + i);
    reqs.push_back(r);
  }
  // The sampler's distribution after prompt + prefix, under the target or the draft.
  Engine target(EngineOptions{.model_dir = kMain, .max_seqs = 1}), draft(EngineOptions{.model_dir = kDraft, .max_seqs = 1});
  auto dist = [&](Engine& e, const std::vector<int32_t>& prefix) {
    std::vector<int32_t> ids = prompt;
    ids.insert(ids.end(), prefix.begin(), prefix.end());
    return Sampler(sp).distribution(e.score(ids, /*all_positions=*/false), {});
  };
  std::vector<std::vector<int32_t>> cells;
  std::vector<double> exact, from_p;
  const std::vector<float> p0 = dist(target, {});
  for (int32_t a = 0; a < int32_t(p0.size()); ++a) {
    if (p0[size_t(a)] == 0.0f) continue;
    const std::vector<float> p1 = dist(target, {a}), q1 = dist(draft, {a});
    double overlap = 0;  // sum of min(p, q): the chance a proposal is kept
    for (size_t t = 0; t < p1.size(); ++t) overlap += std::min(p1[t], q1[t]);
    for (int32_t b = 0; b < int32_t(p1.size()); ++b) {
      if (p1[size_t(b)] == 0.0f) continue;
      const double wrong_b = std::min(p1[size_t(b)], q1[size_t(b)]) + (1 - overlap) * p1[size_t(b)];
      const std::vector<float> p2 = dist(target, {a, b});
      for (int32_t c = 0; c < int32_t(p2.size()); ++c) {
        if (p2[size_t(c)] == 0.0f) continue;
        cells.push_back({a, b, c});
        exact.push_back(double(p0[size_t(a)]) * p1[size_t(b)] * p2[size_t(c)]);
        from_p.push_back(double(p0[size_t(a)]) * wrong_b * p2[size_t(c)]);
      }
    }
  }
  EngineOptions o = options("draft", /*adaptive=*/false);
  o.spec.k = 2;
  const Outcome spec = run(o, reqs);
  std::vector<int64_t> counts(cells.size(), 0);
  for (const auto& ids : spec.ids) {
    const auto it = std::find(cells.begin(), cells.end(), ids);
    ASSERT_NE(it, cells.end()) << "an output outside the top-3 support";
    ++counts[size_t(it - cells.begin())];
  }
  const double acceptance = double(spec.metrics.spec_accepted_tokens) / double(spec.metrics.spec_draft_tokens);
  EXPECT_GE(spec.metrics.spec_drafts, kRequests) << "every request verified a proposal";
  EXPECT_GT(acceptance, 0.2);
  EXPECT_LT(acceptance, 0.8);
  EXPECT_GT(test::chi_square_fit(counts, exact), 0.001);
  EXPECT_LT(test::chi_square_fit(counts, from_p), 1e-4) << "the test must tell a wrong verifier apart";
  EXPECT_EQ(run(o, std::vector<GenerateRequest>(reqs.begin(), reqs.begin() + 64)).ids,
            std::vector<std::vector<int32_t>>(spec.ids.begin(), spec.ids.begin() + 64))
      << "same seeds, same tokens";
}

// Step times where verifying j proposals costs 1 + slope * j plain steps at every batch size
// (linear in k, so the policy's c[j] = 1 + slope * j), and a draft step `draft` plain steps.
std::string write_linear_costs(const std::filesystem::path& dir, double slope, double draft = 0.0) {
  const SpecCostModel m{.batches = {1, 64}, .ks = {0, 4},
                        .verify_s = {1e-3, 1e-3 * (1 + 4 * slope), 64e-3, 64e-3 * (1 + 4 * slope)},
                        .draft_s = {1e-3 * draft, 64e-3 * draft}};
  const std::string path =
      (dir / ("linear_" + std::to_string(int(slope * 100)) + "_" + std::to_string(int(draft * 100)) + ".json")).string();
  std::ofstream(path) << m.to_json().dump();
  return path;
}

// Where no proposal can pay at the batch size (verifying j proposals costs j + 1 decodes),
// the policy looks at the sequences once and then the steps are quiet: no per-sequence
// policy work and no proposer call (the draft's pool stays empty: proposing would run its
// catch-up first) until it looks again kQuietRecheck (32) steps later.
TEST_F(SpecEngine, QuietStepsLookAtNoSequenceAndCallNoProposerWhereNothingPays) {
  const auto golden = test::load_golden("tiny-main");
  std::vector<GenerateRequest> reqs;
  for (size_t i = 0; i < 4; ++i) reqs.push_back(greedy(golden[i].input_ids, 70));
  EngineOptions o = options("draft", /*adaptive=*/true);
  o.max_seqs = 4;
  o.spec.cost_model_file = write_linear_costs(dir_, 1.0, 0.1);
  Engine e(o);
  std::vector<RequestId> ids;
  for (const GenerateRequest& r : reqs) ids.push_back(e.add_request(r));
  while (e.has_unfinished()) {
    e.step();
    ASSERT_EQ(e.metrics().spec_kv_blocks_used, 0) << "the draft ran: the proposer was called";
    ASSERT_EQ(e.check_invariants(), "");
  }
  const EngineMetrics m = e.metrics();
  EXPECT_EQ(m.spec_drafts, 0);
  EXPECT_GE(m.spec_quiet_steps, 55) << "of " << m.n_steps << " steps";
  EXPECT_LE(m.spec_policy_steps, 4) << "once per 33 steps, and where the gate first measures plain steps";
  const Outcome plain = run({.model_dir = kMain, .max_seqs = 4}, reqs);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(e.output_ids(ids[i]), plain.ids[i]) << "request " << i;
}

// Prompt lookup on text that quotes its prompt, at batch 1, where verifying a proposal costs
// 1.7 plain steps: at the prior rate 0.5 nothing pays, so the steps go quiet; the quiet span
// ends where a probe is due (its cost, 0.7 plain steps, fits 2% of 35 idle steps), the
// probe's proposal is kept, the rate rises past what one proposal needs (1 + a > 1.7), and
// the next step runs the policy again, which proposes. (The costs are the cost model's here:
// no width with proposals has been measured yet, so the calibration's ratios cancel.)
TEST_F(SpecEngine, AProbeEndsTheQuietStepsAndAKeptProbeReopensProposals) {
  EngineOptions o = options("ngram", /*adaptive=*/true);
  o.max_seqs = 1;
  o.spec.cost_model_file = write_linear_costs(dir_, 0.7);
  Engine e(o);
  // The first prompt of bench/spec_prompts/quote.jsonl.
  const std::string quote =
      "In the beginning God created the heaven and the earth. And the earth was without form, and void; "
      "and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the "
      "waters.\n\nIn the beginning God created the heaven and the earth. And the earth was without form, and "
      "void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the "
      "waters.\n\nIn the beginning God created the heaven and the";
  const GenerateRequest req = greedy(e.tokenizer().encode(quote), 120);
  const RequestId id = e.add_request(req);
  EngineMetrics before = e.metrics();
  while (e.has_unfinished() && e.metrics().spec_drafts == 0) {
    before = e.metrics();
    e.step();
  }
  const EngineMetrics probed = e.metrics();
  ASSERT_EQ(probed.spec_drafts, 1) << "a probe is due after 35 idle steps";
  EXPECT_GE(before.spec_quiet_steps, 30) << "the steps before it were quiet";
  EXPECT_EQ(probed.spec_quiet_steps, before.spec_quiet_steps) << "the probe ran the policy";
  ASSERT_EQ(probed.spec_accepted_tokens, 1) << "this test needs a prompt whose probe is kept";
  e.step();
  const EngineMetrics next = e.metrics();
  EXPECT_EQ(next.spec_quiet_steps, probed.spec_quiet_steps) << "a kept probe ends the quiet steps";
  EXPECT_EQ(next.spec_policy_steps, probed.spec_policy_steps + 1);
  EXPECT_GT(next.spec_draft_tokens, probed.spec_draft_tokens) << "the policy proposes again";
  while (e.has_unfinished()) e.step();
  EXPECT_EQ(e.output_ids(id), run({.model_dir = kMain, .max_seqs = 1}, {req}).ids[0]);
}

}  // namespace
}  // namespace tf

// The batching engine gives every request exactly the ids it gets when run alone (greedy):
// mixed prompt lengths, staggered arrivals, shared prefixes, chunked prefill, and preemption
// forced by a tiny block pool. CPU matmul and attention compute each row with the same
// summation order whatever else is in the batch, so equality is exact, not approximate.
#include <gtest/gtest.h>

#include <map>

#include "engine/golden_util.h"
#include "model/tokenizer/tokenizer.h"
#include "twofold/engine.h"

namespace tf {
namespace {

const std::string kTiny = test::model_dir("tiny-main");

struct Prompt {
  std::vector<int32_t> ids;
  int32_t max_tokens;
};

// Golden prompts plus longer ones built from them (lengths 5 to ~300 tokens), some sharing
// a long common prefix (a "system prompt").
std::vector<Prompt> make_prompts(const Tokenizer& tok) {
  std::vector<Prompt> ps;
  const auto golden = test::load_golden("tiny-main");
  for (size_t i = 0; i < golden.size(); ++i) ps.push_back({golden[i].input_ids, int32_t(6 + 3 * i)});
  std::string system;
  for (const auto& g : golden) system += g.text + "\n";
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> ids = tok.encode(system + system.substr(0, size_t(40 * i)));
    ps.push_back({ids, 10 + i});
  }
  std::string very_long;
  for (int i = 0; i < 3; ++i) very_long += system;
  ps.push_back({tok.encode(very_long), 12});
  return ps;
}

GenerateRequest greedy(const Prompt& p) {
  return {.prompt_ids = p.ids, .sampling = {.temperature = 0, .max_tokens = p.max_tokens, .ignore_eos = true}};
}

std::vector<std::vector<int32_t>> run_alone(const std::vector<Prompt>& ps) {
  Engine e(EngineOptions{.model_dir = kTiny, .max_seqs = 1});
  std::vector<std::vector<int32_t>> out;
  for (const Prompt& p : ps) {
    const RequestId id = e.add_request(greedy(p));
    while (e.has_unfinished()) e.step();
    out.push_back(e.output_ids(id));
    EXPECT_EQ(int32_t(out.back().size()), p.max_tokens);
  }
  return out;
}

class Batching : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Engine e(EngineOptions{.model_dir = kTiny, .max_seqs = 1});
    prompts_ = make_prompts(e.tokenizer());
    alone_ = run_alone(prompts_);
  }
  // Runs all prompts through one engine; request i is added at step arrival[i].
  std::vector<std::vector<int32_t>> run_batched(const EngineOptions& opt, const std::vector<int>& arrival,
                                                EngineMetrics* metrics = nullptr) {
    Engine e(opt);
    std::map<size_t, RequestId> ids;
    std::map<RequestId, int32_t> cached;  // each request's first output's n_cached_prompt_tokens
    int step = 0;
    while (ids.size() < prompts_.size() || e.has_unfinished()) {
      for (size_t i = 0; i < prompts_.size(); ++i)
        if (!ids.count(i) && arrival[i] <= step) ids[i] = e.add_request(greedy(prompts_[i]));
      for (const RequestOutput& o : e.step())
        if (o.n_cached_prompt_tokens >= 0) {
          EXPECT_FALSE(cached.count(o.id)) << "request " << o.id << " reported its cached tokens twice";
          cached[o.id] = o.n_cached_prompt_tokens;
        }
      ++step;
      EXPECT_LT(step, 5000) << "engine made no progress";
      if (step >= 5000) break;
    }
    std::vector<std::vector<int32_t>> out;
    for (size_t i = 0; i < prompts_.size(); ++i) out.push_back(e.output_ids(ids[i]));
    EXPECT_EQ(e.n_kv_blocks_free(), e.n_kv_blocks_total()) << "blocks leaked";
    const EngineMetrics m = e.metrics();
    EXPECT_EQ(m.kv_blocks_used, 0);
    EXPECT_EQ(m.kv_blocks_free + m.kv_blocks_cached, m.kv_blocks_total);
    // Per request, the prompt tokens its first schedule found in the cache: reported on its
    // first output and in its stats, summing to the engine's hits when nothing was preempted.
    int64_t sum = 0;
    for (const auto& [i, id] : ids) {
      EXPECT_EQ(cached.at(id), e.stats(id).n_cached_prompt_tokens);
      EXPECT_EQ(cached.at(id) % e.kv_block_size(), 0);
      sum += cached.at(id);
    }
    if (m.n_preemptions == 0) EXPECT_EQ(sum, m.prefix_hit_tokens);
    if (metrics) *metrics = m;
    return out;
  }
  void expect_same_as_alone(const std::vector<std::vector<int32_t>>& got) {
    ASSERT_EQ(got.size(), alone_.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], alone_[i]) << "request " << i;
  }
  static std::vector<Prompt> prompts_;
  static std::vector<std::vector<int32_t>> alone_;
};
std::vector<Prompt> Batching::prompts_;
std::vector<std::vector<int32_t>> Batching::alone_;

TEST_F(Batching, AllAtOnce) {
  // Arriving together, the requests with the shared system prompt wait for the first one's
  // blocks (the scheduler's in-flight prefix sharing) and hit them: the prompt is computed once.
  EngineMetrics m;
  expect_same_as_alone(run_batched({.model_dir = kTiny, .max_seqs = 64}, std::vector<int>(prompts_.size(), 0), &m));
  EXPECT_GT(m.prefix_hit_tokens, 200);
}

TEST_F(Batching, SharedPrefixesHitTheCacheAndGiveTheSameIds) {
  // Arrivals one step apart: the first "system prompt" request computes the shared blocks,
  // the later ones reuse them.
  std::vector<int> arrival;
  for (size_t i = 0; i < prompts_.size(); ++i) arrival.push_back(int(i) * 4);
  EngineMetrics m;
  expect_same_as_alone(run_batched({.model_dir = kTiny, .max_seqs = 64}, arrival, &m));
  EXPECT_GT(m.prefix_hit_tokens, 200) << "shared system prompt should be served from cached blocks";
  EngineMetrics off;
  expect_same_as_alone(run_batched({.model_dir = kTiny, .max_seqs = 64, .enable_prefix_caching = false}, arrival, &off));
  EXPECT_EQ(off.prefix_hit_tokens, 0);
}

TEST_F(Batching, StaggeredArrivalsWithChunkedPrefill) {
  std::vector<int> arrival;
  for (size_t i = 0; i < prompts_.size(); ++i) arrival.push_back(int(i * 3 % 11));
  // A small token budget splits the long prompts into chunks that run beside decodes.
  expect_same_as_alone(run_batched({.model_dir = kTiny, .max_batch_tokens = 64, .max_seqs = 64}, arrival));
}

TEST_F(Batching, FewRunningSlots) {
  expect_same_as_alone(run_batched({.model_dir = kTiny, .max_batch_tokens = 96, .max_seqs = 3},
                                   std::vector<int>(prompts_.size(), 0)));
}

TEST_F(Batching, PreemptionForcedByTinyPool) {
  // The longest request needs ~60 blocks of 8 tokens; 80 blocks cannot hold everything that
  // wants to run, so sequences are preempted and recomputed.
  EngineMetrics m;
  expect_same_as_alone(run_batched({.model_dir = kTiny, .block_size = 8, .n_kv_blocks = 80,
                                    .max_batch_tokens = 128, .max_seqs = 64},
                                   std::vector<int>(prompts_.size(), 0), &m));
  EXPECT_GT(m.n_preemptions, 0) << "the pool was meant to be too small";
}

TEST_F(Batching, AbortFreesBlocksAtOnceAndOthersAreUnaffected) {
  Engine e(EngineOptions{.model_dir = kTiny, .max_seqs = 64, .enable_prefix_caching = false});
  std::vector<RequestId> ids;
  for (size_t i = 0; i < 3; ++i) ids.push_back(e.add_request(greedy(prompts_[8 + i])));
  for (int s = 0; s < 3; ++s) e.step();
  const int32_t used_before = e.metrics().kv_blocks_used;
  const int32_t victim_blocks = int32_t((prompts_[9].ids.size() + 3 + 15) / 16);
  e.abort(ids[1]);
  EXPECT_LE(e.metrics().kv_blocks_used, used_before - victim_blocks + 1) << "blocks not freed at abort";
  bool saw_abort = false;
  while (e.has_unfinished())
    for (const RequestOutput& o : e.step())
      if (o.id == ids[1]) {
        EXPECT_TRUE(o.finished);
        EXPECT_EQ(o.finish_reason, FinishReason::Abort);
        saw_abort = true;
      }
  EXPECT_TRUE(saw_abort);
  EXPECT_EQ(e.output_ids(ids[0]), alone_[8]);
  EXPECT_EQ(e.output_ids(ids[2]), alone_[10]);
  EXPECT_EQ(e.metrics().kv_blocks_used, 0);
}

TEST_F(Batching, HigherPriorityFinishesFirstWhenOnlyOneRuns) {
  Engine e(EngineOptions{.model_dir = kTiny, .max_seqs = 1});
  const RequestId low = e.add_request({.prompt_ids = prompts_[0].ids, .sampling = {.temperature = 0, .max_tokens = 4}, .priority = 0});
  const RequestId high = e.add_request({.prompt_ids = prompts_[1].ids, .sampling = {.temperature = 0, .max_tokens = 4}, .priority = 5});
  std::vector<RequestId> finish_order;
  while (e.has_unfinished())
    for (const RequestOutput& o : e.step())
      if (o.finished) finish_order.push_back(o.id);
  EXPECT_EQ(finish_order, (std::vector<RequestId>{high, low}));
}

// Overlapped steps (KernelOptions::overlap_steps, off by default, forced on here): after a step of decodes the next one is scheduled and run
// before the first's ids are read, with placeholders in the sequences' tokens that the real
// ids replace. Every request must still get the ids it gets alone, through staggered
// arrivals, chunked prefill, few slots and preemption, and the overlap must have happened.
TEST_F(Batching, OverlappedStepsGiveTheSameIds) {
  const KernelOptions overlap{.overlap_steps = 1};
  std::vector<int> staggered;
  for (size_t i = 0; i < prompts_.size(); ++i) staggered.push_back(int(i * 3 % 11));
  const std::pair<const char*, EngineOptions> runs[] = {
      {"all at once", {.model_dir = kTiny, .max_seqs = 64, .kernels = overlap}},
      {"staggered, chunked", {.model_dir = kTiny, .max_batch_tokens = 64, .max_seqs = 64, .kernels = overlap}},
      {"three slots", {.model_dir = kTiny, .max_batch_tokens = 96, .max_seqs = 3, .kernels = overlap}},
      {"tiny pool", {.model_dir = kTiny, .block_size = 8, .n_kv_blocks = 80, .max_batch_tokens = 128,
                     .max_seqs = 64, .kernels = overlap}},
  };
  for (const auto& [name, opt] : runs) {
    SCOPED_TRACE(name);
    EngineMetrics m;
    const bool stagger = std::string(name).starts_with("staggered");
    expect_same_as_alone(run_batched(opt, stagger ? staggered : std::vector<int>(prompts_.size(), 0), &m));
    EXPECT_GT(m.n_overlapped_steps, 0) << "no step was launched before the previous one's ids were read";
  }
  EngineMetrics off;
  run_batched({.model_dir = kTiny, .max_seqs = 64}, std::vector<int>(prompts_.size(), 0), &off);
  EXPECT_EQ(off.n_overlapped_steps, 0) << "the CPU backend overlaps only when asked";
}

// Requests of one engine, all added at once and stepped to the end; per request its ids,
// text and finish reason, and the scheduler's invariants checked after every step.
struct Finished {
  std::vector<int32_t> ids;
  std::string text;
  FinishReason why = FinishReason::None;
  bool operator==(const Finished&) const = default;
};
std::vector<Finished> run_requests(const EngineOptions& opt, const std::vector<GenerateRequest>& reqs,
                                   EngineMetrics* metrics = nullptr) {
  Engine e(opt);
  std::vector<RequestId> ids;
  std::map<RequestId, Finished> got;
  for (const GenerateRequest& r : reqs) ids.push_back(e.add_request(r));
  for (int step = 0; e.has_unfinished() && step < 5000; ++step) {
    for (const RequestOutput& o : e.step()) {
      got[o.id].text += o.text;
      if (o.finished) got[o.id].why = o.finish_reason;
    }
    EXPECT_EQ(e.check_invariants(), "");
  }
  std::vector<Finished> out;
  for (RequestId id : ids) {
    got[id].ids = e.output_ids(id);
    out.push_back(got[id]);
  }
  EXPECT_EQ(e.metrics().kv_blocks_used, 0) << "blocks leaked";
  if (metrics) *metrics = e.metrics();
  return out;
}

// A request that ends on a stop string ends at a step nobody could foresee, while the step
// after it is already running: that step's row for it is dropped, and the others go on as
// without overlap.
TEST_F(Batching, OverlappedStepsDropTheRowsOfRequestsThatStopped) {
  Engine probe(EngineOptions{.model_dir = kTiny, .max_seqs = 1});
  const std::vector<int32_t>& first = alone_[0];
  ASSERT_GE(first.size(), 6u);
  // The text of the 4th and 5th generated tokens as a stop string: request 0 stops there.
  const std::string stop = probe.tokenizer().decode(std::span<const int32_t>(first).subspan(3, 2));
  ASSERT_FALSE(stop.empty());
  std::vector<GenerateRequest> reqs;
  for (size_t i = 0; i < 4; ++i) reqs.push_back(greedy(prompts_[i]));
  reqs[0].sampling.stop = {stop};
  reqs[2].sampling.ignore_eos = false;
  const std::vector<Finished> plain = run_requests({.model_dir = kTiny, .max_seqs = 8}, reqs);
  EngineMetrics m;
  const std::vector<Finished> overlapped =
      run_requests({.model_dir = kTiny, .max_seqs = 8, .kernels = {.overlap_steps = 1}}, reqs, &m);
  EXPECT_EQ(plain[0].why, FinishReason::Stop) << "the stop string was meant to end request 0";
  EXPECT_LT(plain[0].ids.size(), first.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(overlapped[i].ids, plain[i].ids) << "request " << i;
    EXPECT_EQ(overlapped[i].text, plain[i].text) << "request " << i;
    EXPECT_EQ(overlapped[i].why, plain[i].why) << "request " << i;
  }
  EXPECT_GT(m.n_overlapped_steps, 0);
}

// Two long decodes in a pool too small for both: the schedule that runs out of blocks is one
// made while a step is in flight (nothing waits, both decode), so the preempted sequence
// still holds a placeholder when it is requeued; it must be recomputed with its real token.
TEST_F(Batching, OverlappedStepsSurvivePreemptionDuringDecode) {
  std::vector<GenerateRequest> reqs;
  for (size_t i = 0; i < 2; ++i) {
    GenerateRequest r = greedy(prompts_[i]);
    r.sampling.max_tokens = 48;
    reqs.push_back(r);
  }
  // Each needs up to ceil((prompt + 48) / 8) blocks; 12 hold the prompts but not both ends.
  const EngineOptions base{.model_dir = kTiny, .block_size = 8, .n_kv_blocks = 12, .max_seqs = 8};
  EngineOptions on = base;
  on.kernels.overlap_steps = 1;
  EngineMetrics m_off, m_on;
  const std::vector<Finished> plain = run_requests(base, reqs, &m_off);
  const std::vector<Finished> overlapped = run_requests(on, reqs, &m_on);
  ASSERT_GT(m_off.n_preemptions, 0) << "the pool was meant to be too small";
  EXPECT_GT(m_on.n_preemptions, 0);
  EXPECT_GT(m_on.n_overlapped_steps, 0);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(overlapped[i].ids, plain[i].ids) << "request " << i;
    EXPECT_EQ(int32_t(overlapped[i].ids.size()), 48);
  }
}

// An abort while the step after it is in flight: the aborted request reports Abort once, its
// row of the running step is dropped, the others are unchanged.
TEST_F(Batching, OverlappedStepsAbortWhileAStepRuns) {
  Engine e(EngineOptions{.model_dir = kTiny, .max_seqs = 64, .kernels = {.overlap_steps = 1}});
  std::vector<RequestId> ids;
  for (size_t i = 0; i < 3; ++i) ids.push_back(e.add_request(greedy(prompts_[i])));
  for (int s = 0; s < 4; ++s) e.step();
  ASSERT_GT(e.metrics().n_overlapped_steps, 0) << "no step in flight to abort under";
  e.abort(ids[1]);
  int aborts = 0;
  while (e.has_unfinished())
    for (const RequestOutput& o : e.step()) {
      EXPECT_NE(o.id == ids[1] && !o.finished, true) << "tokens for the aborted request";
      if (o.id == ids[1]) aborts += o.finish_reason == FinishReason::Abort;
    }
  EXPECT_EQ(aborts, 1);
  EXPECT_EQ(e.output_ids(ids[0]), alone_[0]);
  EXPECT_EQ(e.output_ids(ids[2]), alone_[2]);
  EXPECT_EQ(e.metrics().kv_blocks_used, 0);
  EXPECT_EQ(e.check_invariants(), "");
}

}  // namespace
}  // namespace tf

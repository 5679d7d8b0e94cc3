// Scheduler + KvManager driven by fake requests (sim.h): prefix sharing, chunked prefill
// beside decodes, preemption and resume, priorities, starvation-freedom, length grouping,
// abort and sliding window. Every step of every test also checks the budget, the sequence
// cap, table coverage, the KV contents each token would attend to, and all invariants.
#include <gtest/gtest.h>

#include <random>

#include "kv/token_runs.h"
#include "sched/sim.h"

namespace tf {
namespace {

using test::cat;
using test::head;
using test::Sim;
using test::SimParams;
using test::toks;

constexpr int32_t kBs = 4;

const ScheduledSeq* find(const ScheduleOutput& so, int64_t id) {
  for (const ScheduledSeq& q : so.seqs)
    if (q.id == id) return &q;
  return nullptr;
}

// Two requests with the same 3-block system prompt: the second, admitted after the first
// computed it, shares its blocks while both run (ref count 2) and starts after them; when
// both finish the blocks stay cached and a third request hits them.
TEST(Scheduler, PrefixSharingWhileRunningAndAfterFinishing) {
  Sim sim({.kv = {.n_blocks = 32, .block_size = kBs}, .sched = {.max_batch_tokens = 64, .max_seqs = 4}});
  const std::vector<int32_t> system = toks(12, 1000);
  sim.add(0, 0, cat(system, toks(3, 1)), 20);
  ScheduleOutput so = sim.step();
  ASSERT_NE(find(so, 0), nullptr);
  EXPECT_EQ(find(so, 0)->n_new, 15);

  sim.add(1, 0, cat(system, toks(5, 50)), 22);
  so = sim.step();
  const ScheduledSeq* q1 = find(so, 1);
  ASSERT_NE(q1, nullptr);
  EXPECT_EQ(q1->start, 12) << "the shared system prompt is not recomputed";
  EXPECT_EQ(q1->n_new, 5);
  const std::vector<int32_t> t0 = sim.kv.table(0), t1 = sim.kv.table(1);
  ASSERT_GE(t1.size(), 3u);
  EXPECT_EQ(head(t0, 3), head(t1, 3));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(sim.kv.pool().ref_count(t0[size_t(i)]), 2) << "block " << i;
  EXPECT_NE(t0[3], t1[3]);
  EXPECT_EQ(sim.sched.stats().n_prefix_hit_tokens, 12);
  EXPECT_EQ(sim.sched.stats().n_prefix_query_tokens, 15 + 17);

  sim.run();
  EXPECT_EQ(sim.reqs[0].tokens.size(), 20u);
  EXPECT_EQ(sim.reqs[1].tokens.size(), 22u);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(sim.kv.pool().is_cached(t0[size_t(i)])) << "block " << i;
  EXPECT_EQ(sim.kv.pool().n_blocks_used(), 0);

  sim.add(2, 0, cat(system, toks(2, 9000)), 16);
  so = sim.step();
  ASSERT_NE(find(so, 2), nullptr);
  EXPECT_EQ(find(so, 2)->start, 12);
  EXPECT_EQ(head(sim.kv.table(2), 3), head(t0, 3));
  const SchedulerStats st = sim.sched.stats();
  EXPECT_EQ(st.n_prefix_hit_tokens, 24);
  EXPECT_EQ(st.n_prefix_query_tokens, 15 + 17 + 14);
  sim.run();
  EXPECT_EQ(sim.reqs[2].tokens.size(), 16u);
}

// Sequences with one prompt added together (a request's n choices): the first computes the
// shared full blocks, the others wait until they are registered and start after them; a
// sequence with another prompt is admitted at once. Also with the prompt split over steps
// (the others wait for its last chunk), and not at all without prefix caching.
TEST(Scheduler, ConcurrentSharedPrefixIsComputedOnce) {
  const std::vector<int32_t> prompt = toks(14, 1000);  // 3 full blocks and 2 tokens
  {
    Sim sim({.kv = {.n_blocks = 32, .block_size = kBs}, .sched = {.max_batch_tokens = 64, .max_seqs = 8}});
    sim.add(0, 0, prompt, 20);
    sim.add(1, 0, prompt, 20);
    sim.add(2, 0, cat(head(prompt, 9), toks(6, 1)), 20);  // shares 2 full blocks
    sim.add(3, 0, toks(10, 5000), 20);
    ScheduleOutput so = sim.step();
    ASSERT_NE(find(so, 0), nullptr);
    EXPECT_EQ(find(so, 0)->n_new, 14);
    EXPECT_EQ(find(so, 1), nullptr) << "waits for the blocks sequence 0 computes";
    EXPECT_EQ(find(so, 2), nullptr);
    ASSERT_NE(find(so, 3), nullptr) << "another prompt is not held back";
    so = sim.step();
    ASSERT_NE(find(so, 1), nullptr);
    EXPECT_EQ(find(so, 1)->start, 12);
    EXPECT_EQ(find(so, 1)->n_new, 2);
    ASSERT_NE(find(so, 2), nullptr);
    EXPECT_EQ(find(so, 2)->start, 8);
    EXPECT_EQ(sim.sched.stats().n_prefix_hit_tokens, 20);
    sim.run();
    for (int64_t id : {0, 1, 2, 3}) EXPECT_EQ(sim.reqs[id].tokens.size(), 20u) << id;
  }
  {  // chunked: 14 tokens under a budget of 8
    Sim sim({.kv = {.n_blocks = 32, .block_size = kBs}, .sched = {.max_batch_tokens = 8, .max_seqs = 8}});
    sim.add(0, 0, prompt, 20);
    sim.add(1, 0, prompt, 20);
    EXPECT_EQ(find(sim.step(), 1), nullptr);
    EXPECT_EQ(find(sim.step(), 1), nullptr) << "2 of 3 shared blocks computed: still waits";
    const ScheduleOutput so = sim.step();
    ASSERT_NE(find(so, 1), nullptr);
    EXPECT_EQ(find(so, 1)->start, 12);
    sim.run();
    EXPECT_EQ(sim.reqs[1].tokens.size(), 20u);
  }
  {  // prefix caching off: nothing to wait for
    Sim sim({.kv = {.n_blocks = 32, .block_size = kBs, .enable_prefix_caching = false},
             .sched = {.max_batch_tokens = 64, .max_seqs = 8}});
    sim.add(0, 0, prompt, 20);
    sim.add(1, 0, prompt, 20);
    const ScheduleOutput so = sim.step();
    EXPECT_NE(find(so, 0), nullptr);
    EXPECT_NE(find(so, 1), nullptr);
    sim.run();
  }
}

// A prompt made only of cached full blocks still computes its last block, so the model
// produces logits for the final token; one token more and only that token is computed.
TEST(Scheduler, FullyCachedPromptStillComputesAtLeastOneToken) {
  Sim sim({.kv = {.n_blocks = 32, .block_size = kBs}, .sched = {.max_batch_tokens = 64, .max_seqs = 4}});
  const std::vector<int32_t> prompt = toks(12, 40);
  sim.add(0, 0, prompt, 14);
  sim.run();
  const std::vector<int32_t> first_out = sim.reqs[0].tokens;

  sim.add(1, 0, prompt, 14);
  ScheduleOutput so = sim.step();
  ASSERT_NE(find(so, 1), nullptr);
  EXPECT_EQ(find(so, 1)->start, 8);
  EXPECT_EQ(find(so, 1)->n_new, 4);
  EXPECT_TRUE(find(so, 1)->samples);
  sim.run();
  EXPECT_EQ(sim.reqs[1].tokens, first_out) << "same prompt, same cache contents, same output";

  sim.add(2, 0, head(first_out, 13), 14);  // prompt + its first output: 3 cached blocks + 1
  so = sim.step();
  ASSERT_NE(find(so, 2), nullptr);
  EXPECT_EQ(find(so, 2)->start, 12);
  EXPECT_EQ(find(so, 2)->n_new, 1);
  sim.run();
  EXPECT_EQ(sim.reqs[2].tokens, first_out);
}

// Cached prefixes are evicted least recently used first, and only when nothing is free.
TEST(Scheduler, LruEvictionWhenThePoolIsExhausted) {
  Sim sim({.kv = {.n_blocks = 10, .block_size = kBs}, .sched = {.max_batch_tokens = 64, .max_seqs = 4}});
  const std::vector<int32_t> old_prompt = toks(8, 100), new_prompt = toks(8, 200);
  sim.add(0, 0, old_prompt, 9);  // one step: 2 full blocks, cached when it finishes
  sim.run();
  sim.add(1, 0, new_prompt, 9);
  sim.run();
  EXPECT_EQ(sim.kv.pool().n_blocks_cached(), 4);
  EXPECT_EQ(sim.kv.pool().n_blocks_free(), 6);

  // 28 tokens need 7 blocks: the 6 free ones, then the least recently used cached block,
  // which is the tail of the older prompt.
  sim.add(2, 0, toks(28, 500), 29);
  sim.step();
  EXPECT_EQ(sim.kv.pool().n_evictions(), 1);
  EXPECT_EQ(sim.kv.find_prefix(cat(old_prompt, {1})).n_tokens, 4);
  EXPECT_EQ(sim.kv.find_prefix(cat(new_prompt, {1})).n_tokens, 8);
  sim.run();
  EXPECT_EQ(sim.reqs[2].tokens.size(), 29u);
  sim.add(3, 0, cat(new_prompt, {7}), 10);
  const ScheduleOutput so = sim.step();
  ASSERT_NE(find(so, 3), nullptr);
  EXPECT_EQ(find(so, 3)->start, 8) << "the more recent prefix survived";
  sim.run();
}

// A long prompt is split over steps under the token budget while a running decode gets its
// token every step, even when the long prompt has the higher priority.
TEST(Scheduler, ChunkedPrefillNeverStallsDecodes) {
  for (int32_t long_priority : {0, 5}) {
    SCOPED_TRACE("long prompt priority " + std::to_string(long_priority));
    Sim sim({.kv = {.n_blocks = 64, .block_size = kBs}, .sched = {.max_batch_tokens = 8, .max_seqs = 4}});
    sim.add(0, 0, toks(3, 10), 30);  // decodes from step 1 to its end
    sim.step();
    sim.add(1, long_priority, toks(40, 300), 45);
    int32_t prefill_steps = 0;
    while (!sim.reqs[0].done) {
      const ScheduleOutput so = sim.step();
      const ScheduledSeq* d = find(so, 0);
      ASSERT_NE(d, nullptr) << "decode stalled at step " << sim.n_steps() - 1;
      EXPECT_EQ(d->n_new, 1);
      const ScheduledSeq* p = find(so, 1);
      if (p && !p->samples) {
        ++prefill_steps;
        EXPECT_EQ(p->n_new, 7) << "the long prompt takes the rest of the budget";
      }
    }
    EXPECT_EQ(prefill_steps, 5) << "40 tokens in chunks of 7: 5 partial chunks, then the last 5";
    sim.run();
    EXPECT_EQ(sim.reqs[1].tokens.size(), 45u);
    EXPECT_EQ(sim.reqs[0].tokens.size(), 30u);
  }
}

// Tiny pool: decoding sequences run out of blocks; the lowest-priority, latest one is
// preempted (the sim checks every victim ranks below all running sequences), resumes by
// recomputation and ends with exactly the tokens of a run that never preempted.
TEST(Scheduler, PreemptionByRecomputeResumesWithTheSameOutput) {
  auto run = [](int32_t n_blocks, bool prefix_caching) {
    Sim sim({.kv = {.n_blocks = n_blocks, .block_size = kBs, .enable_prefix_caching = prefix_caching},
             .sched = {.max_batch_tokens = 32, .max_seqs = 4}});
    sim.add(0, 0, toks(6, 10), 24);  // 6 blocks at the end
    sim.add(1, 1, toks(7, 20), 24);
    sim.add(2, 0, toks(5, 30), 24);  // lowest priority and latest: the first victim
    sim.run();
    return sim;
  };
  const Sim big = run(64, true);
  EXPECT_EQ(big.sched.n_preemptions(), 0);
  for (bool caching : {true, false}) {
    SCOPED_TRACE(caching ? "prefix caching on" : "prefix caching off");
    const Sim tiny = run(13, caching);  // 18 blocks would be needed at once
    EXPECT_GT(tiny.sched.n_preemptions(), 0);
    EXPECT_GT(tiny.reqs.at(2).n_times_preempted, 0);
    EXPECT_EQ(tiny.reqs.at(1).n_times_preempted, 0) << "the high-priority request is never the victim";
    for (int64_t id : {0, 1, 2}) {
      EXPECT_TRUE(tiny.reqs.at(id).done);
      EXPECT_EQ(tiny.reqs.at(id).tokens.size(), 24u) << "request " << id;
      EXPECT_EQ(tiny.reqs.at(id).tokens, big.reqs.at(id).tokens) << "request " << id;
    }
    EXPECT_EQ(tiny.kv.pool().n_blocks_used(), 0);
  }
}

// With preemption and prefix caching, a resumed request gets its own full blocks back.
TEST(Scheduler, ResumeAfterPreemptionHitsItsCachedBlocks) {
  Sim sim({.kv = {.n_blocks = 6, .block_size = kBs}, .sched = {.max_batch_tokens = 32, .max_seqs = 2}});
  sim.add(0, 1, toks(9, 0), 20);   // 5 blocks at the end
  sim.add(1, 0, toks(9, 50), 14);  // 4 blocks at the end: both need a 4th in the same step
  int64_t resumed_start = -1;
  bool preempted = false;
  while (!sim.sched.empty()) {
    const ScheduleOutput so = sim.step();
    if (!so.preempted.empty()) {
      EXPECT_EQ(so.preempted, std::vector<int64_t>{1});
      preempted = true;
    }
    if (const ScheduledSeq* q = find(so, 1); q && preempted && resumed_start < 0) resumed_start = q->start;
    ASSERT_LT(sim.n_steps(), 200);
  }
  ASSERT_TRUE(preempted);
  EXPECT_GT(resumed_start, 0) << "some of its blocks came back from the prefix cache";
  EXPECT_EQ(resumed_start % kBs, 0);
  EXPECT_EQ(sim.reqs[1].tokens.size(), 14u);
  EXPECT_EQ(sim.reqs[0].tokens.size(), 20u);
}

// Higher priority is admitted first, FCFS within a priority.
TEST(Scheduler, PrioritiesThenArrivalOrder) {
  Sim sim({.kv = {.n_blocks = 64, .block_size = kBs}, .sched = {.max_batch_tokens = 64, .max_seqs = 1}});
  sim.add(0, 0, toks(5, 0), 8);
  sim.add(1, 2, toks(5, 100), 8);
  sim.add(2, 1, toks(5, 200), 8);
  sim.add(3, 2, toks(5, 300), 8);
  sim.add(4, 1, toks(5, 400), 8);
  sim.run();
  std::vector<int64_t> order{0, 1, 2, 3, 4};
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return sim.reqs[a].admitted_step < sim.reqs[b].admitted_step; });
  EXPECT_EQ(order, (std::vector<int64_t>{1, 3, 2, 4, 0}));
  for (auto& [id, r] : sim.reqs) EXPECT_EQ(r.tokens.size(), 8u) << "request " << id;
}

// A steady stream of new same-priority requests (one per step, more than the scheduler
// can run) cannot hold back an earlier one, even one whose length grouping dislikes.
TEST(Scheduler, NoStarvationWithinAPriority) {
  const SchedulerParams sp{.max_batch_tokens = 64, .max_seqs = 2, .group_window = 4, .max_group_skips = 2};
  Sim sim({.kv = {.n_blocks = 256, .block_size = kBs}, .sched = sp});
  // Queue: 7 short requests, the odd one out (far from everyone's length), 4 more short
  // ones; then one more arrives every step, about 3x what two slots can serve. Short ones
  // run 5 steps, admitted in pairs: (0,1) (2,3) (4,5), then 6 with a pick from
  // [odd, 8, 9, 10]: grouping takes 8; next time the odd one is the head.
  int64_t next = 0;
  for (; next < 7; ++next) sim.add(next, 0, toks(5, int32_t(next) * 100), 10);
  const int64_t odd = next++;
  sim.add(odd, 0, toks(40, 7777), 45);
  for (; next < 12; ++next) sim.add(next, 0, toks(5, int32_t(next) * 100), 10);
  int32_t n_waiting_max = 0;
  for (int s = 0; s < 500 && !sim.reqs[odd].done; ++s) {
    sim.add(next, 0, toks(5, int32_t(next) * 100), 10);
    ++next;
    sim.step();
    n_waiting_max = std::max(n_waiting_max, sim.sched.n_waiting());
  }
  ASSERT_TRUE(sim.reqs[odd].done) << "starved";
  // At most max_group_skips later arrivals went ahead of it.
  int32_t n_later_first = 0;
  for (const auto& [id, r] : sim.reqs)
    if (id > odd && r.admitted_step >= 0 && r.admitted_step < sim.reqs[odd].admitted_step) ++n_later_first;
  EXPECT_GE(n_later_first, 1) << "grouping did reorder";
  EXPECT_LE(n_later_first, sp.max_group_skips);
  EXPECT_GE(sim.reqs[odd].admitted_step, 15) << "it waited behind the 7 earlier ones";
  EXPECT_GT(n_waiting_max, 20) << "the queue kept growing while it waited";
}

// A low-priority request waits while higher ones keep arriving, and runs once they drain.
TEST(Scheduler, LowPriorityRunsOnceHigherOnesDrain) {
  Sim sim({.kv = {.n_blocks = 256, .block_size = kBs}, .sched = {.max_batch_tokens = 64, .max_seqs = 2}});
  sim.add(0, 0, toks(6, 0), 10);
  int64_t next = 1;
  for (int s = 0; s < 30; ++s) {
    for (int k = 0; k < 2; ++k, ++next) sim.add(next, 1, toks(6, int32_t(next) * 100), 12);
    sim.step();
    EXPECT_EQ(sim.reqs[0].admitted_step, -1) << "admitted while higher-priority requests wait";
  }
  sim.run();
  ASSERT_TRUE(sim.reqs[0].done);
  EXPECT_EQ(sim.reqs[0].tokens.size(), 10u);
  for (const auto& [id, r] : sim.reqs) {
    if (id == 0) continue;
    EXPECT_LE(r.admitted_step, sim.reqs[0].admitted_step) << "request " << id;
  }
}

// Length grouping: after the head, admissions prefer lengths close to the head's, within a
// window of the same priority; max_group_skips bounds the reordering; window 1 is FCFS.
TEST(Scheduler, LengthGroupingIsBoundedAndOptional) {
  struct Case {
    int32_t group_window, max_group_skips;
    std::vector<int64_t> admitted;
  };
  for (const Case& c : {Case{4, 4, {0, 3, 2}}, Case{4, 1, {0, 3, 1}}, Case{1, 4, {0, 1, 2}}}) {
    SCOPED_TRACE("window " + std::to_string(c.group_window) + " skips " + std::to_string(c.max_group_skips));
    Sim sim({.kv = {.n_blocks = 128, .block_size = kBs},
             .sched = {.max_batch_tokens = 512, .max_seqs = 3, .group_window = c.group_window,
                       .max_group_skips = c.max_group_skips}});
    sim.add(0, 0, toks(10, 0), 12);
    sim.add(1, 0, toks(200, 1000), 202);
    sim.add(2, 0, toks(12, 2000), 14);
    sim.add(3, 0, toks(11, 3000), 13);
    const ScheduleOutput so = sim.step();
    std::vector<int64_t> admitted;
    for (const ScheduledSeq& q : so.seqs) admitted.push_back(q.id);
    EXPECT_EQ(admitted, c.admitted);
    sim.run();
    for (auto& [id, r] : sim.reqs) EXPECT_TRUE(r.done) << "request " << id;
  }
}

// Grouping never reorders across priorities: a closer-length request of lower priority
// waits behind the higher-priority head's peers.
TEST(Scheduler, LengthGroupingStaysWithinAPriority) {
  Sim sim({.kv = {.n_blocks = 128, .block_size = kBs}, .sched = {.max_batch_tokens = 512, .max_seqs = 2}});
  sim.add(0, 1, toks(10, 0), 12);
  sim.add(1, 1, toks(100, 1000), 102);
  sim.add(2, 0, toks(10, 2000), 12);
  const ScheduleOutput so = sim.step();
  ASSERT_EQ(so.seqs.size(), 2u);
  EXPECT_EQ(so.seqs[0].id, 0);
  EXPECT_EQ(so.seqs[1].id, 1);
}

// Abort frees a sequence's blocks at once (shared ones keep their other holders), running
// or waiting, and also between schedule() and commit().
TEST(Scheduler, AbortFreesBlocksImmediately) {
  Sim sim({.kv = {.n_blocks = 32, .block_size = kBs}, .sched = {.max_batch_tokens = 64, .max_seqs = 2}});
  const std::vector<int32_t> system = toks(8, 500);
  sim.add(0, 0, cat(system, toks(5, 1)), 30);
  sim.step();
  sim.add(1, 0, cat(system, toks(6, 60)), 30);  // shares 2 blocks with 0
  sim.add(2, 0, toks(6, 900), 30);              // waits: max_seqs = 2
  sim.step();
  ASSERT_TRUE(sim.sched.is_running(1));
  ASSERT_FALSE(sim.sched.is_running(2));
  const std::vector<int32_t> t0 = sim.kv.table(0), t1 = sim.kv.table(1);
  ASSERT_EQ(head(t0, 2), head(t1, 2));
  const int32_t used = sim.kv.pool().n_blocks_used();

  sim.abort(0);
  EXPECT_FALSE(sim.kv.has(0));
  EXPECT_EQ(sim.kv.pool().n_blocks_used(), used - int32_t(t0.size()) + 2) << "only 0's own blocks go";
  for (int i = 0; i < 2; ++i) EXPECT_EQ(sim.kv.pool().ref_count(t0[size_t(i)]), 1);
  EXPECT_EQ(sim.sched.check_invariants(), "");

  sim.abort(2);  // waiting: holds nothing, just leaves the queue
  EXPECT_EQ(sim.sched.n_waiting(), 0);
  EXPECT_EQ(sim.sched.check_invariants(), "");

  // Abort between schedule and commit: commit skips it, the rest still advances.
  sim.add(3, 0, toks(7, 3000), 20);
  const ScheduleOutput so = sim.sched.schedule();
  ASSERT_NE(find(so, 3), nullptr);
  const int32_t n1 = sim.sched.n_computed(1);
  sim.sched.remove(3);
  sim.reqs[3].done = true;
  std::vector<int64_t> sampled;
  for (const ScheduledSeq& q : so.seqs)
    if (q.id == 1 && q.samples) {
      sim.reqs[1].tokens.push_back(1);
      sampled.push_back(1);
    }
  sim.sched.commit(so, sampled);
  EXPECT_EQ(sim.sched.n_computed(1), n1 + find(so, 1)->n_new);
  EXPECT_FALSE(sim.kv.has(3));
  EXPECT_EQ(sim.sched.check_invariants(), "");

  sim.abort(1);
  EXPECT_TRUE(sim.sched.empty());
  EXPECT_EQ(sim.kv.pool().n_blocks_used(), 0);
  EXPECT_EQ(sim.sched.check_invariants(), "");
}

// With a sliding window, blocks wholly before (next position - window + 1) are released as
// the sequence advances: a sequence far longer than the pool completes without preemption,
// and attention over the window (checked by the sim) still finds every key it needs.
TEST(Scheduler, SlidingWindowReleasesOutOfWindowBlocks) {
  constexpr int32_t kWindow = 8;
  Sim sim({.kv = {.n_blocks = 6, .block_size = kBs, .sliding_window = kWindow},
           .sched = {.max_batch_tokens = 16, .max_seqs = 2}});
  sim.add(0, 0, toks(10, 0), 60);  // 15 blocks without the window
  while (!sim.sched.empty()) {
    sim.step();
    if (!sim.sched.has(0)) break;
    const int32_t n = sim.sched.n_computed(0);
    const std::vector<int32_t>& table = sim.kv.table(0);
    for (int32_t ib = 0; ib < int32_t(table.size()); ++ib)
      EXPECT_EQ(table[size_t(ib)] < 0, (ib + 1) * kBs <= n - kWindow + 1) << "n " << n << " block " << ib;
    ASSERT_LT(sim.n_steps(), 200);
  }
  EXPECT_EQ(sim.reqs[0].tokens.size(), 60u);
  EXPECT_EQ(sim.sched.n_preemptions(), 0);
}

// Speculation: a decoding sequence computes its last token and its proposals in one step,
// keeps the accepted ones and the token after them, and ends with the output it has without
// speculation, in fewer steps. Rejected proposals' slots are rolled back (the sim's KV check
// fails on a stale one) and their blocks released (checked after every step).
TEST(Scheduler, SpeculativeTokensAreVerifiedAndRolledBack) {
  auto run = [](int32_t spec_k) {
    Sim sim({.kv = {.n_blocks = 32, .block_size = kBs}, .sched = {.max_batch_tokens = 64, .max_seqs = 4},
             .spec_k = spec_k});
    sim.add(0, 0, toks(6, 10), 40);
    sim.add(1, 0, toks(3, 70), 33);
    sim.run();
    return sim;
  };
  const Sim plain = run(0), spec = run(4);
  for (int64_t id : {0, 1}) {
    EXPECT_EQ(spec.reqs.at(id).tokens, plain.reqs.at(id).tokens) << "request " << id;
    EXPECT_GT(spec.reqs.at(id).n_accepted, 0) << "request " << id;
    EXPECT_LT(spec.reqs.at(id).n_accepted, spec.reqs.at(id).n_proposed) << "request " << id;
  }
  EXPECT_LT(spec.n_steps(), plain.n_steps() * 2 / 3);
  EXPECT_EQ(spec.kv.pool().n_blocks_used(), 0);
  EXPECT_EQ(spec.kv.pool().n_blocks_free() + spec.kv.pool().n_blocks_cached(), 32);
}

// Proposals take only what decodes leave: with 4 decoding sequences and a budget of 7, each
// decode gets its token every step and the proposals share the 3 tokens left, first come
// first served in priority order; a prefill chunk waiting behind them gets what remains.
TEST(Scheduler, ProposalsNeverDelayADecode) {
  Sim sim({.kv = {.n_blocks = 64, .block_size = kBs}, .sched = {.max_batch_tokens = 7, .max_seqs = 5}, .spec_k = 2});
  for (int64_t id = 0; id < 4; ++id) sim.add(id, int32_t(id), toks(2, int32_t(100 * id)), 30);
  for (int i = 0; i < 4; ++i) sim.step();  // every prompt computed
  sim.add(4, 9, toks(20, 5000), 24);       // highest priority, but a prefill
  for (int i = 0; i < 6 && !sim.reqs.at(0).done; ++i) {
    const ScheduleOutput so = sim.step();
    int32_t n_spec = 0;
    for (int64_t id = 0; id < 4; ++id) {
      if (sim.reqs.at(id).done) continue;
      const ScheduledSeq* q = find(so, id);
      ASSERT_NE(q, nullptr) << "decode " << id << " stalled";
      n_spec += q->n_spec;
    }
    EXPECT_LE(n_spec, 3);
    EXPECT_LE(so.n_tokens, 7);
  }
  sim.run();
}

// Proposals never preempt a sequence or evict a cached prefix: a pool of 4 blocks, 2 of them
// cached; the decoding sequence's proposals stop at the free blocks, and a cached block is
// evicted only when the sequence's own next token needs it.
TEST(Scheduler, ProposalsNeverPreemptOrEvict) {
  Sim sim({.kv = {.n_blocks = 4, .block_size = kBs}, .sched = {.max_batch_tokens = 32, .max_seqs = 2}, .spec_k = 6});
  sim.add(0, 0, toks(8, 900), 9);  // finishes in one step: 2 full blocks stay cached
  sim.run();
  ASSERT_EQ(sim.kv.pool().n_blocks_cached(), 2);
  sim.add(1, 0, toks(3, 10), 16);
  sim.step();
  while (!sim.sched.empty()) {
    const int32_t have = int32_t(sim.kv.table(1).size()), n_free = sim.kv.pool().n_blocks_free();
    const int64_t evictions = sim.kv.pool().n_evictions();
    const int32_t n_before = sim.sched.n_computed(1);
    const ScheduleOutput so = sim.step();
    const ScheduledSeq* q = find(so, 1);
    ASSERT_NE(q, nullptr);
    const int32_t own = std::max(have, KvManager::blocks_for(n_before + 1, kBs));  // blocks the decode needs
    EXPECT_LE(KvManager::blocks_for(q->start + q->n_new, kBs) - own, std::max(0, n_free - (own - have)))
        << "proposals took more than the free blocks at step " << sim.n_steps() - 1;
    if (sim.kv.pool().n_evictions() > evictions) {
      EXPECT_TRUE(own > have && n_free == 0) << "a proposal evicted";
    }
    ASSERT_LT(sim.n_steps(), 40);
  }
  EXPECT_EQ(sim.sched.n_preemptions(), 0);
  EXPECT_EQ(sim.kv.pool().n_evictions(), 2) << "the sequence's own tokens needed both cached blocks in the end";
  EXPECT_GT(sim.reqs.at(1).n_proposed, 0);
}

// Random traffic: shared prefixes, priorities, aborts, a small pool (preemption), with and
// without a sliding window. Every request completes with the output of an unconstrained run.
TEST(Scheduler, RandomTrafficMatchesAnUnconstrainedRun) {
  for (int32_t window : {0, 12}) {
    auto run = [&](int32_t n_blocks, int32_t budget, int32_t max_seqs, bool caching, int32_t spec_k = 0) {
      Sim sim({.kv = {.n_blocks = n_blocks, .block_size = kBs, .sliding_window = window,
                      .enable_prefix_caching = caching},
               .sched = {.max_batch_tokens = budget, .max_seqs = max_seqs}, .spec_k = spec_k});
      std::mt19937 rng(1234);
      const std::vector<int32_t> systems[2] = {toks(9, 10000), toks(16, 20000)};
      int64_t next = 0;
      for (int s = 0; s < 3000 && (next < 60 || !sim.sched.empty()); ++s) {
        if (next < 60 && rng() % 2 == 0) {
          const std::vector<int32_t> tail = toks(int32_t(1 + rng() % 12), int32_t(next) * 1000);
          const uint32_t kind = rng() % 3;
          std::vector<int32_t> prompt = kind == 2 ? tail : cat(systems[kind], tail);
          sim.add(next, int32_t(rng() % 3), prompt, int32_t(prompt.size() + 1 + rng() % 15));
          ++next;
        }
        // Aborts depend only on the request id, so both runs abort the same requests
        // (at different times, which does not change the others' outputs).
        for (auto& [id, r] : sim.reqs)
          if (!r.done && id % 11 == 5 && r.tokens.size() > size_t(r.n_prompt) + 2) sim.abort(id);
        if (!sim.sched.empty()) sim.step();
        if (::testing::Test::HasFailure()) break;
      }
      EXPECT_TRUE(sim.sched.empty());
      EXPECT_EQ(sim.kv.pool().n_blocks_used(), 0);
      return sim;
    };
    SCOPED_TRACE("window " + std::to_string(window));
    const Sim ref = run(1024, 1024, 64, false);
    // Speculation with the same small pool and budget: proposals, rollback, preemption
    // and prefix hits in one run.
    for (int32_t spec_k : {0, 3}) {
      SCOPED_TRACE("spec_k " + std::to_string(spec_k));
      const Sim tight = run(14, 24, 6, true, spec_k);
      EXPECT_EQ(ref.sched.n_preemptions(), 0);
      EXPECT_GT(tight.sched.n_preemptions(), 0) << "the small pool should force preemption";
      EXPECT_GT(tight.sched.stats().n_prefix_hit_tokens, 0);
      ASSERT_EQ(ref.reqs.size(), tight.reqs.size());
      int64_t n_accepted = 0, n_proposed = 0;
      for (const auto& [id, r] : ref.reqs) {
        const Sim::Req& t = tight.reqs.at(id);
        n_accepted += t.n_accepted;
        n_proposed += t.n_proposed;
        if (id % 11 == 5) continue;  // aborted
        EXPECT_EQ(t.tokens, r.tokens) << "request " << id;
        EXPECT_EQ(int32_t(t.tokens.size()), t.max_len) << "request " << id;
      }
      if (spec_k > 0) {
        EXPECT_GT(n_accepted, 0);
        EXPECT_LT(n_accepted, n_proposed) << "some proposals were meant to be rejected";
      }
    }
  }
}

}  // namespace
}  // namespace tf

// A fake engine for scheduler tests: no model, but a fake KV memory that makes wrong block
// tables visible.
//
// Each step: schedule -> "write K/V": every scheduled token stores (token, position) into
// its slot of `kv_mem` (slot = table[pos / block_size] * block_size + pos % block_size, as
// BatchBuilder computes it) -> "attend": every scheduled token reads back the positions its
// attention would read ([0, pos], or the last `sliding_window` of them) and the test fails
// unless each slot holds exactly that sequence's token at that position -> the sampled
// token is a checksum of what the last token read, so it depends on the cache contents
// like a model's output does -> commit -> sequences at their max length are removed.
// After every step: the token budget and sequence cap hold, tables cover the scheduled
// tokens, preemption victims rank below every sequence still running, and the scheduler's
// (and so the KV manager's and pool's) invariants hold.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "sched/scheduler.h"

namespace tf::test {

struct SimParams {
  KvManagerParams kv;
  SchedulerParams sched;
};

class Sim {
 public:
  struct Req {
    std::vector<int32_t> tokens;  // prompt + generated
    int32_t n_prompt = 0;
    int32_t max_len = 0;
    int32_t priority = 0;
    int64_t order = 0;             // order of add()
    int64_t admitted_step = -1;    // first step that scheduled it
    int64_t finished_step = -1;
    int32_t n_times_preempted = 0;
    std::vector<int32_t> n_new_per_step;  // tokens scheduled per step while it existed (0 = none)
    bool done = false;
  };

  explicit Sim(const SimParams& p)
      : kv(p.kv),
        sched(p.sched, kv),
        params_(p),
        kv_mem_(size_t(p.kv.n_blocks) * size_t(p.kv.block_size), {-1, -1}) {}

  void add(int64_t id, int32_t priority, std::vector<int32_t> prompt, int32_t max_len) {
    Req& r = reqs[id];
    r.n_prompt = int32_t(prompt.size());
    r.tokens = std::move(prompt);
    r.max_len = max_len;
    r.priority = priority;
    r.order = next_order_++;
    sched.add(id, priority, &r.tokens);
  }

  void abort(int64_t id) {
    sched.remove(id);
    reqs.at(id).done = true;
  }

  // One step; returns what the scheduler decided.
  ScheduleOutput step() {
    const ScheduleOutput so = sched.schedule();
    check_decision(so);
    for (const ScheduledSeq& q : so.seqs) write_kv(q);
    std::vector<int64_t> sampled;
    for (const ScheduledSeq& q : so.seqs) {
      const int32_t checksum = attend(q);
      Req& r = reqs.at(q.id);
      if (r.admitted_step < 0) r.admitted_step = step_;
      if (!q.samples) continue;
      r.tokens.push_back(100 + checksum % 900);
      sampled.push_back(q.id);
    }
    for (auto& [id, r] : reqs) {
      if (r.done) continue;
      int32_t n = 0;
      for (const ScheduledSeq& q : so.seqs) n += q.id == id ? q.n_new : 0;
      r.n_new_per_step.push_back(n);
    }
    for (int64_t v : so.preempted) ++reqs.at(v).n_times_preempted;
    sched.commit(so, sampled);
    for (int64_t id : sampled) {
      Req& r = reqs.at(id);
      if (int32_t(r.tokens.size()) >= r.max_len) {
        sched.remove(id);
        r.done = true;
        r.finished_step = step_;
      }
    }
    EXPECT_EQ(sched.check_invariants(), "") << "after step " << step_;
    const BlockPool& pool = kv.pool();
    EXPECT_EQ(pool.n_blocks_free() + pool.n_blocks_used() + pool.n_blocks_cached(), pool.n_blocks_total());
    ++step_;
    return so;
  }

  // Steps until every request is done (or max_steps); returns the number of steps run.
  int64_t run(int64_t max_steps = 10000) {
    int64_t n = 0;
    while (!sched.empty() && n < max_steps) {
      step();
      ++n;
      if (::testing::Test::HasFatalFailure()) break;
    }
    return n;
  }

  int64_t n_steps() const { return step_; }

  KvManager kv;
  Scheduler sched;
  std::map<int64_t, Req> reqs;

 private:
  void check_decision(const ScheduleOutput& so) {
    int32_t n_tokens = 0;
    std::set<int64_t> ids;
    for (const ScheduledSeq& q : so.seqs) {
      EXPECT_TRUE(ids.insert(q.id).second) << "sequence " << q.id << " scheduled twice";
      EXPECT_GT(q.n_new, 0);
      EXPECT_TRUE(sched.is_running(q.id));
      const Req& r = reqs.at(q.id);
      EXPECT_EQ(q.start, sched.n_computed(q.id)) << "sequence " << q.id;
      EXPECT_LE(q.start + q.n_new, int32_t(r.tokens.size()));
      EXPECT_EQ(q.samples, q.start + q.n_new == int32_t(r.tokens.size()));
      // The table covers every token written this step, with real blocks.
      const std::vector<int32_t>& table = kv.table(q.id);
      const int32_t bs = kv.block_size();
      EXPECT_GE(int64_t(table.size()) * bs, q.start + q.n_new) << "sequence " << q.id;
      n_tokens += q.n_new;
    }
    EXPECT_EQ(n_tokens, so.n_tokens);
    EXPECT_LE(so.n_tokens, params_.sched.max_batch_tokens);
    EXPECT_LE(sched.n_running(), params_.sched.max_seqs);
    // Victims are taken from the bottom: every sequence still running ranks above them.
    for (int64_t v : so.preempted) {
      EXPECT_FALSE(sched.is_running(v));
      EXPECT_EQ(ids.count(v), 0u) << "preempted sequence " << v << " is still scheduled";
      const Req& rv = reqs.at(v);
      for (const auto& [id, r] : reqs) {
        if (!sched.is_running(id)) continue;
        EXPECT_TRUE(r.priority > rv.priority || (r.priority == rv.priority && r.order < rv.order))
            << "victim " << v << " ranks above running " << id;
      }
    }
  }

  int32_t slot(int64_t id, int32_t pos) const {
    const std::vector<int32_t>& table = kv.table(id);
    const int32_t bs = kv.block_size();
    const int32_t block = table.at(size_t(pos / bs));
    EXPECT_GE(block, 0) << "sequence " << id << " position " << pos << " has no block";
    return block < 0 ? -1 : block * bs + pos % bs;
  }

  void write_kv(const ScheduledSeq& q) {
    const Req& r = reqs.at(q.id);
    for (int32_t pos = q.start; pos < q.start + q.n_new; ++pos) {
      const int32_t s = slot(q.id, pos);
      if (s < 0) continue;
      // A registered block holds a finished prefix; writing into it would corrupt every
      // sequence sharing it.
      EXPECT_FALSE(kv.pool().has_hash(s / kv.block_size()))
          << "sequence " << q.id << " writes position " << pos << " into a shared block";
      kv_mem_[size_t(s)] = {r.tokens[size_t(pos)], pos};
    }
  }

  // Checks what attention would read for each new token; returns a checksum of what the
  // last one read.
  int32_t attend(const ScheduledSeq& q) {
    const Req& r = reqs.at(q.id);
    const int32_t window = kv.sliding_window();
    uint32_t sum = 0;
    for (int32_t pos = q.start; pos < q.start + q.n_new; ++pos) {
      sum = 0;
      const int32_t first = window > 0 ? std::max(0, pos - window + 1) : 0;
      for (int32_t kp = first; kp <= pos; ++kp) {
        const int32_t s = slot(q.id, kp);
        if (s < 0) return 0;
        const std::pair<int32_t, int32_t> want{r.tokens[size_t(kp)], kp};
        if (kv_mem_[size_t(s)] != want) {
          ADD_FAILURE() << "sequence " << q.id << " reads position " << kp << " from slot " << s
                        << " holding token " << kv_mem_[size_t(s)].first << " at position "
                        << kv_mem_[size_t(s)].second << ", want token " << want.first;
          return 0;
        }
        sum = sum * 31u + uint32_t(want.first);
      }
    }
    return int32_t(sum % 1000003u);
  }

  SimParams params_;
  std::vector<std::pair<int32_t, int32_t>> kv_mem_;  // [n_blocks * block_size] (token, position)
  int64_t next_order_ = 0;
  int64_t step_ = 0;
};

}  // namespace tf::test

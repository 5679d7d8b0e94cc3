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
//
// Speculation (SimParams::spec_k > 0): before each step every decoding sequence proposes up
// to spec_k tokens. The "model" is the checksum rule above, so the proposer knows the true
// continuation; it proposes it, except that some positions (a hash of sequence and position)
// get a wrong token (>= 1100, never a true one). The proposals are written to the fake KV
// like any token; verification reads each row's checksum from what attention saw, accepts
// proposals while they equal the row's true token and appends that token. So a sequence's
// output is the output without speculation exactly when rejected slots are rolled back (a
// stale proposal read later fails the KV check), which the tests compare.
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
  int32_t spec_k = 0;  // proposals per decoding sequence and step (0: no speculation)
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
    std::vector<int32_t> proposals;       // offered for this step (speculation)
    int64_t n_accepted = 0, n_proposed = 0;  // proposals verified over the run
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

  // The checksum rule's next token after `tokens` (what attention over them yields).
  static int32_t true_next(const std::vector<int32_t>& tokens) {
    uint32_t sum = 0;
    for (int32_t t : tokens) sum = sum * 31u + uint32_t(t);
    return 100 + int32_t(sum % 1000003u) % 900;
  }

  // One step; returns what the scheduler decided.
  ScheduleOutput step() {
    if (params_.spec_k > 0) propose();
    const ScheduleOutput so = sched.schedule();
    check_decision(so);
    for (const ScheduledSeq& q : so.seqs) write_kv(q);
    std::vector<int64_t> sampled;
    std::vector<SpecOutcome> spec;
    for (const ScheduledSeq& q : so.seqs) {
      const std::vector<int32_t> checksums = attend(q);
      Req& r = reqs.at(q.id);
      if (r.admitted_step < 0) r.admitted_step = step_;
      if (!q.samples) continue;
      // Row i of a verified sequence is the token after its i-th proposal.
      const size_t row0 = size_t(q.n_new - q.n_spec - 1);
      int32_t n_acc = 0;
      while (n_acc < q.n_spec && r.proposals[size_t(n_acc)] == 100 + checksums[row0 + size_t(n_acc)] % 900) ++n_acc;
      r.tokens.insert(r.tokens.end(), r.proposals.begin(), r.proposals.begin() + n_acc);
      r.tokens.push_back(100 + checksums[row0 + size_t(n_acc)] % 900);
      if (q.n_spec > 0) spec.push_back({.id = q.id, .n_accepted = n_acc});
      r.n_accepted += n_acc;
      r.n_proposed += q.n_spec;
      sampled.push_back(q.id);
    }
    for (auto& [id, r] : reqs) {
      if (r.done) continue;
      int32_t n = 0;
      for (const ScheduledSeq& q : so.seqs) n += q.id == id ? q.n_new : 0;
      r.n_new_per_step.push_back(n);
    }
    for (int64_t v : so.preempted) ++reqs.at(v).n_times_preempted;
    sched.commit(so, sampled, spec);
    for (auto& [id, r] : reqs) r.proposals.clear();
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
    // Rollback: a sequence holds the blocks of its computed tokens and at most those its
    // tokens need, none for rejected proposals.
    for (const auto& [id, r] : reqs) {
      if (r.done || !sched.is_running(id)) continue;
      const int32_t n_blocks = int32_t(kv.table(id).size()), bs = kv.block_size();
      EXPECT_GE(n_blocks, KvManager::blocks_for(sched.n_computed(id), bs)) << "sequence " << id;
      EXPECT_LE(n_blocks, KvManager::blocks_for(int32_t(r.tokens.size()), bs))
          << "sequence " << id << " keeps blocks of rejected proposals after step " << step_;
    }
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
  // Offers proposals for every decoding sequence: the true continuation with wrong tokens at
  // hashed positions, capped so that the step's tokens stay within max_len.
  void propose() {
    for (auto& [id, r] : reqs) {
      if (r.done || !sched.is_running(id) || sched.n_computed(id) + 1 != int32_t(r.tokens.size())) continue;
      const int32_t n = std::min(params_.spec_k, r.max_len - int32_t(r.tokens.size()) - 1);
      std::vector<int32_t> seq = r.tokens;
      for (int32_t j = 0; j < n; ++j) {
        const int32_t pos = int32_t(seq.size());
        const uint64_t h = (uint64_t(id) + 1) * 0x9e3779b97f4a7c15ull ^ uint64_t(pos) * 0xc2b2ae3d27d4eb4full;
        const bool wrong = (h >> 33) % 4 == 0;
        seq.push_back(wrong ? 1100 + pos % 500 : true_next(seq));
        r.proposals.push_back(seq.back());
      }
      if (n > 0) sched.set_spec_tokens(id, n);
    }
  }

  // The token at position pos of what a scheduled sequence computes: its tokens, then its
  // proposals.
  int32_t token_at(const Req& r, int32_t pos) const {
    const int32_t n = int32_t(r.tokens.size());
    return pos < n ? r.tokens[size_t(pos)] : r.proposals.at(size_t(pos - n));
  }

  void check_decision(const ScheduleOutput& so) {
    int32_t n_tokens = 0;
    std::set<int64_t> ids;
    for (const ScheduledSeq& q : so.seqs) {
      EXPECT_TRUE(ids.insert(q.id).second) << "sequence " << q.id << " scheduled twice";
      EXPECT_GT(q.n_new, 0);
      EXPECT_TRUE(sched.is_running(q.id));
      const Req& r = reqs.at(q.id);
      EXPECT_EQ(q.start, sched.n_computed(q.id)) << "sequence " << q.id;
      EXPECT_LE(q.start + q.n_new - q.n_spec, int32_t(r.tokens.size()));
      EXPECT_EQ(q.samples, q.start + q.n_new - q.n_spec == int32_t(r.tokens.size()));
      EXPECT_LE(q.n_spec, int32_t(r.proposals.size()));
      if (q.n_spec > 0) {
        EXPECT_EQ(q.n_new, 1 + q.n_spec) << "proposals follow a decode";
      }
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
      kv_mem_[size_t(s)] = {token_at(r, pos), pos};
    }
  }

  // Checks what attention would read for each new token; returns, per new token, a
  // checksum of what it read. The checksum folds in every position from 0 (only the window's
  // slots are read, the rest of the fold comes from the tokens themselves), so that a window
  // does not change the outputs.
  std::vector<int32_t> attend(const ScheduledSeq& q) {
    const Req& r = reqs.at(q.id);
    const int32_t window = kv.sliding_window();
    std::vector<int32_t> out;
    for (int32_t pos = q.start; pos < q.start + q.n_new; ++pos) {
      uint32_t sum = 0;
      const int32_t first = window > 0 ? std::max(0, pos - window + 1) : 0;
      for (int32_t kp = 0; kp <= pos; ++kp) {
        const std::pair<int32_t, int32_t> want{token_at(r, kp), kp};
        sum = sum * 31u + uint32_t(want.first);
        if (kp < first) continue;
        const int32_t s = slot(q.id, kp);
        if (s < 0) return std::vector<int32_t>(size_t(q.n_new), 0);
        if (kv_mem_[size_t(s)] != want) {
          ADD_FAILURE() << "sequence " << q.id << " reads position " << kp << " from slot " << s
                        << " holding token " << kv_mem_[size_t(s)].first << " at position "
                        << kv_mem_[size_t(s)].second << ", want token " << want.first;
          return std::vector<int32_t>(size_t(q.n_new), 0);
        }
      }
      out.push_back(int32_t(sum % 1000003u));
    }
    return out;
  }

  SimParams params_;
  std::vector<std::pair<int32_t, int32_t>> kv_mem_;  // [n_blocks * block_size] (token, position)
  int64_t next_order_ = 0;
  int64_t step_ = 0;
};

}  // namespace tf::test

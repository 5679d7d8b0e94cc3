// The iteration-level scheduler (host-only, deterministic).
//
// There is no prefill phase and no decode phase (vLLM v1's rule): every sequence has
// n_tokens (prompt + generated so far, the size of its token vector) and n_computed (tokens
// whose K/V are in the cache), and a step advances n_computed toward n_tokens. A decode is a
// step of 1 token, a prefill chunk a step of up to the token budget; a sequence admitted
// with a prefix-cache hit starts at n_computed = hit tokens; a preempted sequence drops to
// n_computed = 0 and is recomputed later (the prefix cache may give some blocks back). The
// engine samples a new token for a sequence whenever a step brings n_computed up to n_tokens.
//
// Speculative tokens are the same rule with a longer target: a decoding sequence (one token
// left) may carry n_spec proposed tokens after its n_tokens (set_spec_tokens, for the next
// schedule() only), and its step computes up to 1 + n_spec tokens. The proposals are not in
// the token vector, so the KV manager never hashes them; commit() advances n_computed over
// the accepted ones only and truncates the table to the tokens the sequence now has, which
// releases blocks that held nothing but rejected proposals.
//
// Guarantees (tested in tests/sched/test_scheduler.cpp):
// - Per step: at most max_batch_tokens tokens and max_seqs running sequences.
// - A prefill never delays a decode: running sequences with one token left are scheduled
//   before any prefill chunk, so they advance every step (as long as max_seqs <=
//   max_batch_tokens, and unless blocks run out and they are preempted).
// - Priorities: higher first; FCFS within a priority, up to bounded reordering by length
//   grouping. No starvation within a priority: the oldest waiting sequence of the top
//   priority is the first admitted in any step that admits at all, and a sequence can be
//   passed over by grouping at most max_group_skips times.
// - When blocks run out, the lowest-priority, latest running sequence is preempted first.
// - Speculative tokens take only what is left: they are added after every decode has its one
//   token (before prefill chunks), within the budget, and only where blocks are free without
//   evicting a cached prefix or preempting anyone; otherwise fewer (or none) are scheduled.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/kv_manager.h"

namespace tf {

struct SchedulerParams {
  int32_t max_batch_tokens = 512;  // tokens per step, decodes and prefill chunks together
  int32_t max_seqs = 64;           // running sequences at most
  // Length grouping: after a step's first admission (always the oldest of the top
  // priority), the next one is chosen among the first `group_window` waiting sequences of
  // that priority as the one whose length is closest to the first's. 1 = plain FCFS.
  int32_t group_window = 4;
  int32_t max_group_skips = 4;  // a sequence passed over this often is not passed again
};

struct ScheduledSeq {
  int64_t id = -1;
  int32_t start = 0;     // first token index computed this step (== n_computed before)
  int32_t n_new = 0;     // tokens computed this step, n_spec proposals included
  int32_t n_spec = 0;    // the last n_spec of them are proposed tokens to verify
  bool samples = false;  // the step reaches n_tokens: the engine samples (or verifies) a token
};

struct ScheduleOutput {
  std::vector<ScheduledSeq> seqs;  // running decodes, running prefills, then admissions
  std::vector<int64_t> preempted;  // sequences that lost their blocks this step
  int32_t n_tokens = 0;
};

// How many of a sequence's scheduled proposals the engine accepted (and appended to its
// tokens) this step.
struct SpecOutcome {
  int64_t id = -1;
  int32_t n_accepted = 0;
};

// Counters for the server's /metrics.
struct SchedulerStats {
  int32_t n_running = 0;
  int32_t n_waiting = 0;
  int64_t n_preemptions = 0;
  int32_t n_blocks_total = 0;
  int32_t n_blocks_used = 0;
  int32_t n_blocks_free = 0;
  int32_t n_blocks_cached = 0;          // reusable by a prefix hit, evictable
  int64_t n_prefix_query_tokens = 0;    // tokens of admitted sequences (prefix caching on)
  int64_t n_prefix_hit_tokens = 0;      // of those, served from the prefix cache
};

class Scheduler {
 public:
  Scheduler(const SchedulerParams& p, KvManager& kv);

  // Queues sequence `id` whose tokens are *tokens (prompt, then generated tokens appended
  // by the caller). The caller owns the vector, keeps it alive until remove(id) and only
  // appends to it; n_tokens is tokens->size(). Preconditions: `id` is new, tokens non-empty.
  // `whole`: the sequence is always computed from its first token (no prefix-cache hits, no
  // waiting for a prefix being computed beside it), for outputs read from every position.
  void add(int64_t id, int32_t priority, const std::vector<int32_t>* tokens, bool whole = false);
  // Offers n_spec proposed tokens after the tokens of running sequence `id` for the next
  // schedule() (which may take fewer; every schedule() forgets the offers). Preconditions:
  // `id` is running with exactly one token left to compute; n_spec >= 0.
  void set_spec_tokens(int64_t id, int32_t n_spec);
  // Decides this step's work and reserves KV blocks for it.
  ScheduleOutput schedule();
  // Applies a step's results: n_computed advances by each n_new less its rejected proposals
  // (full blocks become hittable by later sequences); a sequence that verified proposals
  // keeps the blocks its tokens need and releases the rest. Sequences in `sampled` must have
  // had their new tokens appended to their token vector already, those in `spec` their
  // accepted proposals too (a sequence with n_spec > 0 and no entry accepted none).
  void commit(const ScheduleOutput& out, const std::vector<int64_t>& sampled,
              const std::vector<SpecOutcome>& spec = {});
  // Removes a sequence (finished or aborted) and frees its blocks at once. No-op if unknown.
  void remove(int64_t id);

  bool empty() const { return seqs_.empty(); }
  bool has(int64_t id) const { return seqs_.count(id) != 0; }
  bool is_running(int64_t id) const;
  int32_t n_computed(int64_t id) const;
  int32_t n_running() const { return int32_t(running_.size()); }
  int32_t n_waiting() const { return int32_t(waiting_.size()); }
  int64_t n_preemptions() const { return n_preemptions_; }
  SchedulerStats stats() const;
  // "" when the KV manager's invariants and the scheduler's own hold (running sequences
  // are in order and their tables cover n_computed; waiting ones hold no blocks).
  std::string check_invariants() const;

 private:
  struct Seq {
    int64_t id;
    int32_t priority;
    int64_t arrival;  // order of add(): earlier first within a priority
    const std::vector<int32_t>* tokens;
    int32_t n_computed = 0;
    int32_t n_skips = 0;  // times length grouping admitted a later arrival instead
    int32_t n_spec = 0;   // proposals offered for the next schedule()
    bool running = false;
    bool whole = false;   // add()'s: never starts after a cached prefix
    int32_t n_tokens() const { return int32_t(tokens->size()); }
  };
  // Priority order: higher priority first, then earlier arrival.
  static bool before(const Seq& a, const Seq& b) {
    return a.priority != b.priority ? a.priority > b.priority : a.arrival < b.arrival;
  }
  void insert_sorted(std::list<int64_t>& q, int64_t id);
  void schedule_running(bool decodes, ScheduleOutput& out, int32_t& budget);
  void schedule_spec_tokens(ScheduleOutput& out, int32_t& budget);
  bool reserve_or_preempt(Seq& s, int32_t n_new, ScheduleOutput& out, int32_t& budget);
  void admit_waiting(ScheduleOutput& out, int32_t& budget);
  // `deferred`: sequences left waiting this step (awaits_shared_prefix), never picked.
  std::list<int64_t>::iterator pick_waiting(int32_t ref_len, const std::vector<int64_t>& deferred);
  bool awaits_shared_prefix(const Seq& s, const PrefixHit& hit) const;
  // Frees a running sequence's blocks and requeues it (recomputed when readmitted).
  void preempt(int64_t id);

  SchedulerParams params_;
  KvManager& kv_;
  std::unordered_map<int64_t, Seq> seqs_;
  std::list<int64_t> running_;  // priority order; the back is the first preemption victim
  std::list<int64_t> waiting_;  // priority order
  int64_t next_arrival_ = 0;
  int64_t n_preemptions_ = 0;
};

}  // namespace tf

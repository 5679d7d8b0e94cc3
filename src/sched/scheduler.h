// The iteration-level scheduler (host-only, deterministic).
//
// There is no prefill phase and no decode phase (vLLM v1's rule): every sequence has
// n_tokens (prompt + generated so far) and n_computed (tokens whose K/V are in the cache),
// and a step advances n_computed toward n_tokens. A decode is a step of 1 token, a prefill
// chunk a step of up to the token budget; a preempted sequence drops to n_computed = 0 and
// is recomputed later. The engine samples a new token for a sequence whenever a step brings
// n_computed up to n_tokens.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "kv/kv_manager.h"

namespace tf {

struct SchedulerParams {
  int32_t max_batch_tokens = 512;  // tokens per step, decodes and prefill chunks together
  int32_t max_seqs = 64;           // running sequences at most
};

struct ScheduledSeq {
  int64_t id = -1;
  int32_t start = 0;     // first token index computed this step (== n_computed before)
  int32_t n_new = 0;     // tokens computed this step
  bool samples = false;  // the step reaches n_tokens: the engine samples a token
};

struct ScheduleOutput {
  std::vector<ScheduledSeq> seqs;  // running sequences first, in priority order
  std::vector<int64_t> preempted;  // sequences that lost their blocks this step
  int32_t n_tokens = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerParams& p, KvManager& kv);

  // Queues a sequence of n_tokens prompt tokens.
  void add(int64_t id, int32_t priority, int32_t n_tokens);
  // Decides this step's work and reserves KV blocks for it.
  ScheduleOutput schedule();
  // Applies a step's results: n_computed advances by each n_new; sequences in `sampled`
  // got one more token.
  void commit(const ScheduleOutput& out, const std::vector<int64_t>& sampled);
  // Removes a sequence (finished or aborted) and frees its blocks at once.
  void remove(int64_t id);

  bool empty() const { return seqs_.empty(); }
  int32_t n_running() const { return int32_t(running_.size()); }
  int32_t n_waiting() const { return int32_t(waiting_.size()); }
  int32_t n_preemptions() const { return n_preemptions_; }

 private:
  struct Seq {
    int64_t id;
    int32_t priority;
    int64_t arrival;    // order of add(): earlier first within a priority
    int32_t n_tokens;
    int32_t n_computed = 0;
    bool running = false;
  };
  // Priority order: higher priority first, then earlier arrival.
  bool before(const Seq& a, const Seq& b) const {
    return a.priority != b.priority ? a.priority > b.priority : a.arrival < b.arrival;
  }
  void insert_sorted(std::list<int64_t>& q, int64_t id);
  // Frees a running sequence's blocks and requeues it (recomputed when readmitted).
  void preempt(int64_t id);

  SchedulerParams params_;
  KvManager& kv_;
  std::unordered_map<int64_t, Seq> seqs_;
  std::list<int64_t> running_;  // priority order
  std::list<int64_t> waiting_;  // priority order
  int64_t next_arrival_ = 0;
  int32_t n_preemptions_ = 0;
};

}  // namespace tf

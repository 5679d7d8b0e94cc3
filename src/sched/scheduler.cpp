#include "sched/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace tf {

Scheduler::Scheduler(const SchedulerParams& p, KvManager& kv) : params_(p), kv_(kv) {
  TF_ASSERT(p.max_batch_tokens > 0 && p.max_seqs > 0, "scheduler limits must be positive");
}

void Scheduler::insert_sorted(std::list<int64_t>& q, int64_t id) {
  const Seq& s = seqs_.at(id);
  auto it = std::find_if(q.begin(), q.end(), [&](int64_t o) { return before(s, seqs_.at(o)); });
  q.insert(it, id);
}

void Scheduler::add(int64_t id, int32_t priority, int32_t n_tokens) {
  TF_ASSERT(!seqs_.count(id), "sequence {} added twice", id);
  TF_ASSERT(n_tokens > 0, "sequence {} has no tokens", id);
  seqs_.emplace(id, Seq{.id = id, .priority = priority, .arrival = next_arrival_++, .n_tokens = n_tokens});
  insert_sorted(waiting_, id);
}

void Scheduler::preempt(int64_t id) {
  Seq& v = seqs_.at(id);
  TF_ASSERT(v.running, "preempting sequence {} that is not running", id);
  running_.remove(id);
  kv_.free(id);
  v.n_computed = 0;
  v.running = false;
  insert_sorted(waiting_, id);
  ++n_preemptions_;
}

// Phase 1: running sequences, in priority order, each gets min(remaining, budget) tokens;
// when blocks run out, the lowest-priority running sequence is preempted (possibly the one
// being scheduled, if it is the lowest). Phase 2: waiting sequences are admitted in priority
// order while budget, the sequence cap and free blocks allow; a waiting sequence never
// preempts a running one, so admission cannot thrash.
ScheduleOutput Scheduler::schedule() {
  ScheduleOutput out;
  int32_t budget = params_.max_batch_tokens;

  for (auto it = running_.begin(); it != running_.end() && budget > 0;) {
    const int64_t id = *it;
    Seq& s = seqs_.at(id);
    const int32_t n_new = std::min(s.n_tokens - s.n_computed, budget);
    if (n_new == 0) { ++it; continue; }
    // Out of blocks: preempt the lowest-priority, latest running sequence (the back of
    // running_), which may be this one; a preempted sequence's work this step is undone.
    bool self_preempted = false;
    while (!kv_.grow(id, s.n_computed + n_new)) {
      const int64_t victim = running_.back();
      if (victim == id) {
        self_preempted = true;
        break;
      }
      preempt(victim);
      out.preempted.push_back(victim);
      std::erase_if(out.seqs, [&](const ScheduledSeq& q) {
        if (q.id != victim) return false;
        budget += q.n_new;
        return true;
      });
    }
    if (self_preempted) {
      ++it;  // it still points at id; move on before the list node goes
      preempt(id);
      out.preempted.push_back(id);
      break;  // everything after it was lower priority and is gone already
    }
    out.seqs.push_back({.id = id, .start = s.n_computed, .n_new = n_new,
                        .samples = s.n_computed + n_new == s.n_tokens});
    budget -= n_new;
    ++it;
  }

  for (auto it = waiting_.begin(); it != waiting_.end() && budget > 0 &&
                                   int32_t(running_.size()) < params_.max_seqs;) {
    const int64_t id = *it;
    Seq& s = seqs_.at(id);
    const int32_t n_new = std::min(s.n_tokens - s.n_computed, budget);
    if (!kv_.grow(id, s.n_computed + n_new)) break;  // keep priority order: no skipping ahead
    it = waiting_.erase(it);
    s.running = true;
    insert_sorted(running_, id);
    out.seqs.push_back({.id = id, .start = s.n_computed, .n_new = n_new,
                        .samples = s.n_computed + n_new == s.n_tokens});
    budget -= n_new;
  }
  for (const auto& q : out.seqs) out.n_tokens += q.n_new;
  return out;
}

void Scheduler::commit(const ScheduleOutput& out, const std::vector<int64_t>& sampled) {
  for (const ScheduledSeq& q : out.seqs) {
    auto it = seqs_.find(q.id);
    if (it == seqs_.end()) continue;  // removed (aborted) during the step
    it->second.n_computed = q.start + q.n_new;
  }
  for (int64_t id : sampled) {
    auto it = seqs_.find(id);
    if (it != seqs_.end()) ++it->second.n_tokens;
  }
}

void Scheduler::remove(int64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  (it->second.running ? running_ : waiting_).remove(id);
  kv_.free(id);
  seqs_.erase(it);
}

}  // namespace tf

#include "sched/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.h"

namespace tf {

namespace {

bool contains(const std::vector<int64_t>& ids, int64_t id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }

}  // namespace

Scheduler::Scheduler(const SchedulerParams& p, KvManager& kv) : params_(p), kv_(kv) {
  TF_ASSERT(p.max_batch_tokens > 0 && p.max_seqs > 0, "scheduler limits must be positive");
  TF_ASSERT(p.group_window >= 1 && p.max_group_skips >= 0, "length grouping parameters out of range");
}

void Scheduler::insert_sorted(std::list<int64_t>& q, int64_t id) {
  const Seq& s = seqs_.at(id);
  auto it = std::find_if(q.begin(), q.end(), [&](int64_t o) { return before(s, seqs_.at(o)); });
  q.insert(it, id);
}

void Scheduler::add(int64_t id, int32_t priority, const std::vector<int32_t>* tokens, bool whole) {
  TF_ASSERT(!seqs_.count(id), "sequence {} added twice", id);
  TF_ASSERT(tokens != nullptr && !tokens->empty(), "sequence {} has no tokens", id);
  seqs_.emplace(id, Seq{.id = id, .priority = priority, .arrival = next_arrival_++, .tokens = tokens, .whole = whole});
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

// Phase 1: running sequences with one token left (decodes) get it, in priority order;
// phase 2: running sequences with more left (prefill chunks, recomputation) get
// min(left, budget), in priority order. Decodes go first so that a long prefill never
// stalls them: they cost one token each and their users are waiting on every step.
// When blocks run out in either phase, the lowest-priority, latest running sequence is
// preempted (possibly the one being scheduled, if it is the lowest).
// Phase 1b: decodes scheduled in phase 1 take their offered proposals (set_spec_tokens) as
// far as the budget and free blocks go; a proposal never preempts, evicts or delays a decode.
// Phase 3: waiting sequences are admitted while budget, the sequence cap and blocks allow.
// It is skipped in a step that preempted: blocks are short, and admitting now would only
// take blocks that running sequences need next step (or readmit the victim at once).
// A waiting sequence never preempts a running one, so admission cannot thrash.
ScheduleOutput Scheduler::schedule() {
  ScheduleOutput out;
  int32_t budget = params_.max_batch_tokens;
  schedule_running(/*decodes=*/true, out, budget);
  schedule_spec_tokens(out, budget);
  schedule_running(/*decodes=*/false, out, budget);
  if (out.preempted.empty()) admit_waiting(out, budget);
  for (const auto& q : out.seqs) out.n_tokens += q.n_new;
  for (auto& [id, s] : seqs_) s.n_spec = 0;
  return out;
}

void Scheduler::set_spec_tokens(int64_t id, int32_t n_spec) {
  auto it = seqs_.find(id);
  TF_ASSERT(it != seqs_.end() && it->second.running, "proposals for sequence {} that is not running", id);
  Seq& s = it->second;
  TF_ASSERT(s.n_tokens() - s.n_computed == 1 && n_spec >= 0,
            "sequence {}: {} proposals with {} tokens left to compute (proposals follow a decode)", id, n_spec,
            s.n_tokens() - s.n_computed);
  s.n_spec = n_spec;
}

// Capacity without eviction: n_blocks_free() only, so that proposals never push a cached
// prefix out of the pool (they are likely rejected; the prefix is likely hit).
void Scheduler::schedule_spec_tokens(ScheduleOutput& out, int32_t& budget) {
  for (ScheduledSeq& q : out.seqs) {
    Seq& s = seqs_.at(q.id);
    int32_t n = std::min(s.n_spec, budget);
    if (n <= 0 || q.n_new != 1 || !q.samples) continue;
    while (n > 0 && kv_.blocks_needed(q.id, q.start + 1 + n) > kv_.pool().n_blocks_free()) --n;
    if (n == 0) continue;
    const bool grown = kv_.grow(q.id, q.start + 1 + n);
    TF_ASSERT(grown, "sequence {}: free blocks vanished", q.id);
    q.n_new += n;
    q.n_spec = n;
    budget -= n;
  }
}

void Scheduler::schedule_running(bool decodes, ScheduleOutput& out, int32_t& budget) {
  const std::vector<int64_t> ids(running_.begin(), running_.end());  // preemption edits running_
  for (int64_t id : ids) {
    if (budget == 0) return;
    Seq& s = seqs_.at(id);
    const int32_t left = s.n_tokens() - s.n_computed;
    if (!s.running || left <= 0 || (left == 1) != decodes) continue;
    const int32_t n_new = std::min(left, budget);
    if (!reserve_or_preempt(s, n_new, out, budget)) continue;
    out.seqs.push_back({.id = id, .start = s.n_computed, .n_new = n_new,
                        .samples = s.n_computed + n_new == s.n_tokens()});
    budget -= n_new;
  }
}

// Grows s's blocks to cover n_new more tokens, preempting from the back of running_ until
// they fit. A victim already scheduled this step is taken out of `out` and its tokens go
// back to the budget. Returns false if s itself was the victim.
bool Scheduler::reserve_or_preempt(Seq& s, int32_t n_new, ScheduleOutput& out, int32_t& budget) {
  while (!kv_.grow(s.id, s.n_computed + n_new)) {
    const int64_t victim = running_.back();
    preempt(victim);
    out.preempted.push_back(victim);
    if (victim == s.id) return false;
    std::erase_if(out.seqs, [&](const ScheduledSeq& q) {
      if (q.id != victim) return false;
      budget += q.n_new;
      return true;
    });
  }
  return true;
}

// Admission in priority order. The first sequence admitted in a step is always the head of
// waiting_ (the oldest of the top priority) unless it awaits a shared prefix (below), which
// alone makes FCFS progress certain. Each later one comes from pick_waiting (length grouping).
// A sequence starts after its cached prefix, if any. If the chosen one does not fit in the
// blocks left, admission stops: no smaller request may jump ahead, or a large one could wait
// forever.
void Scheduler::admit_waiting(ScheduleOutput& out, int32_t& budget) {
  int32_t ref_len = -1;  // length of the first sequence admitted this step
  std::vector<int64_t> deferred;
  while (budget > 0 && n_running() < params_.max_seqs) {
    const auto it = pick_waiting(ref_len, deferred);
    if (it == waiting_.end()) return;
    Seq& s = seqs_.at(*it);
    const PrefixHit hit = s.whole ? PrefixHit{} : kv_.find_prefix(*s.tokens);
    if (!s.whole && awaits_shared_prefix(s, hit)) {
      deferred.push_back(s.id);
      continue;
    }
    const int32_t n_new = std::min(s.n_tokens() - hit.n_tokens, budget);
    if (!kv_.start(s.id, s.tokens, hit, hit.n_tokens + n_new)) return;
    for (auto p = waiting_.begin(); p != it; ++p)  // passed over
      if (!contains(deferred, *p)) ++seqs_.at(*p).n_skips;
    waiting_.erase(it);
    s.running = true;
    s.n_computed = hit.n_tokens;
    insert_sorted(running_, s.id);
    out.seqs.push_back({.id = s.id, .start = s.n_computed, .n_new = n_new,
                        .samples = s.n_computed + n_new == s.n_tokens()});
    budget -= n_new;
    if (ref_len < 0) ref_len = s.n_tokens();
  }
}

// In-flight prefix sharing. A waiting sequence whose prompt begins with more full blocks than
// the cache holds now, blocks that a running sequence is still computing (in its prefill,
// this step's included), waits until they are computed and registered, then starts after
// them: the n choices of one request, or requests with one long system prompt arriving
// together, compute the shared blocks once instead of side by side in the same steps (which
// would spend the same step budget twice). It waits at most until that sequence's prompt is
// computed (it then decodes and no longer counts), or leaves the running set.
bool Scheduler::awaits_shared_prefix(const Seq& s, const PrefixHit& hit) const {
  if (!kv_.prefix_caching()) return false;
  const int32_t bs = kv_.block_size();
  const int32_t usable = (s.n_tokens() - 1) / bs;  // full blocks find_prefix could return
  const int32_t cached = hit.n_tokens / bs;
  if (usable <= cached) return false;
  for (int64_t id : running_) {
    const Seq& r = seqs_.at(id);
    if (r.n_tokens() - r.n_computed <= 1) continue;  // decoding: its prompt's blocks are registered
    const int32_t n = std::min(s.n_tokens(), r.n_tokens());
    int32_t common = 0;
    while (common < n && (*s.tokens)[size_t(common)] == (*r.tokens)[size_t(common)]) ++common;
    if (std::min(common / bs, usable) > cached) return true;
  }
  return false;
}

// Length grouping. Why: sequences admitted in the same step whose lengths are close finish
// their prefills in the same step and then decode side by side with similar context
// lengths, which keeps per-sequence attention work (one thread block or split per sequence
// on a GPU) balanced instead of waiting on one long straggler. Rule: among the first
// group_window waiting sequences that share the head's priority, take the one whose
// n_tokens is closest to ref_len (ties: the earlier). The scan stops at a sequence already
// passed over max_group_skips times, so it cannot be passed again: reordering is bounded,
// and nothing of another priority is ever reordered. Cost: group_window look-ups per
// admission.
std::list<int64_t>::iterator Scheduler::pick_waiting(int32_t ref_len, const std::vector<int64_t>& deferred) {
  auto head = waiting_.begin();
  while (head != waiting_.end() && contains(deferred, *head)) ++head;
  if (head == waiting_.end() || ref_len < 0 || params_.group_window <= 1) return head;
  const int32_t priority = seqs_.at(*head).priority;
  auto best = head;
  int64_t best_dist = -1;
  int32_t n_seen = 0;
  for (auto it = head; it != waiting_.end() && n_seen < params_.group_window; ++it) {
    if (contains(deferred, *it)) continue;
    ++n_seen;
    const Seq& c = seqs_.at(*it);
    if (c.priority != priority) break;
    const int64_t dist = std::abs(int64_t(c.n_tokens()) - ref_len);
    if (best_dist < 0 || dist < best_dist) {
      best = it;
      best_dist = dist;
    }
    if (c.n_skips >= params_.max_group_skips) break;
  }
  return best;
}

// A verified sequence computed its last token and the accepted proposals; the K/V of the
// rejected ones sit past n_computed and are overwritten by later steps. If it finished inside
// the accepted run (a stop), it has fewer tokens than that, all of them computed.
void Scheduler::commit(const ScheduleOutput& out, const std::vector<int64_t>& sampled,
                       const std::vector<SpecOutcome>& spec) {
  for (const ScheduledSeq& q : out.seqs) {
    auto it = seqs_.find(q.id);
    if (it == seqs_.end()) continue;  // removed (aborted) during the step
    Seq& s = it->second;
    TF_ASSERT(s.running && s.n_computed == q.start, "commit of sequence {} that was not scheduled so", q.id);
    int32_t n_accepted = 0;
    for (const SpecOutcome& o : spec)
      if (o.id == q.id) n_accepted = o.n_accepted;
    TF_ASSERT(n_accepted >= 0 && n_accepted <= q.n_spec, "sequence {}: {} of {} proposals accepted", q.id,
              n_accepted, q.n_spec);
    s.n_computed = std::min(q.start + q.n_new - q.n_spec + n_accepted, s.n_tokens());
    kv_.on_computed(q.id, s.n_computed);
    if (q.n_spec > 0) kv_.truncate(q.id, s.n_tokens());
  }
  for (int64_t id : sampled) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) continue;
    // A stop on an accepted proposal leaves every token computed (the engine removes it).
    const bool stopped_in_run =
        std::any_of(spec.begin(), spec.end(), [&](const SpecOutcome& o) { return o.id == id && o.n_accepted > 0; });
    TF_ASSERT(it->second.n_tokens() > it->second.n_computed || stopped_in_run,
              "sequence {} sampled but no token was appended to its tokens", id);
  }
}

void Scheduler::remove(int64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  (it->second.running ? running_ : waiting_).remove(id);
  kv_.free(id);
  seqs_.erase(it);
}

bool Scheduler::is_running(int64_t id) const {
  auto it = seqs_.find(id);
  return it != seqs_.end() && it->second.running;
}

int32_t Scheduler::n_computed(int64_t id) const {
  auto it = seqs_.find(id);
  TF_ASSERT(it != seqs_.end(), "unknown sequence {}", id);
  return it->second.n_computed;
}

SchedulerStats Scheduler::stats() const {
  const BlockPool& pool = kv_.pool();
  return SchedulerStats{.n_running = n_running(),
                        .n_waiting = n_waiting(),
                        .n_preemptions = n_preemptions_,
                        .n_blocks_total = pool.n_blocks_total(),
                        .n_blocks_used = pool.n_blocks_used(),
                        .n_blocks_free = pool.n_blocks_free(),
                        .n_blocks_cached = pool.n_blocks_cached(),
                        .n_prefix_query_tokens = kv_.prefix_stats().n_query_tokens,
                        .n_prefix_hit_tokens = kv_.prefix_stats().n_hit_tokens};
}

std::string Scheduler::check_invariants() const {
  if (std::string e = kv_.check_invariants(); !e.empty()) return "kv: " + e;
  if (running_.size() + waiting_.size() != seqs_.size())
    return fmt::format("{} running + {} waiting != {} sequences", running_.size(), waiting_.size(), seqs_.size());
  for (const std::list<int64_t>* q : {&running_, &waiting_}) {
    const bool run = q == &running_;
    const Seq* prev = nullptr;
    for (int64_t id : *q) {
      auto it = seqs_.find(id);
      if (it == seqs_.end()) return fmt::format("queued sequence {} is unknown", id);
      const Seq& s = it->second;
      if (s.running != run) return fmt::format("sequence {} is in the wrong queue", id);
      if (prev && !before(*prev, s)) return fmt::format("sequence {} is out of priority order", id);
      prev = &s;
      if (s.n_computed > s.n_tokens())
        return fmt::format("sequence {}: n_computed {} > n_tokens {}", id, s.n_computed, s.n_tokens());
      if (!run && (kv_.has(id) || s.n_computed != 0))
        return fmt::format("waiting sequence {} holds blocks or computed tokens", id);
      if (run && (!kv_.has(id) ||
                  int64_t(kv_.table(id).size()) * kv_.block_size() < int64_t(s.n_computed)))
        return fmt::format("running sequence {} has no table covering its {} tokens", id, s.n_computed);
    }
  }
  return "";
}

}  // namespace tf

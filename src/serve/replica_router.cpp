// The data-parallel router; see replica_router.h.
#include "serve/replica_router.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "serve/routing_policy.h"

namespace tf::serve {
namespace {

// FNV-1a over the ids of the prompt's first KV block; 0 (no affinity) when the prompt has
// no full block, which is all the prefix cache can share.
uint64_t first_block_hash(const std::vector<int32_t>& ids, int32_t block_size) {
  if (block_size <= 0 || ids.size() < size_t(block_size)) return 0;
  uint64_t h = 1469598103934665603ull;
  for (int32_t i = 0; i < block_size; ++i) {
    h ^= uint32_t(ids[size_t(i)]);
    h *= 1099511628211ull;
  }
  return h | 1;
}

// A bound on the affinity table; cleared when reached (a cheap stand-in for LRU).
constexpr size_t kMaxPrefixes = 1 << 16;

}  // namespace

ReplicaRouter::ReplicaRouter(std::vector<std::unique_ptr<EngineLoop>> loops, int64_t prefix_slack)
    : loops_(std::move(loops)), prefix_slack_(prefix_slack), live_(loops_.size()), routed_(loops_.size()) {
  if (loops_.empty()) fail("a server needs at least one engine replica");
  for (const auto& l : loops_)
    if (l->kv_block_size() != loops_[0]->kv_block_size()) fail("engine replicas must share one KV block size");
}

std::vector<int64_t> ReplicaRouter::loads_locked() {
  std::vector<int64_t> loads(loops_.size());
  for (size_t i = 0; i < loops_.size(); ++i) {
    auto& live = live_[i];
    live.erase(std::remove_if(live.begin(), live.end(), [](const auto& s) { return s->finished(); }), live.end());
    loads[i] = int64_t(live.size());
  }
  return loads;
}

// Phases: choose the replica under the lock, submit there (which does not wait for the
// engine thread), record the live stream for later loads.
std::shared_ptr<RequestStream> ReplicaRouter::submit(GenerateRequest req, std::function<void()> notify) {
  const uint64_t key = first_block_hash(req.prompt_ids, kv_block_size());
  std::lock_guard lock(mu_);
  const std::vector<int64_t> loads = loads_locked();
  auto it = key ? prefix_owner_.find(key) : prefix_owner_.end();
  const int target = choose_replica(RouteInput{.loads = loads, .affinity = it == prefix_owner_.end() ? -1 : it->second,
                                               .slack = prefix_slack_, .rotate = rotate_++});
  std::shared_ptr<RequestStream> s = loops_[size_t(target)]->submit(std::move(req), std::move(notify));
  s->replica_ = target;
  if (key) {
    if (prefix_owner_.size() >= kMaxPrefixes) prefix_owner_.clear();
    prefix_owner_[key] = target;
  }
  ++routed_[size_t(target)];
  live_[size_t(target)].push_back(s);
  return s;
}

void ReplicaRouter::abort(RequestStream& s) {
  if (s.replica() >= 0) loops_[size_t(s.replica())]->abort(s);
}

void ReplicaRouter::abort_all() {
  for (const auto& l : loops_) l->abort_all();
}

int64_t ReplicaRouter::kv_pool_tokens() const {
  int64_t tokens = std::numeric_limits<int64_t>::max();
  for (const auto& l : loops_) tokens = std::min<int64_t>(tokens, int64_t(l->metrics().kv_blocks_total) * l->kv_block_size());
  return tokens;
}

EngineMetrics ReplicaRouter::metrics() const {
  EngineMetrics sum;
  for (const auto& l : loops_) {
    const EngineMetrics m = l->metrics();
    sum.n_running += m.n_running;
    sum.n_waiting += m.n_waiting;
    sum.n_preemptions += m.n_preemptions;
    sum.kv_blocks_total += m.kv_blocks_total;
    sum.kv_blocks_used += m.kv_blocks_used;
    sum.kv_blocks_free += m.kv_blocks_free;
    sum.kv_blocks_cached += m.kv_blocks_cached;
    sum.prefix_query_tokens += m.prefix_query_tokens;
    sum.prefix_hit_tokens += m.prefix_hit_tokens;
    sum.n_steps += m.n_steps;
    sum.schedule_s += m.schedule_s;
    sum.launch_s += m.launch_s;
    sum.wait_s += m.wait_s;
    sum.output_s += m.output_s;
    sum.n_overlapped_steps += m.n_overlapped_steps;
    sum.spec_drafts += m.spec_drafts;
    sum.spec_draft_tokens += m.spec_draft_tokens;
    sum.spec_accepted_tokens += m.spec_accepted_tokens;
    sum.spec_kv_blocks_used += m.spec_kv_blocks_used;
  }
  return sum;
}

std::vector<int64_t> ReplicaRouter::n_routed() const {
  std::lock_guard lock(mu_);
  return routed_;
}

std::string ReplicaRouter::render_replica_metrics() const {
  const std::vector<int64_t> routed = n_routed();
  std::vector<EngineMetrics> m;
  for (const auto& l : loops_) m.push_back(l->metrics());
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help, auto value) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n", name, help, type);
    for (size_t i = 0; i < loops_.size(); ++i) out += fmt::format("{}{{replica=\"{}\"}} {}\n", name, i, value(i));
  };
  family("twofold_replica_requests_routed_total", "counter", "Requests the router sent to each data-parallel replica.",
         [&](size_t i) { return routed[i]; });
  family("twofold_replica_num_requests_running", "gauge", "Requests in each replica's running batch.",
         [&](size_t i) { return m[i].n_running; });
  family("twofold_replica_num_requests_waiting", "gauge", "Requests waiting in each replica's scheduler.",
         [&](size_t i) { return m[i].n_waiting; });
  family("twofold_replica_kv_blocks_used", "gauge", "KV blocks held by requests, per replica.",
         [&](size_t i) { return m[i].kv_blocks_used; });
  family("twofold_replica_prefix_cache_hits_total", "counter", "Prompt tokens served from cached KV blocks, per replica.",
         [&](size_t i) { return m[i].prefix_hit_tokens; });
  return out;
}

}  // namespace tf::serve

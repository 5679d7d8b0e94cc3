// Data parallelism behind one server: M engine replicas (each an EngineLoop with its own
// Engine, model copy and KV pool; on GPUs, one per GPU or TP group) and a router that sends
// each request to the least-loaded one (routing_policy.h). Prefix-cache aware where it is
// cheap: the router remembers which replica last took a prompt whose first KV block had
// the same tokens and prefers it while that replica is not much busier, so shared prefixes
// (a system prompt, few-shot examples) tend to hit the same replica's cache.
//
// The HTTP server talks only to this class; with one replica it is a pass-through.
// /metrics shows the gauges summed over replicas plus per-replica lines labelled
// replica="i".
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "serve/engine_loop.h"

namespace tf::serve {

class ReplicaRouter {
 public:
  // Takes at least one loop; all serve the same model with the same KV block size.
  explicit ReplicaRouter(std::vector<std::unique_ptr<EngineLoop>> loops, int64_t prefix_slack = 2);

  // Routes the request, then submits it there (EngineLoop::submit: returns at once; throws
  // tf::Error when that loop is stopping).
  std::shared_ptr<RequestStream> submit(GenerateRequest req, std::function<void()> notify = {});
  void abort(RequestStream& s);
  void abort_all();

  int size() const { return int(loops_.size()); }
  const Tokenizer& tokenizer() const { return loops_[0]->tokenizer(); }
  const ModelConfig& config() const { return loops_[0]->config(); }
  int32_t kv_block_size() const { return loops_[0]->kv_block_size(); }
  int64_t kv_bytes_per_token() const { return loops_[0]->kv_bytes_per_token(); }
  // Tokens the smallest replica's KV pool holds: the longest prompt any replica can take.
  int64_t kv_pool_tokens() const;
  // The engines' counters summed over replicas.
  EngineMetrics metrics() const;
  // Requests routed to each replica so far.
  std::vector<int64_t> n_routed() const;
  // Per-replica Prometheus lines (routed requests, running, waiting, KV blocks used).
  std::string render_replica_metrics() const;

 private:
  std::vector<int64_t> loads_locked();

  std::vector<std::unique_ptr<EngineLoop>> loops_;
  int64_t prefix_slack_;
  mutable std::mutex mu_;  // guards the fields below
  std::vector<std::vector<std::shared_ptr<RequestStream>>> live_;  // per replica, pruned when finished
  std::vector<int64_t> routed_;
  std::unordered_map<uint64_t, int> prefix_owner_;  // hash of a prompt's first block -> replica
  size_t rotate_ = 0;
};

}  // namespace tf::serve

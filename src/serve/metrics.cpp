// Prometheus text rendering of the server's metrics; see metrics.h.
#include "serve/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace tf::serve {
namespace {

// Latency buckets in seconds (vLLM's, trimmed): sub-millisecond CPU decode to minutes-long
// requests.
const std::vector<double> kTtftBounds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                         0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
const std::vector<double> kItlBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                                        0.15,   0.2,   0.3,    0.4,   0.5,  0.75,  1.0,  2.5,   5.0};
const std::vector<double> kE2eBounds = {0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0,
                                        10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 300.0};

void gauge(std::string& out, const char* name, const char* help, double v) {
  out += fmt::format("# HELP {0} {1}\n# TYPE {0} gauge\n{0} {2}\n", name, help, v);
}
void counter(std::string& out, const char* name, const char* help, int64_t v) {
  out += fmt::format("# HELP {0} {1}\n# TYPE {0} counter\n{0} {2}\n", name, help, v);
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  std::lock_guard lock(mu_);
  ++counts_[i];
  sum_ += v;
  ++n_;
}

int64_t Histogram::count() const {
  std::lock_guard lock(mu_);
  return n_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  std::lock_guard lock(mu_);
  out += fmt::format("# HELP {0} {1}\n# TYPE {0} histogram\n", name, help);
  int64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cum);
  }
  out += fmt::format("{0}_bucket{{le=\"+Inf\"}} {1}\n{0}_sum {2}\n{0}_count {1}\n", name, n_, sum_);
}

ServerMetrics::ServerMetrics() : ttft_s(kTtftBounds), itl_s(kItlBounds), e2e_s(kE2eBounds) {}

void ServerMetrics::count_finished(FinishReason r) {
  const size_t i = r == FinishReason::Length ? 1 : r == FinishReason::Abort ? 2 : 0;
  ++finished[i];
}

std::string ServerMetrics::render(const EngineMetrics& e) const {
  std::string out;
  gauge(out, "twofold_num_requests_running", "Requests in the running batch.", e.n_running);
  gauge(out, "twofold_num_requests_waiting", "Requests waiting to be scheduled.", e.n_waiting);
  gauge(out, "twofold_kv_blocks_total", "KV cache blocks in the pool.", e.kv_blocks_total);
  gauge(out, "twofold_kv_blocks_used", "KV cache blocks held by requests.", e.kv_blocks_used);
  gauge(out, "twofold_kv_blocks_free", "KV cache blocks never used or released without a prefix hash.",
        e.kv_blocks_free);
  gauge(out, "twofold_kv_blocks_cached", "Released KV blocks kept for prefix-cache hits (evictable).",
        e.kv_blocks_cached);
  gauge(out, "twofold_kv_cache_usage_ratio", "Fraction of KV blocks held by requests.",
        e.kv_blocks_total > 0 ? double(e.kv_blocks_used) / e.kv_blocks_total : 0.0);
  counter(out, "twofold_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          e.prefix_query_tokens);
  counter(out, "twofold_prefix_cache_hits_total", "Prompt tokens served from cached KV blocks.", e.prefix_hit_tokens);
  gauge(out, "twofold_prefix_cache_hit_rate", "prefix_cache_hits_total / prefix_cache_queries_total.",
        e.prefix_query_tokens > 0 ? double(e.prefix_hit_tokens) / double(e.prefix_query_tokens) : 0.0);
  counter(out, "twofold_num_preemptions_total", "Sequences preempted (recomputed later) for lack of KV blocks.",
          e.n_preemptions);
  counter(out, "twofold_prompt_tokens_total", "Prompt tokens of finished requests.", prompt_tokens.load());
  counter(out, "twofold_generation_tokens_total", "Generated tokens.", generation_tokens.load());
  out += "# HELP twofold_request_success_total Finished requests by finish reason.\n"
         "# TYPE twofold_request_success_total counter\n";
  const char* reasons[] = {"stop", "length", "abort"};
  for (size_t i = 0; i < 3; ++i)
    out += fmt::format("twofold_request_success_total{{finished_reason=\"{}\"}} {}\n", reasons[i], finished[i].load());
  out += "# HELP twofold_requests_rejected_total Requests refused before running, by reason.\n"
         "# TYPE twofold_requests_rejected_total counter\n";
  out += fmt::format("twofold_requests_rejected_total{{reason=\"queue_full\"}} {}\n", rejected_queue_full.load());
  out += fmt::format("twofold_requests_rejected_total{{reason=\"invalid\"}} {}\n", rejected_invalid.load());
  counter(out, "twofold_requests_abandoned_total",
          "Requests aborted because the client went away (or stopped reading) before the answer ended.",
          requests_abandoned.load());
  gauge(out, "twofold_http_connections_open", "Open client connections.", http_connections_open.load());
  counter(out, "twofold_http_connections_refused_total", "Connections answered 503 because --max-connections were open.",
          http_connections_refused.load());
  ttft_s.render(out, "twofold_time_to_first_token_seconds", "Time from arrival to the first token.");
  itl_s.render(out, "twofold_inter_token_latency_seconds", "Time between consecutive tokens of a request.");
  e2e_s.render(out, "twofold_e2e_request_latency_seconds", "Time from arrival to finish.");
  return out;
}

}  // namespace tf::serve

// The server's Prometheus metrics (GET /metrics, text exposition format 0.0.4).
//
// Gauges of the engine's state come from Engine::metrics() (a snapshot the engine thread
// publishes after every step); latency histograms and token counters are recorded here by
// the engine thread as outputs appear. Every method is thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "twofold/engine.h"
#include "twofold/request.h"

namespace tf::serve {

// Cumulative buckets as Prometheus defines them: bucket i counts observations <= bounds[i],
// +Inf counts all.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Appends "# HELP", "# TYPE" and the _bucket/_sum/_count lines.
  void render(std::string& out, const std::string& name, const std::string& help) const;
  int64_t count() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<int64_t> counts_;  // [bounds.size() + 1], not cumulative; the last is +Inf
  double sum_ = 0;
  int64_t n_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();

  Histogram ttft_s;         // arrival to first token
  Histogram itl_s;          // between consecutive tokens of one request
  Histogram e2e_s;          // arrival to finish
  std::atomic<int64_t> prompt_tokens{0};
  std::atomic<int64_t> generation_tokens{0};
  std::array<std::atomic<int64_t>, 3> finished{};  // by reason: stop, length, abort
  std::atomic<int64_t> rejected_queue_full{0};      // 429s
  std::atomic<int64_t> rejected_invalid{0};         // 4xx other than 429
  std::atomic<int64_t> requests_abandoned{0};       // client gone (or not reading) before its answer ended
  std::atomic<int64_t> http_connections_open{0};
  std::atomic<int64_t> http_connections_refused{0}; // past --max-connections

  void count_finished(FinishReason r);
  // The whole exposition text, with the engine's gauges from `engine`.
  std::string render(const EngineMetrics& engine) const;
};

}  // namespace tf::serve

// The engine thread: one thread owns the Engine (which is not thread-safe) and loops
// step(); HTTP handler threads talk to it only through this class.
//
//   handler thread                         engine thread
//   submit(req) --inbox-->                 add_request (tf::Error -> back to submit)
//   stream->wait() <--RequestStream--      step(): outputs pushed to each request's stream
//   abort(stream) --inbox-->               Engine::abort (KV blocks freed at once)
//
// The engine thread sleeps on a condition variable when nothing is queued or running (no
// busy loop). After every iteration it publishes a snapshot of Engine::metrics() for
// /metrics, and it records the latency histograms as tokens appear.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "serve/metrics.h"
#include "twofold/engine.h"

namespace tf::serve {

using Clock = std::chrono::steady_clock;

// One request's outputs, in order, from the engine thread to the handler thread.
class RequestStream {
 public:
  // Blocks until outputs are available, the request finished, or `timeout` passed; moves
  // what arrived into `out` (appending). Returns false only on a timeout with nothing new.
  bool wait(std::vector<RequestOutput>& out, std::chrono::milliseconds timeout);
  bool finished() const;
  RequestId id() const { return id_; }
  // Valid once finished(): the engine's statistics of the request.
  RequestStats stats() const;
  // Non-empty when the engine failed while running this request (an internal error); the
  // stream then ends with a finished output of reason Abort.
  std::string error() const;
  // The data-parallel replica that runs it (ReplicaRouter), -1 before routing.
  int replica() const { return replica_; }

 private:
  friend class EngineLoop;
  friend class ReplicaRouter;
  void push(RequestOutput o);
  void accept(RequestId id);
  void reject(std::string error);
  void fail(std::string error);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
  RequestId id_ = -1;
  bool decided_ = false;  // the engine thread took (or refused) the request
  bool finished_ = false;
  std::string error_;     // refusal (from add_request) or an internal failure
  RequestStats stats_;
  // Engine-thread bookkeeping for the latency metrics.
  GenerateRequest request_;
  Clock::time_point arrival_, last_token_;
  bool has_token_ = false;
  int replica_ = -1;  // set once by the router before the stream is handed out
};

class EngineLoop {
 public:
  // Starts the engine thread; the loop owns the engine from now on. host_threads > 0 caps
  // the engine thread's OpenMP threads (data-parallel replicas share the cores).
  EngineLoop(std::unique_ptr<Engine> engine, ServerMetrics& metrics, int host_threads = 0);
  ~EngineLoop();  // aborts what is left and joins the thread
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Queues the request and blocks until the engine thread has added it. Throws tf::Error
  // with the engine's message if add_request refused it.
  std::shared_ptr<RequestStream> submit(GenerateRequest req);
  // Asks the engine thread to abort the request (no-op once finished).
  void abort(const RequestStream& s);
  void abort_all();

  // Immutable after construction: safe from any thread.
  const Tokenizer& tokenizer() const { return engine_->tokenizer(); }
  const ModelConfig& config() const { return engine_->config(); }
  int32_t kv_block_size() const { return block_size_; }
  int64_t kv_bytes_per_token() const { return kv_bytes_per_token_; }
  // The engine's counters after the last iteration.
  EngineMetrics metrics() const;

 private:
  void run();
  void drain_inbox();
  void deliver(std::vector<RequestOutput> outs);
  void fail_all(const std::string& error);
  void publish_metrics();

  std::unique_ptr<Engine> engine_;
  ServerMetrics& metrics_;
  int32_t block_size_;
  int64_t kv_bytes_per_token_;
  int host_threads_;

  mutable std::mutex mu_;  // guards the fields below
  std::condition_variable cv_;
  std::vector<std::shared_ptr<RequestStream>> inbox_;
  std::vector<RequestId> aborts_;
  bool abort_all_ = false;
  bool stop_ = false;
  EngineMetrics snapshot_;

  // Engine thread only.
  std::unordered_map<RequestId, std::shared_ptr<RequestStream>> live_;
  std::thread thread_;
};

}  // namespace tf::serve

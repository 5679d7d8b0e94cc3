// The engine thread: one thread owns the Engine (which is not thread-safe) and loops
// step(); other threads talk to it only through this class.
//
//   HTTP side                              engine thread
//   submit(req, notify) --inbox-->         add_request (accepted, or refused with its message)
//   stream->take() <--RequestStream--      step(): outputs pushed to each request's stream,
//                                          notify() called after each change
//   abort(stream) --inbox-->               Engine::abort (KV blocks freed at once)
//
// submit() does not wait for the engine thread, so an event-driven server never blocks on
// it: the stream says when the engine took or refused the request. The engine thread sleeps
// on a condition variable when nothing is queued or running (no busy loop). After every
// iteration it publishes a snapshot of Engine::metrics() for /metrics, and it records the
// latency histograms as tokens appear.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
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

// One request's outputs, in order, from the engine thread to the HTTP side.
class RequestStream {
 public:
  // Moves the outputs that arrived into `out` (appending); never blocks.
  void take(std::vector<RequestOutput>& out);
  // The engine thread took or refused the request.
  bool decided() const;
  // The engine refused it (add_request threw); error() says why. No output will come.
  bool refused() const;
  bool finished() const;
  // The engine's id once decided (-1 before, or when refused).
  RequestId id() const {
    std::lock_guard lock(mu_);
    return id_;
  }
  // Valid once finished(): the engine's statistics of the request.
  RequestStats stats() const;
  // The refusal, or an internal error of the engine while running the request (the stream
  // then ends with a finished output of reason Abort); empty otherwise.
  std::string error() const;
  // The data-parallel replica that runs it (ReplicaRouter), -1 before routing.
  int replica() const { return replica_; }
  // After this returns, notify is never called again (its owner may go away).
  void detach_notify();

 private:
  friend class EngineLoop;
  friend class ReplicaRouter;
  void push(RequestOutput o);
  // Records the engine's id; false when the request was aborted before (EngineLoop::abort).
  bool accept(RequestId id);
  bool cancelled() const;
  void reject(std::string error);
  void fail(std::string error);
  void notify();

  mutable std::mutex mu_;
  std::deque<RequestOutput> queue_;
  RequestId id_ = -1;
  bool decided_ = false;  // the engine thread took (or refused) the request
  bool refused_ = false;
  bool cancelled_ = false;  // aborted before the engine thread decided
  bool finished_ = false;
  std::string error_;     // refusal (from add_request) or an internal failure
  RequestStats stats_;
  // Called after every change above, under notify_mu_ (so detach_notify() can wait out a
  // call in progress).
  std::mutex notify_mu_;
  std::function<void()> notify_;
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

  // Queues the request for the engine thread and returns its stream at once; `notify` (may
  // be empty) is called from the engine thread after each change of the stream. Throws
  // tf::Error when the loop is stopping. Whether the engine took the request shows on the
  // stream (decided(), refused()).
  std::shared_ptr<RequestStream> submit(GenerateRequest req, std::function<void()> notify = {});
  // Asks the engine thread to abort the request (no-op once finished); also before the
  // engine thread took it.
  void abort(RequestStream& s);
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

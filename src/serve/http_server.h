// `twofold serve`'s HTTP front: an OpenAI-compatible API over the engine thread (or, with
// data parallelism, the engine replicas behind a ReplicaRouter; one replica otherwise).
//
//   POST /v1/completions, POST /v1/chat/completions   (streamed as Server-Sent Events or not)
//   GET  /v1/models, GET /health, GET /metrics (Prometheus text)
//
// Each connection is served by a worker thread of a pool of max_connections threads (a
// streaming response holds its worker until it ends, so the pool bounds concurrent
// streams). A handler parses and validates the request, tokenizes the prompt, and only
// then takes an admission slot and submits to the engine thread, so bad requests never
// reach the engine. Admission is bounded: at most max_running + max_waiting requests are in
// flight; past that the answer is 429 with Retry-After. A streaming client that goes away
// is noticed at the next write (a token or a keep-alive comment each second) and its
// request is aborted, which frees its KV blocks at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tf {
class ChatTemplate;
}

namespace tf::serve {

class ReplicaRouter;
class ServerMetrics;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                      // 0: any free port (bind() returns it)
  std::string served_model_name;        // the one name /v1/models lists and requests may use
  std::string api_key;                  // non-empty: /v1/* needs "Authorization: Bearer <key>"
  int32_t max_running = 64;             // the engine's max_seqs
  int32_t max_waiting = 256;            // admitted beyond max_running before 429
  size_t max_body_bytes = 8u << 20;     // larger request bodies get 413
  int32_t max_connections = 512;        // worker threads = concurrent connections served
  double grace_s = 30;                  // shutdown(): how long in-flight requests may finish
};

class HttpServer {
 public:
  // chat: the template /v1/chat/completions renders messages with; null when the model has
  // none (chat requests then get 400 saying so, as vLLM answers). Must outlive the server.
  HttpServer(ReplicaRouter& loop, const ChatTemplate* chat, ServerMetrics& metrics, ServerOptions opt);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port and returns the port (the chosen one when port is 0). Throws tf::Error.
  int bind();
  // Serves until shutdown() has finished; call after bind().
  void run();
  // Graceful stop, callable from any thread (a signal watcher): new requests get 503 at
  // once, in-flight ones may finish for grace_s, whatever is left is aborted, then run()
  // returns. Blocks until the listener is stopped.
  void shutdown();
  int32_t n_in_flight() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tf::serve

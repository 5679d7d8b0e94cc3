// `twofold serve`'s HTTP front: an OpenAI-compatible API over the engine thread (or, with
// data parallelism, the engine replicas behind a ReplicaRouter; one replica otherwise).
//
//   POST /v1/completions, POST /v1/chat/completions   (streamed as Server-Sent Events or not)
//   GET  /v1/models, GET /health, GET /metrics (Prometheus text)
//
// Event-driven (Boost.Asio and Beast): io_threads threads serve every connection, so an
// open connection or stream costs a few kilobytes, not a thread; a handler pool of
// handler_threads threads parses, renders and tokenizes requests off the I/O threads (see
// http_session.h for the life of one connection and http_request.h for what is refused
// from a request's head). A handler takes an admission slot and submits to the engine only
// after the request was validated and tokenized, so bad requests never reach the engine.
// Admission is bounded: at most max_running + max_waiting requests are in flight; past that
// the answer is 429 with Retry-After. A client that goes away, streaming or not, is noticed
// at once and its request is aborted, which frees its KV blocks. At most max_connections
// connections are open; past that a new one gets 503 and is closed. The listen backlog
// (listen_backlog, capped by the kernel's net.core.somaxconn) absorbs bursts of connects.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "serve/reasoning.h"
#include "serve/tool_calls.h"

namespace tf {
class ChatTemplate;
}

namespace tf::serve {

class ReplicaRouter;
class ServerMetrics;

// The largest TCP port; bind() refuses ports outside 0..kMaxPort.
inline constexpr int kMaxPort = 65535;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                      // 0: any free port (bind() returns it)
  std::string served_model_name;        // the one name /v1/models lists and requests may use
  std::string api_key;                  // non-empty: every path but /health needs "Authorization: Bearer <key>"
  bool open_metrics = false;            // with api_key: /metrics answers without it too
  int32_t max_running = 64;             // the engine's max_seqs
  int32_t max_waiting = 256;            // admitted beyond max_running before 429
  size_t max_body_bytes = 8u << 20;     // larger request bodies get 413, on every transfer encoding
  int32_t max_connections = 4096;       // open connections; past it 503 and close
  int32_t listen_backlog = SOMAXCONN;   // pending connects the kernel queues
  int32_t io_threads = 2;               // threads serving the sockets
  int32_t handler_threads = 0;          // threads parsing and tokenizing requests; 0: 2..8 by core count
  double read_timeout_s = 30;           // a request's head and body must arrive within this
  double keep_alive_timeout_s = 5;      // an idle connection between requests is closed after this
  double write_timeout_s = 30;          // a write the client does not take within this closes the connection
  double grace_s = 30;                  // shutdown(): how long in-flight requests may finish
  // How the model writes tool calls; nullopt: the format its chat template teaches it.
  std::optional<ToolCallFormat> tool_call_format;
  // Whether chat output's <think> block goes to reasoning_content; nullopt: Think when the chat
  // template knows </think>.
  std::optional<ReasoningFormat> reasoning_format;
  // Variables every chat render gets (--chat-template-kwargs); a request's chat_template_kwargs
  // win key by key.
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
};

class HttpServer {
 public:
  // chat: the template /v1/chat/completions renders messages with; null when the model has
  // none (chat requests then get 400 saying so, as vLLM answers). Must outlive the server.
  HttpServer(ReplicaRouter& loop, const ChatTemplate* chat, ServerMetrics& metrics, ServerOptions opt);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port, listens, and returns the port (the chosen one when port is 0). Raises
  // the process's open-file limit to fit max_connections where the hard limit allows (and
  // lowers max_connections, saying so, where it does not). Throws tf::Error.
  int bind();
  // Serves until shutdown() has finished; call after bind().
  void run();
  // Graceful stop, callable from any thread (a signal watcher): new requests get 503 at
  // once, in-flight ones may finish for grace_s, whatever is left is aborted, then idle
  // connections are closed and run() returns. Blocks until then.
  void shutdown();
  int32_t n_in_flight() const;
  int32_t max_connections() const;
  // How tool calls are found in chat output (the option, or the chat template's format).
  ToolCallFormat tool_call_format() const;
  ReasoningFormat reasoning_format() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tf::serve

// Routes, authentication, limits and graceful shutdown of the HTTP server; see http_server.h.
#include "serve/http_server.h"

#include <httplib.h>

#include <atomic>
#include <ctime>
#include <thread>

#include "core/error.h"
#include "model/config.h"
#include "serve/admission.h"
#include "serve/completion_handler.h"
#include "serve/replica_router.h"
#include "serve/http_util.h"
#include "serve/metrics.h"

namespace tf::serve {

using nlohmann::json;

struct HttpServer::Impl {
  Impl(ReplicaRouter& loop, const ChatTemplate* chat, ServerMetrics& metrics, ServerOptions o)
      : opt(std::move(o)), loop(loop), metrics(metrics), admission(opt.max_running + opt.max_waiting),
        ctx{.loop = loop, .chat = chat, .metrics = metrics, .admission = admission, .model_name = opt.served_model_name},
        created(int64_t(std::time(nullptr))) {}

  void configure();
  // Before routing: 503 while shutting down, 401 without the API key. Returns true when
  // the request was answered here.
  bool pre_route(const httplib::Request& req, httplib::Response& res);
  // Gives every error without a body (unknown path, oversized body, malformed HTTP) an
  // OpenAI-style JSON body.
  void fill_error(const httplib::Request& req, httplib::Response& res) const;
  void models(httplib::Response& res) const;

  ServerOptions opt;
  ReplicaRouter& loop;
  ServerMetrics& metrics;
  Admission admission;
  CompletionContext ctx;
  int64_t created;
  httplib::Server svr;
  std::atomic<bool> draining{false};
};

void HttpServer::Impl::configure() {
  const size_t n_workers = size_t(std::max(opt.max_connections, 1));
  svr.new_task_queue = [n_workers] { return new httplib::ThreadPool(n_workers); };
  svr.set_payload_max_length(opt.max_body_bytes);
  svr.set_keep_alive_max_count(1000);
  svr.set_tcp_nodelay(true);  // one token per SSE event: do not let Nagle batch them
  // httplib's default sets SO_REUSEPORT, which lets a second server bind the same port and
  // silently share its connections; SO_REUSEADDR alone still allows a quick restart.
  svr.set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return pre_route(req, res) ? httplib::Server::HandlerResponse::Handled
                               : httplib::Server::HandlerResponse::Unhandled;
  });
  svr.set_error_handler([this](const httplib::Request& req, httplib::Response& res) { fill_error(req, res); });
  svr.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, ApiError(500, "internal server error: " + what, "server_error"));
  });
  svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_completion(ctx, Endpoint::Completions, req, res);
  });
  svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_completion(ctx, Endpoint::Chat, req, res);
  });
  svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { models(res); });
  svr.Get("/health", [](const httplib::Request&, httplib::Response& res) { send_json(res, 200, {{"status", "ok"}}); });
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::string text = metrics.render(loop.metrics());
    if (loop.size() > 1) text += loop.render_replica_metrics();  // data parallel: per replica too
    res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
  });
}

bool HttpServer::Impl::pre_route(const httplib::Request& req, httplib::Response& res) {
  if (draining) {
    res.set_header("Connection", "close");
    send_error(res, ApiError(503, "the server is shutting down", "server_error", std::nullopt, "shutting_down"));
    return true;
  }
  // /health and /metrics stay open for probes and scrapers, as in vLLM.
  if (opt.api_key.empty() || req.path == "/health" || req.path == "/metrics") return false;
  if (req.get_header_value("Authorization") == "Bearer " + opt.api_key) return false;
  send_error(res, ApiError(401, "missing or incorrect API key: send the header 'Authorization: Bearer <key>'",
                           "invalid_request_error", std::nullopt, "invalid_api_key"));
  return true;
}

void HttpServer::Impl::fill_error(const httplib::Request& req, httplib::Response& res) const {
  if (!res.body.empty()) return;  // a handler already wrote its error
  if (res.status == 404) {
    send_error(res, ApiError(404, "not found: " + req.method + " " + req.path, "invalid_request_error",
                             std::nullopt, "not_found"));
  } else if (res.status == 413) {
    send_error(res, ApiError(413, "the request body is larger than the limit of " + std::to_string(opt.max_body_bytes) +
                                      " bytes (--max-body-bytes)",
                             "invalid_request_error", std::nullopt, "request_too_large"));
  } else {
    send_error(res, ApiError(res.status, "malformed HTTP request", "invalid_request_error"));
  }
}

void HttpServer::Impl::models(httplib::Response& res) const {
  const json model{{"id", opt.served_model_name}, {"object", "model"}, {"created", created},
                   {"owned_by", "twofold"}, {"max_model_len", loop.config().max_position}};
  send_json(res, 200, {{"object", "list"}, {"data", json::array({model})}});
}

HttpServer::HttpServer(ReplicaRouter& loop, const ChatTemplate* chat, ServerMetrics& metrics, ServerOptions opt)
    : impl_(std::make_unique<Impl>(loop, chat, metrics, std::move(opt))) {
  impl_->configure();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  const ServerOptions& o = impl_->opt;
  int port = o.port;
  if (o.port == 0) {
    port = impl_->svr.bind_to_any_port(o.host);
    if (port < 0) fail("cannot bind to {} on any port", o.host);
  } else if (!impl_->svr.bind_to_port(o.host, o.port)) {
    fail("cannot bind to {}:{} (in use, or not an address of this machine?)", o.host, o.port);
  }
  return port;
}

void HttpServer::run() { impl_->svr.listen_after_bind(); }

// New requests are refused first (503), so the in-flight count can only fall; requests
// still running after the grace period are aborted (they end with finish_reason "abort"),
// and only then is the listener stopped, so no stream is cut mid-write.
void HttpServer::shutdown() {
  impl_->draining = true;
  const auto grace = std::chrono::duration<double>(impl_->opt.grace_s);
  if (!impl_->admission.wait_idle(grace)) {
    std::fprintf(stderr, "twofold serve: %d requests still running after %.0f s; aborting them\n",
                 impl_->admission.in_flight(), impl_->opt.grace_s);
    impl_->loop.abort_all();
    impl_->admission.wait_idle(std::chrono::seconds(10));
  }
  // A signal may come before run() started listening; stop() would then be a no-op.
  for (int i = 0; i < 1000 && !impl_->svr.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  impl_->svr.stop();
}

int32_t HttpServer::n_in_flight() const { return impl_->admission.in_flight(); }

}  // namespace tf::serve

// Helpers for the server tests: an in-process server on a free loopback port over the
// bundled tiny model, SSE parsing, and reading one value out of /metrics.
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "chat/chat_template.h"
#include "serve/engine_loop.h"
#include "serve/http_server.h"
#include "serve/replica_router.h"
#include "serve/metrics.h"
#include "test_util.h"
#include "twofold/engine.h"

namespace tf::test {

inline const std::string kTinyModel = model_dir("tiny-main");
// tiny-main has no chat template; the servers here render chats with the bundled ChatML one,
// as README's `serve --chat-template examples/chatml.jinja` does.
inline std::optional<ChatTemplate> bundled_chatml() {
  return ChatTemplate::from_file(source_path("examples/chatml.jinja"), kTinyModel);
}

// An engine thread (or `replicas` of them, data parallel) and HTTP server running in this
// process until destroyed (which drains it as SIGTERM would, with the given grace period).
// `chat`: the chat template (nullopt: none, as tiny-main's own folder gives).
class TestServer {
 public:
  explicit TestServer(serve::ServerOptions opt = {}, EngineOptions eng = {}, int replicas = 1,
                      std::optional<ChatTemplate> chat = bundled_chatml())
      : chat_(std::move(chat)) {
    eng.model_dir = kTinyModel;
    opt.host = "127.0.0.1";
    opt.port = 0;
    if (opt.served_model_name.empty()) opt.served_model_name = "tiny-main";
    opt.max_running = eng.max_seqs * replicas;
    std::vector<std::unique_ptr<serve::EngineLoop>> loops;
    for (int i = 0; i < replicas; ++i)
      loops.push_back(std::make_unique<serve::EngineLoop>(std::make_unique<Engine>(eng), metrics_));
    router_ = std::make_unique<serve::ReplicaRouter>(std::move(loops));
    server_ = std::make_unique<serve::HttpServer>(*router_, chat_ ? &*chat_ : nullptr, metrics_, opt);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->run(); });
  }
  ~TestServer() {
    if (thread_.joinable()) {
      server_->shutdown();
      thread_.join();
    }
  }
  // Graceful stop now (blocks until the listener stopped), as SIGTERM does.
  void shutdown() {
    server_->shutdown();
    thread_.join();
  }
  int port() const { return port_; }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  serve::HttpServer& server() { return *server_; }
  serve::ReplicaRouter& router() { return *router_; }

 private:
  std::optional<ChatTemplate> chat_;
  serve::ServerMetrics metrics_;
  std::unique_ptr<serve::ReplicaRouter> router_;
  std::unique_ptr<serve::HttpServer> server_;
  std::thread thread_;
  int port_ = 0;
};

struct HttpReply {
  int status = 0;  // 0: no response (connection failed)
  nlohmann::json body;
  std::string text;
  httplib::Headers headers;
};

inline HttpReply post(httplib::Client& c, const std::string& path, const std::string& body,
                      const httplib::Headers& headers = {}) {
  HttpReply r;
  auto res = c.Post(path.c_str(), headers, body, "application/json");
  if (!res) return r;
  r.status = res->status;
  r.text = res->body;
  r.headers = res->headers;
  r.body = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  return r;
}
inline HttpReply post(httplib::Client& c, const std::string& path, const nlohmann::json& body,
                      const httplib::Headers& headers = {}) {
  return post(c, path, body.dump(), headers);
}

// The JSON payloads of "data: ..." events, stopping at "data: [DONE]" (done = seen).
inline std::vector<nlohmann::json> parse_sse(const std::string& text, bool* done) {
  std::vector<nlohmann::json> events;
  *done = false;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) != 0) continue;
    const std::string payload = line.substr(6);
    if (payload == "[DONE]") {
      *done = true;
      break;
    }
    events.push_back(nlohmann::json::parse(payload));
  }
  return events;
}

// The value of an unlabelled sample in Prometheus text ("name value" lines); -1 if absent.
inline double metric(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  return -1;
}

inline std::string get_metrics(const TestServer& s) {
  auto c = s.client();
  auto res = c.Get("/metrics");
  return res ? res->body : "";
}

// Polls /metrics until `name` equals `value` or ~30 s pass (a generous bound, not a timing
// assertion: the condition is what the test checks). Returns the last value seen.
inline double wait_metric(const TestServer& s, const std::string& name, double value) {
  double v = -1;
  for (int i = 0; i < 3000; ++i) {
    v = metric(get_metrics(s), name);
    if (v == value) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return v;
}

}  // namespace tf::test

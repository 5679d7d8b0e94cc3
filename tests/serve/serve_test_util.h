// Helpers for the server tests: an in-process server on a free loopback port over the
// bundled tiny model, a raw TCP client for bytes no HTTP client sends, SSE parsing, and
// reading one value out of /metrics.
#pragma once

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>

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

// One TCP connection to 127.0.0.1:port, written and read as raw bytes.
class RawConn {
 public:
  explicit RawConn(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawConn() { close(); }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  bool connected() const { return connected_; }
  // False once the peer is gone (the write failed).
  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(size_t(n));
    }
    return true;
  }
  // Reads until done(received) holds, the peer closes, or timeout_s pass; returns all
  // received so far (also kept in received()).
  const std::string& read_until(const std::function<bool(const std::string&)>& done, double timeout_s = 60) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (!done(in_) && !eof_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, int(left.count())) <= 0) continue;
      char buf[16384];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) eof_ = true;
      else in_.append(buf, size_t(n));
    }
    return in_;
  }
  // Reads until the peer closes (true) or timeout_s pass (false).
  bool wait_closed(double timeout_s = 60) {
    read_until([](const std::string&) { return false; }, timeout_s);
    return eof_;
  }
  // Reads one whole response (Content-Length or chunked body) off the front of what came.
  struct Reply {
    int status = 0;  // 0: none came
    std::string head, body;
    nlohmann::json json() const { return nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false); }
  };
  Reply read_reply(double timeout_s = 60) {
    Reply r;
    read_until([](const std::string& s) { return s.find("\r\n\r\n") != std::string::npos; }, timeout_s);
    const size_t end_head = in_.find("\r\n\r\n");
    if (end_head == std::string::npos) return r;
    r.head = in_.substr(0, end_head + 4);
    r.status = std::atoi(r.head.c_str() + 9);
    if (r.status == 100) {  // "100 Continue": the answer follows
      in_.erase(0, end_head + 4);
      return read_reply(timeout_s);
    }
    std::string lower = r.head;
    for (char& c : lower) c = char(std::tolower(uint8_t(c)));
    size_t pos = end_head + 4;
    if (lower.find("transfer-encoding: chunked") != std::string::npos) {
      for (;;) {
        read_until([&](const std::string& s) { return s.find("\r\n", pos) != std::string::npos; }, timeout_s);
        const size_t eol = in_.find("\r\n", pos);
        if (eol == std::string::npos) break;
        const size_t n = std::stoul(in_.substr(pos, eol - pos), nullptr, 16);
        read_until([&](const std::string& s) { return s.size() >= eol + 2 + n + 2; }, timeout_s);
        r.body += in_.substr(eol + 2, n);
        pos = eol + 2 + n + 2;
        if (n == 0) break;
      }
    } else {
      const size_t cl = lower.find("content-length: ");
      const size_t n = cl == std::string::npos ? 0 : std::stoul(lower.substr(cl + 16));
      read_until([&](const std::string& s) { return s.size() >= pos + n; }, timeout_s);
      r.body = in_.substr(pos, n);
      pos += n;
    }
    in_.erase(0, std::min(pos, in_.size()));
    return r;
  }
  const std::string& received() const { return in_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string in_;
};

// The bytes of a POST with a Content-Length body.
inline std::string raw_post(const std::string& path, const std::string& body,
                            const std::string& content_type = "application/json", const std::string& extra = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: " + content_type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra + "\r\n" + body;
}

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

// One client connection of `twofold serve` (Boost.Asio / Beast, event-driven: no thread is
// held by a connection, so thousands of open streams cost memory only).
//
// A connection loops over requests (HTTP/1.1 keep-alive):
//
//   wait for the first byte (keep-alive timeout; the first request: read timeout)
//   -> read the head (read timeout for head and body together)
//   -> check_head (http_request.h): a refusal is answered and the connection closed
//   -> "100 Continue" if the client asked -> read the body (the parser holds it to the limit)
//   -> GET routes answer at once; generation routes go to the handler pool (parse,
//      tokenize, admit, submit: never on an I/O thread) and come back as a Completion
//   -> the Completion's updates (the engine's notify posts them to this connection's
//      strand) are written as one JSON response or as Server-Sent Events (chunked), with a
//      keep-alive comment each second a stream has nothing else to say
//   -> the next request, or close.
//
// While a request generates, the connection watches its socket: the client closing it (or
// resetting it) is seen at once, for non-streamed requests too, and aborts the request,
// which frees its KV blocks and admission slot. A client that half-closes its side after
// sending the request is taken as gone. Bytes the client pipelines meanwhile are kept for
// the next request (up to a bound, after which watching stops). A write that does not
// finish within the write timeout (a client that stopped reading) closes the connection.
// Refusals and errors after which the request's body is left unread end with a lingering
// close (send the answer, shut down sending, drain what the client still sends for a
// moment), so the client reads the answer instead of a connection reset.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/serializer.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "serve/completion_handler.h"
#include "serve/http_request.h"

namespace tf::serve {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// Engine threads post to connections only while the gate is open; the server closes it
// before its io_context goes away.
struct NotifyGate {
  std::mutex mu;
  bool open = true;
};

class HttpSession;

// What every connection shares; owned by the HttpServer.
struct SessionShared {
  RequestRules rules;
  std::chrono::milliseconds read_timeout{30000};      // a whole request, head and body
  std::chrono::milliseconds keep_alive_timeout{5000};  // idle between requests
  std::chrono::milliseconds write_timeout{30000};     // each write to the client
  int32_t max_connections = 4096;
  CompletionContext* completions = nullptr;
  asio::thread_pool* handler_pool = nullptr;
  std::shared_ptr<NotifyGate> gate = std::make_shared<NotifyGate>();
  // GET /v1/models and GET /metrics bodies.
  std::function<std::string()> models_json, metrics_text;
  std::atomic<bool> draining{false};
  std::atomic<int32_t> n_connections{0};  // open sessions that are not refusals
  std::atomic<int32_t> n_busy{0};         // sessions between a request's first byte and its answer
  ServerMetrics* metrics = nullptr;

  // Every open session, so that shutdown can close the idle ones.
  std::mutex sessions_mu;
  std::list<std::weak_ptr<HttpSession>> sessions;
};

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  // refuse: answer 503 (too many connections) and close, without reading a request.
  HttpSession(tcp::socket socket, SessionShared& shared, bool refuse);
  ~HttpSession();
  HttpSession(const HttpSession&) = delete;
  HttpSession& operator=(const HttpSession&) = delete;

  void start();
  // Closes the connection if no request is in progress (graceful shutdown).
  void close_if_idle();

 private:
  using Response = http::response<http::string_body>;

  // Reading a request.
  void wait_request();
  void read_head();
  void on_head(boost::beast::error_code ec);
  void read_body();
  void on_body(boost::beast::error_code ec);
  void on_read_error(boost::beast::error_code ec);
  void dispatch();
  // Generating.
  void start_generation(Route route, std::string body);
  // /tokenize, /detokenize: answered from the handler pool.
  void start_tokenize(Route route, std::string body);
  void on_started(std::shared_ptr<Completion> c, std::optional<ApiError> error);
  std::function<void()> notifier();
  void on_notify();
  void watch_peer();
  void on_peer_readable(boost::beast::error_code ec, uint64_t exchange);
  void tick(uint64_t exchange);
  // Writing.
  void send(Response res, bool close_after);
  void send_error(const ApiError& e, bool close_after);
  void begin_stream();
  void write_stream();
  void on_stream_written(boost::beast::error_code ec, bool last);
  void finish_exchange();
  void linger_close();
  void drain(std::shared_ptr<std::array<char, 8192>> scratch, size_t total);
  void close();
  // Deadlines: one timer for whichever read or write phase is under way.
  void arm(std::chrono::milliseconds d);
  void disarm();

  SessionShared& shared_;
  tcp::socket socket_;
  asio::steady_timer deadline_, ticker_;
  uint64_t deadline_gen_ = 0;
  boost::beast::flat_buffer buffer_;
  std::optional<RequestParser> parser_;
  Route route_ = Route::NotFound;
  unsigned version_ = 11;  // the request's HTTP version (11: 1.1), answered in kind
  bool refuse_ = false;
  bool counted_ = false;   // counts in shared_.n_connections
  bool first_request_ = true;
  bool busy_ = false;      // between a request's first byte and the end of its answer
  bool keep_alive_ = false;
  bool closed_ = false;
  // The generation in progress.
  std::shared_ptr<Completion> completion_;
  uint64_t exchange_ = 0;  // bumped when an exchange ends: stale handlers see the change
  bool watching_ = false;
  // Writes: one at a time. Whole responses go out from res_; a stream writes its header from
  // stream_sr_, then its events as chunks from writing_ while pending_ collects the next.
  std::optional<Response> res_;
  http::response<http::empty_body> stream_head_;
  std::optional<http::response_serializer<http::empty_body>> stream_sr_;
  std::string pending_, writing_;
  bool streaming_ = false, stream_done_ = false, write_busy_ = false;
  std::chrono::steady_clock::time_point last_write_;
  std::list<std::weak_ptr<HttpSession>>::iterator registry_it_;
  bool registered_ = false;
};

}  // namespace tf::serve

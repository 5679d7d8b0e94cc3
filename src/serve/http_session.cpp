// One client connection; see http_session.h for the life of a request on it.
#include "serve/http_session.h"


#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include <array>

#include "serve/metrics.h"
#include "serve/openai_response.h"
#include "serve/tokenize_handler.h"

namespace tf::serve {
namespace {

namespace beast = boost::beast;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kTick = 1s;                   // a stream silent this long gets a keep-alive comment
constexpr size_t kMaxPipelined = 64 << 10;   // bytes kept from a client while its request generates
constexpr auto kLinger = 2s;                 // a lingering close drains this long at most
constexpr size_t kLingerBytes = 64u << 20;   // ... or this many bytes
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

}  // namespace

HttpSession::HttpSession(tcp::socket socket, SessionShared& shared, bool refuse)
    : shared_(shared), socket_(std::move(socket)), deadline_(socket_.get_executor()),
      ticker_(socket_.get_executor()), buffer_(shared.rules.max_header_bytes + kMaxPipelined), refuse_(refuse) {
  if (refuse_) {
    ++shared_.metrics->http_connections_refused;
  } else {
    ++shared_.n_connections;
    ++shared_.metrics->http_connections_open;
    counted_ = true;
  }
  beast::error_code ec;
  socket_.set_option(tcp::no_delay(true), ec);  // one token per event: do not let Nagle batch them
  socket_.non_blocking(true, ec);               // on_peer_readable reads only what is there
}

HttpSession::~HttpSession() {
  completion_.reset();  // aborts a request that has not finished
  if (busy_) --shared_.n_busy;
  if (counted_) {
    --shared_.n_connections;
    --shared_.metrics->http_connections_open;
  }
  if (registered_) {
    std::lock_guard lock(shared_.sessions_mu);
    shared_.sessions.erase(registry_it_);
  }
}

void HttpSession::start() {
  {
    std::lock_guard lock(shared_.sessions_mu);
    shared_.sessions.push_back(weak_from_this());
    registry_it_ = std::prev(shared_.sessions.end());
    registered_ = true;
  }
  asio::dispatch(socket_.get_executor(), [self = shared_from_this()] {
    if (!self->refuse_) return self->wait_request();
    self->send_error(ApiError(503,
                              "too many open connections (the server holds at most " +
                                  std::to_string(self->shared_.max_connections) + ", --max-connections); retry later",
                              "server_error", std::nullopt, "too_many_connections"),
                     /*close_after=*/true);
  });
}

void HttpSession::close_if_idle() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    if (!self->busy_) self->close();
  });
}

// ---- reading a request ----------------------------------------------------------------------

void HttpSession::wait_request() {
  if (closed_) return;
  parser_.emplace();
  limit_parser(*parser_, shared_.rules);
  version_ = 11;
  if (buffer_.size() > 0) return read_head();  // pipelined bytes are already here
  arm(first_request_ ? shared_.read_timeout : shared_.keep_alive_timeout);
  socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
    if (self->closed_) return;
    if (ec) return self->close();
    self->read_head();
  });
}

void HttpSession::read_head() {
  busy_ = true;
  ++shared_.n_busy;
  first_request_ = false;
  arm(shared_.read_timeout);  // for the head and the body together
  http::async_read_header(socket_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) { self->on_head(ec); });
}

void HttpSession::on_head(beast::error_code ec) {
  if (closed_) return;
  if (ec) return on_read_error(ec);
  const HttpRequest& head = parser_->get();
  version_ = head.version();
  route_ = route_of(head.method(), head.target());
  keep_alive_ = head.keep_alive();
  if (std::optional<ApiError> refusal = check_head(head, route_, shared_.rules, shared_.draining))
    return send_error(*refusal, /*close_after=*/!parser_->is_done());
  if (parser_->is_done()) return dispatch();
  if (beast::iequals(head[http::field::expect], "100-continue")) {
    asio::async_write(socket_, asio::buffer(kContinue.data(), kContinue.size()),
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        if (self->closed_) return;
                        if (ec) return self->close();
                        self->read_body();
                      });
    return;
  }
  read_body();
}

void HttpSession::read_body() {
  http::async_read(socket_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
}

void HttpSession::on_body(beast::error_code ec) {
  if (closed_) return;
  if (ec) return on_read_error(ec);
  dispatch();
}

// A client gone (or past the read timeout) is closed; bytes the parser refused get their 4xx.
void HttpSession::on_read_error(beast::error_code ec) {
  if (is_disconnect(ec)) return close();
  send_error(parse_failure(ec, shared_.rules), /*close_after=*/true);
}

void HttpSession::dispatch() {
  disarm();
  HttpRequest req = parser_->release();
  auto reply = [&](std::string body, const char* type) {
    Response res{http::status::ok, version_};
    res.set(http::field::content_type, type);
    res.body() = std::move(body);
    send(std::move(res), /*close_after=*/false);
  };
  switch (route_) {
    case Route::Health:
      return reply(R"({"status":"ok"})", "application/json");
    case Route::Models:
      return reply(shared_.models_json(), "application/json");
    case Route::Metrics:
      return reply(shared_.metrics_text(), "text/plain; version=0.0.4; charset=utf-8");
    case Route::Completions:
    case Route::Chat:
      return start_generation(route_, std::move(req.body()));
    case Route::Tokenize:
    case Route::Detokenize:
      return start_tokenize(route_, std::move(req.body()));
    case Route::NotFound:
    case Route::WrongMethod:
      break;  // refused by check_head
  }
}

// ---- generating -----------------------------------------------------------------------------

// Parsing, the chat template and tokenization run on the handler pool, never on an I/O
// thread; the result comes back to this connection's strand.
void HttpSession::start_generation(Route route, std::string body) {
  const Endpoint endpoint = route == Route::Chat ? Endpoint::Chat : Endpoint::Completions;
  asio::post(*shared_.handler_pool, [self = shared_from_this(), endpoint, body = std::move(body),
                                     notify = notifier()]() mutable {
    std::shared_ptr<Completion> c;
    std::optional<ApiError> error;
    try {
      c = Completion::start(*self->shared_.completions, endpoint, body, std::move(notify));
    } catch (const ApiError& e) {
      error = e;
    } catch (const std::exception& e) {
      error = ApiError(500, std::string("internal server error: ") + e.what(), "server_error");
    }
    asio::post(self->socket_.get_executor(), [self, c = std::move(c), error = std::move(error)]() mutable {
      self->on_started(std::move(c), std::move(error));
    });
  });
}

void HttpSession::start_tokenize(Route route, std::string body) {
  asio::post(*shared_.handler_pool, [self = shared_from_this(), route, body = std::move(body)]() mutable {
    std::string reply;
    std::optional<ApiError> error;
    try {
      reply = route == Route::Tokenize ? tokenize_response(*self->shared_.completions, body)
                                       : detokenize_response(*self->shared_.completions, body);
    } catch (const ApiError& e) {
      error = e;
    } catch (const std::exception& e) {
      error = ApiError(500, std::string("internal server error: ") + e.what(), "server_error");
    }
    asio::post(self->socket_.get_executor(), [self, reply = std::move(reply), error = std::move(error)]() mutable {
      if (self->closed_) return;
      if (error) return self->send_error(*error, /*close_after=*/false);
      Response res{http::status::ok, self->version_};
      res.set(http::field::content_type, "application/json");
      res.body() = std::move(reply);
      self->send(std::move(res), /*close_after=*/false);
    });
  });
}

void HttpSession::on_started(std::shared_ptr<Completion> c, std::optional<ApiError> error) {
  if (closed_) return;  // the client left meanwhile: dropping `c` aborts the request
  if (error) return send_error(*error, /*close_after=*/false);
  completion_ = std::move(c);
  watch_peer();
  on_notify();  // what the engine said before the completion was installed here
}

std::function<void()> HttpSession::notifier() {
  return [weak = weak_from_this(), ex = socket_.get_executor(), gate = shared_.gate] {
    std::lock_guard lock(gate->mu);
    if (!gate->open) return;
    asio::post(ex, [weak] {
      if (auto self = weak.lock()) self->on_notify();
    });
  };
}

void HttpSession::on_notify() {
  if (closed_ || !completion_) return;
  CompletionUpdate u = completion_->poll();
  switch (u.kind) {
    case CompletionUpdate::Kind::None:
      return;
    case CompletionUpdate::Kind::Error:
      return send_error(*u.error, /*close_after=*/false);
    case CompletionUpdate::Kind::Body: {
      Response res{http::int_to_status(unsigned(u.status)), version_};
      res.set(http::field::content_type, "application/json");
      res.body() = std::move(u.bytes);
      return send(std::move(res), /*close_after=*/false);
    }
    case CompletionUpdate::Kind::Events:
      pending_ += u.bytes;
      stream_done_ = stream_done_ || u.finished;
      if (!streaming_) return begin_stream();
      return write_stream();
  }
}

// Waits for the socket to become readable while the request generates: end of file or an
// error means the client is gone; bytes are kept for the next request.
void HttpSession::watch_peer() {
  watching_ = true;
  socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this(), exchange = exchange_](beast::error_code ec) {
    self->on_peer_readable(ec, exchange);
  });
}

void HttpSession::on_peer_readable(beast::error_code ec, uint64_t exchange) {
  if (closed_ || exchange != exchange_) return;  // a later exchange, or cancelled by finish_exchange
  watching_ = false;
  if (ec) return;
  const size_t room = std::min(buffer_.max_size() - buffer_.size(), size_t(4096));
  if (buffer_.size() >= kMaxPipelined || room == 0) return;  // stop watching: memory stays bounded
  beast::error_code rec;
  const size_t n = socket_.read_some(buffer_.prepare(room), rec);
  if (rec == asio::error::would_block || rec == asio::error::try_again) return watch_peer();
  if (rec) return close();
  buffer_.commit(n);
  watch_peer();
}

void HttpSession::tick(uint64_t exchange) {
  ticker_.expires_after(kTick);
  ticker_.async_wait([self = shared_from_this(), exchange](beast::error_code ec) {
    if (ec || self->closed_ || exchange != self->exchange_ || !self->streaming_) return;
    if (!self->write_busy_ && self->pending_.empty() && !self->stream_done_ && Clock::now() - self->last_write_ >= kTick) {
      self->pending_ = ": keep-alive\n\n";
      self->write_stream();
    }
    self->tick(exchange);
  });
}

// ---- writing --------------------------------------------------------------------------------

void HttpSession::send(Response res, bool close_after) {
  if (closed_) return;
  const bool close = close_after || !keep_alive_ || shared_.draining;
  res.set(http::field::server, "twofold");
  res.keep_alive(!close);
  res.prepare_payload();
  res_ = std::move(res);
  arm(shared_.write_timeout);
  http::async_write(socket_, *res_, [self = shared_from_this(), close](beast::error_code ec, size_t) {
    if (self->closed_) return;
    self->disarm();
    if (ec) return self->close();
    self->res_.reset();
    if (close) return self->linger_close();
    self->finish_exchange();
  });
}

void HttpSession::send_error(const ApiError& e, bool close_after) {
  Response res{http::int_to_status(unsigned(e.status())), version_};
  res.set(http::field::content_type, "application/json");
  if (e.status() == 429) res.set(http::field::retry_after, "1");
  if (e.status() == 405) res.set(http::field::allow, allowed_method(parser_->get().target()));
  res.body() = dump(e.to_json());
  send(std::move(res), close_after);
}

// The stream's header; HTTP/1.0 clients get the events unchunked, ended by closing.
void HttpSession::begin_stream() {
  streaming_ = true;
  const bool chunked = version_ >= 11;
  if (!chunked) keep_alive_ = false;
  stream_head_ = {};
  stream_head_.version(version_);
  stream_head_.result(http::status::ok);
  stream_head_.set(http::field::server, "twofold");
  stream_head_.set(http::field::content_type, "text/event-stream");
  stream_head_.set(http::field::cache_control, "no-cache");
  stream_head_.keep_alive(keep_alive_ && !shared_.draining);
  stream_head_.chunked(chunked);
  stream_sr_.emplace(stream_head_);
  write_busy_ = true;
  arm(shared_.write_timeout);
  http::async_write_header(socket_, *stream_sr_, [self = shared_from_this()](beast::error_code ec, size_t) {
    self->on_stream_written(ec, /*last=*/false);
  });
  tick(exchange_);
}

void HttpSession::write_stream() {
  if (closed_ || write_busy_) return;
  const bool chunked = stream_head_.chunked();
  auto done = [self = shared_from_this()](beast::error_code ec, size_t) { self->on_stream_written(ec, /*last=*/false); };
  if (!pending_.empty()) {
    writing_ = std::move(pending_);
    pending_.clear();
    write_busy_ = true;
    arm(shared_.write_timeout);
    if (chunked) asio::async_write(socket_, http::make_chunk(asio::buffer(writing_)), std::move(done));
    else asio::async_write(socket_, asio::buffer(writing_), std::move(done));
    return;
  }
  if (!stream_done_) return;
  if (!chunked) return linger_close();
  write_busy_ = true;
  stream_done_ = false;  // the last chunk goes out once
  arm(shared_.write_timeout);
  asio::async_write(socket_, http::make_chunk_last(), [self = shared_from_this()](beast::error_code ec, size_t) {
    self->on_stream_written(ec, /*last=*/true);
  });
}

// A stream write finished: the header or events (then write what has come since), or the
// last chunk (then the exchange is over).
void HttpSession::on_stream_written(beast::error_code ec, bool last) {
  if (closed_) return;
  disarm();
  write_busy_ = false;
  if (ec) return close();
  if (last) return finish_exchange();
  last_write_ = Clock::now();
  write_stream();
}

// The answer is out: forget the exchange and read the next request (or close).
void HttpSession::finish_exchange() {
  ++exchange_;
  completion_.reset();
  beast::error_code ec;
  if (watching_) socket_.cancel(ec);  // the watch; no other operation is pending now
  watching_ = false;
  ticker_.cancel();
  streaming_ = stream_done_ = false;
  pending_.clear();
  writing_.clear();
  stream_sr_.reset();
  if (busy_) {
    busy_ = false;
    --shared_.n_busy;
  }
  if (!keep_alive_ || shared_.draining) return linger_close();
  wait_request();
}

// Send side shut, then read and drop what the client still sends (for kLinger at most), so
// that closing does not reset the connection before the client read the answer.
void HttpSession::linger_close() {
  if (closed_) return;
  ++exchange_;
  completion_.reset();
  ticker_.cancel();
  if (busy_) {
    busy_ = false;
    --shared_.n_busy;
  }
  beast::error_code ec;
  if (watching_) socket_.cancel(ec);
  watching_ = false;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  arm(std::chrono::duration_cast<std::chrono::milliseconds>(kLinger));
  drain(std::make_shared<std::array<char, 8192>>(), 0);
}

void HttpSession::drain(std::shared_ptr<std::array<char, 8192>> scratch, size_t total) {
  socket_.async_read_some(asio::buffer(*scratch), [self = shared_from_this(), scratch, total](beast::error_code ec,
                                                                                            size_t n) {
    if (self->closed_) return;
    if (ec || total + n > kLingerBytes) return self->close();
    self->drain(scratch, total + n);
  });
}

void HttpSession::close() {
  if (closed_) return;
  closed_ = true;
  ++exchange_;
  if (completion_ && !completion_->finished()) ++shared_.metrics->requests_abandoned;
  completion_.reset();  // aborts an unfinished request: its KV blocks are freed at once
  ++deadline_gen_;
  deadline_.cancel();
  ticker_.cancel();
  beast::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  if (busy_) {
    busy_ = false;
    --shared_.n_busy;
  }
}

void HttpSession::arm(std::chrono::milliseconds d) {
  deadline_.expires_after(d);
  deadline_.async_wait([self = shared_from_this(), gen = ++deadline_gen_](beast::error_code ec) {
    if (ec || gen != self->deadline_gen_ || self->closed_) return;
    self->close();
  });
}

void HttpSession::disarm() {
  ++deadline_gen_;
  deadline_.cancel();
}

}  // namespace tf::serve

// Listening, accepting, the connection limit and graceful shutdown; see http_server.h.
#include "serve/http_server.h"

#include <sys/resource.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <ctime>
#include <thread>
#include <vector>

#include "chat/chat_template.h"
#include "core/error.h"
#include "model/config.h"
#include "serve/admission.h"
#include "serve/completion_handler.h"
#include "serve/http_session.h"
#include "serve/metrics.h"
#include "serve/openai_response.h"
#include "serve/replica_router.h"

namespace tf::serve {
namespace {

namespace beast = boost::beast;
using namespace std::chrono_literals;

std::chrono::milliseconds ms(double s) { return std::chrono::milliseconds(int64_t(s * 1000)); }

int32_t default_handler_threads() {
  return int32_t(std::clamp(std::thread::hardware_concurrency(), 2u, 8u));
}

// Polls `done` every 10 ms for up to `limit`; true if it became true.
template <typename F>
bool wait_until(F done, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

}  // namespace

struct HttpServer::Impl {
  Impl(ReplicaRouter& loop, const ChatTemplate* chat, ServerMetrics& metrics, ServerOptions o)
      : opt(std::move(o)), loop(loop), metrics(metrics), admission(opt.max_running + opt.max_waiting),
        ctx{.loop = loop, .chat = chat, .metrics = metrics, .admission = admission, .model_name = opt.served_model_name,
            .tool_format = opt.tool_call_format.value_or(chat ? tool_call_format_of_template(chat->source())
                                                              : ToolCallFormat::None),
            .reasoning_format = opt.reasoning_format.value_or(chat ? reasoning_format_of_template(chat->source())
                                                                   : ReasoningFormat::None),
            .template_kwargs = opt.chat_template_kwargs},
        created(int64_t(std::time(nullptr))),
        pool(size_t(opt.handler_threads > 0 ? opt.handler_threads : default_handler_threads())) {
    shared.rules = RequestRules{.max_body_bytes = opt.max_body_bytes, .api_key = opt.api_key,
                                .open_metrics = opt.open_metrics};
    shared.read_timeout = ms(opt.read_timeout_s);
    shared.keep_alive_timeout = ms(opt.keep_alive_timeout_s);
    shared.write_timeout = ms(opt.write_timeout_s);
    shared.max_connections = std::max(opt.max_connections, 1);
    shared.completions = &ctx;
    shared.handler_pool = &pool;
    shared.metrics = &metrics;
    shared.models_json = [this] { return models_json(); };
    shared.metrics_text = [this] {
      std::string text = this->metrics.render(this->loop.metrics());
      if (this->loop.size() > 1) text += this->loop.render_replica_metrics();  // data parallel: per replica too
      return text;
    };
  }
  // Engine threads stop posting first, the handler pool drains, then the io_context (and
  // with it every connection still open) goes.
  ~Impl() {
    {
      std::lock_guard lock(shared.gate->mu);
      shared.gate->open = false;
    }
    pool.join();
  }

  void accept();
  std::string models_json() const;
  void raise_fd_limit();

  ServerOptions opt;
  ReplicaRouter& loop;
  ServerMetrics& metrics;
  Admission admission;
  CompletionContext ctx;
  int64_t created;
  SessionShared shared;
  asio::thread_pool pool;
  // Declared last, destroyed first: connections it still holds use the members above.
  asio::io_context io;
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_retry{io};
  // The acceptor and its retry timer are used only on this strand (accept's handlers and
  // shutdown's close), so closing never races an accept completing on another I/O thread.
  asio::strand<asio::io_context::executor_type> accept_strand{asio::make_strand(io)};
};

std::string HttpServer::Impl::models_json() const {
  const nlohmann::json model{{"id", opt.served_model_name}, {"object", "model"}, {"created", created},
                             {"owned_by", "twofold"}, {"max_model_len", loop.config().max_position}};
  return dump(nlohmann::json{{"object", "list"}, {"data", nlohmann::json::array({model})}});
}

// Past max_connections a connection is still accepted, to tell it 503 rather than leave it
// in the backlog. Running out of file descriptors pauses accepting for 50 ms instead of
// spinning.
void HttpServer::Impl::accept() {
  acceptor.async_accept(asio::make_strand(io), asio::bind_executor(accept_strand, [this](beast::error_code ec,
                                                                                      tcp::socket socket) {
    if (!acceptor.is_open()) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      accept_retry.expires_after(50ms);
      accept_retry.async_wait(asio::bind_executor(accept_strand, [this](beast::error_code) { accept(); }));
      return;
    }
    const bool refuse = shared.n_connections.load() >= shared.max_connections;
    try {
      std::make_shared<HttpSession>(std::move(socket), shared, refuse)->start();
    } catch (const std::exception& e) {  // this connection is lost (its socket closes), not the listener
      std::fprintf(stderr, "twofold serve: cannot serve a connection: %s\n", e.what());
    }
    accept();
  }));
}

// Each connection holds one descriptor; the engine and the model files need some more.
void HttpServer::Impl::raise_fd_limit() {
  constexpr rlim_t kReserve = 256;
  const rlim_t need = rlim_t(shared.max_connections) + kReserve;
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < need) {
    rl.rlim_cur = std::min(need, rl.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &rl);
    ::getrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur < need) {
    const int32_t fit = int32_t(std::max<rlim_t>(rl.rlim_cur, kReserve + 16) - kReserve);
    std::fprintf(stderr,
                 "twofold serve: the open-file limit is %llu, too low for --max-connections %d; serving at most %d "
                 "connections (raise it with ulimit -n)\n",
                 (unsigned long long)rl.rlim_cur, shared.max_connections, fit);
    shared.max_connections = fit;
  }
}

HttpServer::HttpServer(ReplicaRouter& loop, const ChatTemplate* chat, ServerMetrics& metrics, ServerOptions opt)
    : impl_(std::make_unique<Impl>(loop, chat, metrics, std::move(opt))) {}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  Impl& m = *impl_;
  const ServerOptions& o = m.opt;
  // The resolver would take the port modulo 65536 and listen somewhere else.
  if (o.port < 0 || o.port > kMaxPort) fail("port {} is outside 0..{} (0: any free port)", o.port, kMaxPort);
  tcp::endpoint where;
  try {
    tcp::resolver resolver(m.io);
    where = resolver.resolve(o.host, std::to_string(o.port), tcp::resolver::passive).begin()->endpoint();
  } catch (const std::exception& e) {
    fail("cannot resolve the address '{}': {}", o.host, e.what());
  }
  beast::error_code ec;
  m.acceptor.open(where.protocol(), ec);
  // SO_REUSEADDR (a quick restart) but not SO_REUSEPORT, which would let a second server
  // bind the same port and silently share its connections.
  if (!ec) m.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) m.acceptor.bind(where, ec);
  if (ec) fail("cannot bind to {}:{} (in use, or not an address of this machine?): {}", o.host, o.port, ec.message());
  m.acceptor.listen(std::max(o.listen_backlog, 1), ec);
  if (ec) fail("cannot listen on {}:{}: {}", o.host, o.port, ec.message());
  m.raise_fd_limit();
  return m.acceptor.local_endpoint().port();
}

void HttpServer::run() {
  Impl& m = *impl_;
  asio::post(m.accept_strand, [&m] { m.accept(); });
  auto serve = [&m] {
    for (;;) {
      try {
        m.io.run();
        return;
      } catch (const std::exception& e) {  // a handler threw: log it and keep serving
        std::fprintf(stderr, "twofold serve: error in the HTTP layer: %s\n", e.what());
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < std::max(m.opt.io_threads, 1); ++i) threads.emplace_back(serve);
  serve();
  for (std::thread& t : threads) t.join();
}

// New requests are refused first (503), so the in-flight count can only fall; requests
// still running after the grace period are aborted (they end with finish_reason "abort").
// A slot is given back only once its answer is written, so when the count reaches zero no
// stream is cut mid-write; then the listener and the idle connections are closed.
void HttpServer::shutdown() {
  Impl& m = *impl_;
  m.shared.draining = true;
  const auto grace = std::chrono::duration<double>(m.opt.grace_s);
  if (!m.admission.wait_idle(grace)) {
    std::fprintf(stderr, "twofold serve: %d requests still running after %.0f s; aborting them\n",
                 m.admission.in_flight(), m.opt.grace_s);
    m.loop.abort_all();
    m.admission.wait_idle(std::chrono::seconds(10));
  }
  asio::post(m.accept_strand, [&m] {
    beast::error_code ec;
    m.acceptor.close(ec);
    m.accept_retry.cancel();
  });
  std::vector<std::shared_ptr<HttpSession>> open;
  {
    std::lock_guard lock(m.shared.sessions_mu);
    for (const std::weak_ptr<HttpSession>& w : m.shared.sessions)
      if (auto s = w.lock()) open.push_back(std::move(s));
  }
  for (const auto& s : open) s->close_if_idle();
  open.clear();  // outside the lock: a session's destructor takes it
  // Answers still being written (a 503, a /metrics) get a moment to finish; lingering closes
  // are cut short (their answers are out).
  wait_until([&m] { return m.shared.n_busy.load() == 0; }, 3s);
  m.io.stop();
}

int32_t HttpServer::n_in_flight() const { return impl_->admission.in_flight(); }

int32_t HttpServer::max_connections() const { return impl_->shared.max_connections; }

ToolCallFormat HttpServer::tool_call_format() const { return impl_->ctx.tool_format; }
ReasoningFormat HttpServer::reasoning_format() const { return impl_->ctx.reasoning_format; }

}  // namespace tf::serve

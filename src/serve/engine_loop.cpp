// The engine thread and the per-request streams; see engine_loop.h.
#include "serve/engine_loop.h"

#include <cstdio>

#include "core/error.h"
#include "dist/rank_threads.h"

namespace tf::serve {

// ---- RequestStream ----------------------------------------------------------------------------

void RequestStream::take(std::vector<RequestOutput>& out) {
  std::lock_guard lock(mu_);
  for (RequestOutput& o : queue_) out.push_back(std::move(o));
  queue_.clear();
}

bool RequestStream::decided() const {
  std::lock_guard lock(mu_);
  return decided_;
}

bool RequestStream::cancelled() const {
  std::lock_guard lock(mu_);
  return cancelled_;
}

bool RequestStream::refused() const {
  std::lock_guard lock(mu_);
  return refused_;
}

bool RequestStream::finished() const {
  std::lock_guard lock(mu_);
  return finished_;
}

RequestStats RequestStream::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

std::string RequestStream::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

void RequestStream::detach_notify() {
  std::lock_guard lock(notify_mu_);
  notify_ = nullptr;
}

void RequestStream::notify() {
  std::lock_guard lock(notify_mu_);
  if (notify_) notify_();
}

void RequestStream::push(RequestOutput o) {
  {
    std::lock_guard lock(mu_);
    if (o.finished) finished_ = true;
    queue_.push_back(std::move(o));
  }
  notify();
}

bool RequestStream::accept(RequestId id) {
  bool wanted = false;
  {
    std::lock_guard lock(mu_);
    id_ = id;
    decided_ = true;
    wanted = !cancelled_;
  }
  notify();
  return wanted;
}

void RequestStream::reject(std::string error) {
  {
    std::lock_guard lock(mu_);
    error_ = std::move(error);
    decided_ = true;
    refused_ = true;
    finished_ = true;
  }
  notify();
}

void RequestStream::fail(std::string error) {
  {
    std::lock_guard lock(mu_);
    error_ = std::move(error);
    finished_ = true;
    queue_.push_back(RequestOutput{.id = id_, .finished = true, .finish_reason = FinishReason::Abort});
  }
  notify();
}

// ---- EngineLoop -------------------------------------------------------------------------------

EngineLoop::EngineLoop(std::unique_ptr<Engine> engine, ServerMetrics& metrics, int host_threads)
    : engine_(std::move(engine)), metrics_(metrics), block_size_(engine_->kv_block_size()),
      kv_bytes_per_token_(engine_->kv_bytes_per_token()), host_threads_(host_threads), snapshot_(engine_->metrics()) {
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    abort_all_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<RequestStream> EngineLoop::submit(GenerateRequest req, std::function<void()> notify) {
  auto s = std::make_shared<RequestStream>();
  s->request_ = std::move(req);
  s->arrival_ = Clock::now();
  s->notify_ = std::move(notify);
  {
    std::lock_guard lock(mu_);
    if (stop_) fail("the engine loop is stopping");
    inbox_.push_back(s);
  }
  cv_.notify_all();
  return s;
}

// Before the engine thread decided, the stream is only marked: drain_inbox() then skips it,
// or aborts it right after add_request (accept() and this check the mark under the
// stream's lock, so one of the two sees it).
void EngineLoop::abort(RequestStream& s) {
  RequestId id = -1;
  {
    std::lock_guard lock(s.mu_);
    if (!s.decided_) {
      s.cancelled_ = true;
      return;
    }
    if (s.finished_) return;
    id = s.id_;
  }
  {
    std::lock_guard lock(mu_);
    aborts_.push_back(id);
  }
  cv_.notify_all();
}

void EngineLoop::abort_all() {
  {
    std::lock_guard lock(mu_);
    abort_all_ = true;
  }
  cv_.notify_all();
}

EngineMetrics EngineLoop::metrics() const {
  std::lock_guard lock(mu_);
  return snapshot_;
}

// Each iteration: take the queued submissions and aborts, run one engine step if anything
// is unfinished, hand each output to its stream, publish the metrics snapshot. Sleeps while
// there is nothing to do; exits once stopped and drained.
void EngineLoop::run() {
  set_host_threads(host_threads_);
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || abort_all_ || !inbox_.empty() || !aborts_.empty() || engine_->has_unfinished();
      });
      if (stop_ && inbox_.empty() && !abort_all_ && !engine_->has_unfinished()) break;
    }
    drain_inbox();
    if (engine_->has_unfinished()) {
      try {
        deliver(engine_->step());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "twofold serve: engine step failed: %s\n", e.what());
        fail_all(std::string("internal error in the engine: ") + e.what());
      }
    }
    publish_metrics();
  }
  publish_metrics();
}

void EngineLoop::drain_inbox() {
  std::vector<std::shared_ptr<RequestStream>> inbox;
  std::vector<RequestId> aborts;
  bool all = false, stopping = false;
  {
    std::lock_guard lock(mu_);
    inbox.swap(inbox_);
    aborts.swap(aborts_);
    all = abort_all_;
    abort_all_ = false;
    stopping = stop_;
  }
  for (const auto& s : inbox) {
    if (stopping) {
      s->reject("the server is shutting down");
      continue;
    }
    if (s->cancelled()) {
      s->reject("the request was aborted before it started");
      continue;
    }
    try {
      const RequestId id = engine_->add_request(std::move(s->request_));
      live_[id] = s;
      if (!s->accept(id)) engine_->abort(id);
    } catch (const std::exception& e) {
      s->reject(e.what());
    }
  }
  if (all) {
    for (const auto& [id, s] : live_) engine_->abort(id);
  } else {
    for (RequestId id : aborts)
      if (live_.count(id)) engine_->abort(id);
  }
}

void EngineLoop::deliver(std::vector<RequestOutput> outs) {
  const Clock::time_point now = Clock::now();
  for (RequestOutput& o : outs) {
    auto it = live_.find(o.id);
    if (it == live_.end()) continue;
    const std::shared_ptr<RequestStream> s = it->second;
    const size_t n_new = o.new_token_ids.size();
    if (n_new > 0) {
      if (!s->has_token_) {
        metrics_.ttft_s.observe(std::chrono::duration<double>(now - s->arrival_).count());
      } else {
        const double gap = std::chrono::duration<double>(now - s->last_token_).count() / double(n_new);
        for (size_t i = 0; i < n_new; ++i) metrics_.itl_s.observe(gap);
      }
      s->has_token_ = true;
      s->last_token_ = now;
      metrics_.generation_tokens += int64_t(n_new);
    }
    if (o.finished) {
      const RequestStats st = engine_->stats(o.id);
      metrics_.prompt_tokens += st.n_prompt_tokens;
      metrics_.count_finished(o.finish_reason);
      if (o.finish_reason != FinishReason::Abort)
        metrics_.e2e_s.observe(std::chrono::duration<double>(now - s->arrival_).count());
      engine_->release(o.id);
      live_.erase(it);
      std::lock_guard lock(s->mu_);
      s->stats_ = st;
    }
    s->push(std::move(o));
  }
}

void EngineLoop::fail_all(const std::string& error) {
  for (const auto& [id, s] : live_) {
    try {
      engine_->abort(id);
      engine_->release(id);
    } catch (const std::exception&) {
      // The engine is already in trouble; the request is failed below either way.
    }
    s->fail(error);
  }
  live_.clear();
}

void EngineLoop::publish_metrics() {
  const EngineMetrics m = engine_->metrics();
  std::lock_guard lock(mu_);
  snapshot_ = m;
}

}  // namespace tf::serve

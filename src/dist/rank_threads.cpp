// Persistent rank threads; see rank_threads.h.
#include "dist/rank_threads.h"

#include <algorithm>

#include "core/error.h"

namespace tf {

RankThreads::RankThreads(int n, std::function<void()> on_error)
    : on_error_(std::move(on_error)), threads_per_rank_(host_thread_share(n)) {
  if (n < 1) fail("a rank group needs at least one rank, got {}", n);
  for (int r = 0; r < n; ++r) threads_.emplace_back([this, r] { loop(r); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void RankThreads::run(const std::function<void(int)>& fn) {
  std::unique_lock lock(mu_);
  TF_ASSERT(job_ == nullptr, "RankThreads::run is not reentrant");
  job_ = &fn;
  error_ = nullptr;
  n_running_ = size();
  ++generation_;
  start_cv_.notify_all();
  done_cv_.wait(lock, [&] { return n_running_ == 0; });
  job_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void RankThreads::loop(int rank) {
  set_host_threads(threads_per_rank_);
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job = nullptr;
    {
      std::unique_lock lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    std::exception_ptr err;
    try {
      (*job)(rank);
    } catch (...) {
      err = std::current_exception();
      if (on_error_) on_error_();
    }
    std::lock_guard lock(mu_);
    if (err && !error_) error_ = err;
    if (--n_running_ == 0) done_cv_.notify_all();
  }
}

}  // namespace tf

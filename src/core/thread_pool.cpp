// The CPU backend's worker pool; see thread_pool.h.
#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <utility>

#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TF_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define TF_CPU_RELAX() asm volatile("yield")
#else
#define TF_CPU_RELAX() ((void)0)
#endif

namespace tf {
namespace {

constexpr uint64_t kLow = 0xffffffffull;

// Polls `ready` for up to ThreadPool::kSpinMicros; true once it held.
template <typename Ready>
bool spin_until(Ready&& ready) {
  const auto limit = std::chrono::steady_clock::now() + std::chrono::microseconds(ThreadPool::kSpinMicros);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      TF_CPU_RELAX();
    }
    if (std::chrono::steady_clock::now() > limit) return ready();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  for (int t = 1; t < std::max(1, n_threads); ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  epoch_.notify_all();
  for (std::thread& w : workers_) w.join();
}

int64_t ThreadPool::chunks_for(int64_t n_items, int64_t min_items) const {
  const int64_t by_size = n_items / std::max<int64_t>(1, min_items);
  return std::clamp<int64_t>(std::min<int64_t>(by_size, 4 * int64_t(size())), 1, std::max<int64_t>(1, n_items));
}

void ThreadPool::work(int thread) {
  for (;;) {
    const uint64_t s = state_.fetch_add(1, std::memory_order_acq_rel);
    const int64_t chunk = int64_t(s & kLow), n = int64_t(s >> 32);
    if (chunk >= n) return;
    try {
      fn_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), chunk, thread);
    } catch (...) {
      std::lock_guard lock(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    const int64_t finished = done_.fetch_add(1, std::memory_order_seq_cst) + 1;
    if (finished == n && caller_sleeping_.load(std::memory_order_seq_cst)) done_.notify_one();
  }
}

void ThreadPool::run(int64_t n_chunks, ChunkFn fn, void* ctx) {
  TF_ASSERT(n_chunks < (int64_t(1) << 31), "parallel_for: {} chunks", n_chunks);
  TF_ASSERT(!busy_.exchange(true, std::memory_order_acquire),
            "ThreadPool::parallel_for called while another runs on the same pool");
  if (workers_.empty() || n_chunks == 1) {
    struct Release {
      std::atomic<bool>& busy;
      ~Release() { busy.store(false, std::memory_order_release); }
    } release{busy_};
    for (int64_t c = 0; c < n_chunks; ++c) fn(ctx, c, 0);
    return;
  }
  // ---- post: the op's function, a fresh done count, then the state (release) and the epoch
  fn_.store(fn, std::memory_order_relaxed);
  ctx_.store(ctx, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  state_.store(uint64_t(n_chunks) << 32, std::memory_order_release);
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  if (n_sleeping_.load(std::memory_order_seq_cst) > 0) epoch_.notify_all();
  // ---- take chunks like any worker, then wait for those still running elsewhere
  work(0);
  const auto all_done = [&] { return done_.load(std::memory_order_acquire) == n_chunks; };
  while (!spin_until(all_done)) {
    caller_sleeping_.store(true, std::memory_order_seq_cst);
    const int64_t d = done_.load(std::memory_order_seq_cst);
    if (d != n_chunks) done_.wait(d, std::memory_order_seq_cst);
    caller_sleeping_.store(false, std::memory_order_relaxed);
  }
  busy_.store(false, std::memory_order_release);
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void ThreadPool::worker_loop(int thread) {
  uint32_t seen = 0;
  for (;;) {
    const auto posted = [&] { return epoch_.load(std::memory_order_acquire) != seen; };
    if (!spin_until(posted)) {
      n_sleeping_.fetch_add(1, std::memory_order_seq_cst);
      while (epoch_.load(std::memory_order_seq_cst) == seen) epoch_.wait(seen, std::memory_order_seq_cst);
      n_sleeping_.fetch_sub(1, std::memory_order_relaxed);
    }
    // The epoch first, then stop_: the destructor sets stop_ before its bump, so a worker that
    // takes that bump as its `seen` also sees stop_ (read in the other order, the bump could
    // land between them and the worker would wait for an epoch that never comes: a hang in
    // ~ThreadPool seen under load).
    seen = epoch_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    work(thread);
  }
}

}  // namespace tf

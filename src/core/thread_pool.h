// A persistent pool of worker threads for the CPU backend's ops.
//
// One op = one parallel_for(n_chunks, fn): the caller splits its work once into chunks
// (weight row blocks, attention items, ...), and the caller and the workers claim chunks
// one at a time from a shared counter until none is left. There is no barrier per row
// block and no fixed thread-to-chunk assignment: a worker the OS has not scheduled yet
// simply claims nothing and the running threads take its share, so on a busy machine an op
// costs at worst what one thread would take, not a scheduler time slice of waiting.
//
// Waiting is bounded spinning, then sleeping: an idle worker polls for new work for
// kSpinMicros (ops of one forward follow each other within microseconds, so workers stay
// hot through a step), then sleeps on a futex (std::atomic::wait) until the next op posts
// work. The caller, once no chunk is left to claim, waits the same way for chunks still
// running on workers. A pool that is not used costs no CPU.
//
// Invariants: chunks of one parallel_for run exactly once each and all have finished when
// it returns; one parallel_for at a time per pool (a second concurrent or nested call is a
// programming error and asserts).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace tf {

class ThreadPool {
 public:
  // n_threads counts the caller: n_threads - 1 workers are started. At least 1.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // Calls fn(chunk, thread) for every chunk in [0, n_chunks), each exactly once, on the
  // calling thread (thread 0) and the workers (1 .. size() - 1); returns when all returned.
  // `thread` indexes per-thread scratch. If fn throws, the other chunks still run and the
  // first exception is rethrown here once all have finished.
  template <typename Fn>
  void parallel_for(int64_t n_chunks, Fn&& fn) {
    if (n_chunks <= 0) return;
    auto call = [](void* ctx, int64_t chunk, int thread) { (*static_cast<Fn*>(ctx))(chunk, thread); };
    run(n_chunks, call, &fn);
  }

  // Chunks for n_items split in pieces of at least min_items, about 4 per thread (so the
  // threads that run take the share of those that do not), at most n_items.
  int64_t chunks_for(int64_t n_items, int64_t min_items) const;

  static constexpr int kSpinMicros = 100;

 private:
  using ChunkFn = void (*)(void* ctx, int64_t chunk, int thread);
  void run(int64_t n_chunks, ChunkFn fn, void* ctx);
  // Claims and runs chunks of the posted op until none is left.
  void work(int thread);
  void worker_loop(int thread);

  // The posted op: [n_chunks : 32 | next chunk : 32]. Claims are fetch_add on the low half,
  // so a claim always reads the op it claims from; fn_/ctx_ are written before the state is
  // published (release) and stay valid while any of its chunks is unfinished.
  std::atomic<uint64_t> state_{0};
  std::atomic<ChunkFn> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<int64_t> done_{0};       // chunks of the posted op that have finished
  std::atomic<uint32_t> epoch_{0};     // bumped once per op; idle workers wait on it
  std::atomic<int> n_sleeping_{0};     // workers blocked in epoch_.wait
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
  std::atomic<bool> busy_{false};      // a parallel_for is running
  std::mutex error_mu_;
  std::exception_ptr error_;           // first exception of the running op
  std::vector<std::thread> workers_;
};

}  // namespace tf

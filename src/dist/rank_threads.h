// One long-lived thread per rank of an in-process group: run(fn) calls fn(rank) on every
// rank thread at once and returns when all returned. Threads live as long as the object
// because each rank's backend keeps a worker pool sized on the rank thread's first op; a
// fresh std::thread per forward would start those pools again every step.
//
// The host threads are shared out (core/host_threads.h): each rank thread gets 1/n of the
// count of the thread that built this (at least one), so n ranks do not oversubscribe the
// cores.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/host_threads.h"

namespace tf {

class RankThreads {
 public:
  // on_error runs on the failing rank's thread as soon as fn throws there, before the
  // other ranks finish (the communicator's abort(), so ranks waiting on it wake up).
  RankThreads(int n, std::function<void()> on_error);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int size() const { return int(threads_.size()); }
  int threads_per_rank() const { return threads_per_rank_; }
  // Runs fn(rank) on every rank thread; rethrows the first rank's exception after all ended.
  void run(const std::function<void(int)>& fn);

 private:
  void loop(int rank);

  std::function<void()> on_error_;
  int threads_per_rank_ = 1;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int n_running_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
};

}  // namespace tf

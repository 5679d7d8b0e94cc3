// The in-process communicator: the ranks are threads of one process and the collectives
// copy through shared memory, so sharding logic runs (and is tested) on the CPU with no
// GPU or network. One InProcessGroup holds the shared state; each rank thread calls the
// collectives on its own communicator().
//
// Each collective publishes every rank's buffer pointer, meets at a barrier, copies, and
// meets again before anyone may reuse a buffer. All-reduce is a reduce-scatter into a
// shared result (rank r sums element chunk r over the ranks, always in rank order, so the
// result is the same on every rank and from run to run) followed by a copy back.
//
// A rank that fails while others wait would hang them: abort() breaks the barrier so every
// waiting rank throws tf::Error; reset() makes the group usable again once all ranks left.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "dist/communicator.h"

namespace tf {

// A reusable barrier for a fixed number of threads that can be broken.
class BreakableBarrier {
 public:
  explicit BreakableBarrier(int n) : n_(n) {}
  // Blocks until all n threads arrived. Throws tf::Error if the barrier is (or gets) broken.
  void arrive_and_wait();
  void break_all();
  void reset();  // precondition: no thread is waiting

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_;
  int count_ = 0;
  uint64_t generation_ = 0;
  bool broken_ = false;
};

class InProcessGroup {
 public:
  explicit InProcessGroup(int size);
  ~InProcessGroup();
  int size() const { return size_; }
  Communicator& communicator(int rank);
  void abort() { barrier_.break_all(); }
  void reset() { barrier_.reset(); }

 private:
  friend class InProcessCommunicator;
  int size_;
  BreakableBarrier barrier_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  // Published by each rank between the barriers of one collective.
  std::vector<const void*> src_;
  std::vector<size_t> nbytes_;
  std::vector<float> sum_;  // all-reduce result, sized by rank 0
};

}  // namespace tf

// Per-op GPU times for `twofold bench --variants profile` (the device machine has no Nsight):
// CUDA events around every op of the backend, summed per op name when a report is asked for.
// Events between ops cost ~1-2 us each and rule out CUDA Graphs, so profiling runs eagerly and
// its absolute step times are a little longer than the real ones; the shares are what it is for.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <string>
#include <vector>

namespace tf::cuda {

class OpProfiler {
 public:
  ~OpProfiler();
  // Records a start event for `name` on `stream`; end() records its end. Scopes nest (a fused
  // op calls the quantized matmul's launcher): only the outermost one is timed, so no GPU time
  // is counted twice and every recorded start has its stop.
  void begin(const std::string& name, cudaStream_t stream);
  void end(cudaStream_t stream);
  // Waits for the recorded events, adds their durations to the per-name totals, and returns
  // one line per name, largest total first: "op <name>: <calls> calls, <total> ms, <avg> us".
  std::vector<std::string> report();

 private:
  struct Pending {
    std::string name;
    cudaEvent_t start = nullptr, stop = nullptr;
  };
  struct Total {
    int64_t calls = 0;
    double ms = 0;
  };
  void collect();
  cudaEvent_t take_event();

  std::vector<Pending> pending_;
  int depth_ = 0;  // open scopes; the outermost owns pending_.back()
  std::vector<cudaEvent_t> free_;
  std::map<std::string, Total> totals_;
};

// RAII helper: profiles the enclosing op when `p` is not null.
class OpScope {
 public:
  OpScope(OpProfiler* p, const std::string& name, cudaStream_t s) : p_(p), s_(s) {
    if (p_) p_->begin(name, s_);
  }
  ~OpScope() {
    if (p_) p_->end(s_);
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  OpProfiler* p_;
  cudaStream_t s_;
};

}  // namespace tf::cuda

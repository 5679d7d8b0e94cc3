#include "backend/cuda/op_profiler.h"

#include <fmt/format.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"

namespace tf::cuda {

OpProfiler::~OpProfiler() {
  for (Pending& p : pending_) {
    cudaEventDestroy(p.start);
    cudaEventDestroy(p.stop);
  }
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

cudaEvent_t OpProfiler::take_event() {
  if (free_.empty()) {
    cudaEvent_t e = nullptr;
    TF_CUDA_CHECK(cudaEventCreate(&e));
    return e;
  }
  cudaEvent_t e = free_.back();
  free_.pop_back();
  return e;
}

void OpProfiler::begin(const std::string& name, cudaStream_t stream) {
  if (depth_++ > 0) return;
  if (pending_.size() >= 4096) collect();  // bounded: reuse events
  Pending p{.name = name, .start = take_event()};
  TF_CUDA_CHECK(cudaEventRecord(p.start, stream));
  pending_.push_back(p);
}

void OpProfiler::end(cudaStream_t stream) {
  if (--depth_ > 0) return;
  Pending& p = pending_.back();
  p.stop = take_event();
  TF_CUDA_CHECK(cudaEventRecord(p.stop, stream));
}

void OpProfiler::collect() {
  for (Pending& p : pending_) {
    TF_CUDA_CHECK(cudaEventSynchronize(p.stop));
    float ms = 0;
    TF_CUDA_CHECK(cudaEventElapsedTime(&ms, p.start, p.stop));
    Total& t = totals_[p.name];
    ++t.calls;
    t.ms += double(ms);
    free_.push_back(p.start);
    free_.push_back(p.stop);
  }
  pending_.clear();
}

std::vector<std::string> OpProfiler::report() {
  collect();
  std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  double all = 0;
  for (const auto& [name, t] : rows) all += t.ms;
  std::vector<std::string> lines;
  for (const auto& [name, t] : rows)
    lines.push_back(fmt::format("op {}: {} calls, {:.2f} ms ({:.1f}%), {:.1f} us each", name, t.calls, t.ms,
                                100.0 * t.ms / all, 1e3 * t.ms / double(t.calls)));
  return lines;
}

}  // namespace tf::cuda

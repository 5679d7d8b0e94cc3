// CUDA Graphs for the CUDA backend: recording a decode forward on the second sight of its
// shape key, replaying it afterwards, and dropping every recording when a buffer moves.
#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/cuda_backend_util.h"
#include "backend/cuda/cuda_check.h"

namespace tf::cuda {

using namespace detail;

// The block after the pools of the group (init_kv_cache allocates one more).
int32_t CudaBackend::pad_kv_block(int32_t group) const {
  if (!opt_.graphs || k_cache_.empty()) return -1;
  return int32_t(kv_spec_.group_blocks.empty() ? kv_spec_.n_blocks : kv_spec_.group_blocks[size_t(group)]);
}

GraphStep CudaBackend::graph_begin(uint64_t key) {
  if (!opt_.graphs) return GraphStep::Eager;
  TF_ASSERT(!capturing_, "graph_begin while recording");
  Recording& r = graphs_[key];
  if (r.exec) {
    TF_CUDA_CHECK(cudaGraphLaunch(r.exec, stream_));
    return GraphStep::Replayed;
  }
  if (!r.seen) {
    r.seen = true;
    return GraphStep::Eager;
  }
  // Thread-local mode: another thread's unrelated CUDA calls do not break this recording.
  TF_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  capture_key_ = key;
  return GraphStep::Capture;
}

void CudaBackend::graph_end() {
  TF_ASSERT(capturing_, "graph_end without graph_begin returning Capture");
  cudaGraph_t graph = nullptr;
  capturing_ = false;
  TF_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  TF_CUDA_CHECK(e);
  graphs_[capture_key_].exec = exec;
  TF_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
}

void CudaBackend::graph_reset() {
  if (capturing_) {  // a forward threw while recording: end the recording, drop it
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream_, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // clear the capture-invalidated state
  }
  for (auto& [key, r] : graphs_)
    if (r.exec) TF_CUDA_CHECK(cudaGraphExecDestroy(r.exec));
  graphs_.clear();
}

int64_t CudaBackend::n_graphs() const {
  int64_t n = 0;
  for (const auto& [key, r] : graphs_) n += r.exec != nullptr;
  return n;
}

}  // namespace tf::cuda

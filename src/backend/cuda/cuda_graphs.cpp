// CUDA Graphs for the CUDA backend: recording a decode forward on the second sight of its
// shape key, replaying it afterwards (once it has been replayed often, recording it again with
// PDL for every kernel, then with each near-tie kernel of its quantized GEMVs, keeping the
// faster recording each time), and dropping every recording when a buffer moves.
#include "backend/cuda/cuda_backend.h"

#include <fmt/format.h>

#include <algorithm>

#include "backend/cuda/cuda_backend_util.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv_trials.h"

namespace tf::cuda {

using namespace detail;

namespace {

// Replays of a recording before its trials: keys met only a few times (a batch's tail passing
// through smaller buckets) never pay for the trials' extra recordings and replays.
constexpr int kReplaysBeforeTrial = 16;

}  // namespace

// The block after the pools of the group (init_kv_cache allocates one more).
int32_t CudaBackend::pad_kv_block(int32_t group) const {
  if (!opt_.graphs || k_cache_.empty()) return -1;
  return int32_t(kv_spec_.group_blocks.empty() ? kv_spec_.n_blocks : kv_spec_.group_blocks[size_t(group)]);
}

GraphStep CudaBackend::graph_begin(uint64_t key) {
  if (!opt_.graphs) return GraphStep::Eager;
  TF_ASSERT(!capturing_, "graph_begin while recording");
  Recording& r = graphs_[key];
  if (r.exec && r.replays <= kReplaysBeforeTrial && ++r.replays > kReplaysBeforeTrial) {
    if (opt_.gemv_timed) {
      for (const auto& [k, kernel] : r.gemv_kernels)
        if (const auto c = quant_gemv_.find(k); c != quant_gemv_.end())
          for (const int other : gemv_trial_kernels(c->second.times, kernel)) r.gemv_trials.emplace_back(k, other);
      std::reverse(r.gemv_trials.begin(), r.gemv_trials.end());  // taken from the back
    }
    if (const std::optional<PdlSwitches> other = pdl_trial(opt_, step_pdl_)) {
      // Recorded again with PDL for every kernel; graph_end times both recordings.
      apply_pdl(*other);
      trial_ = Trial::Pdl;
    }
  } else if (r.exec && !r.gemv_trials.empty()) {
    // Recorded again with one GEMV shape on another kernel, the PDL switches of r's recording.
    gemv_trial_ = r.gemv_trials.back();
    r.gemv_trials.pop_back();
    if (r.pdl) apply_pdl(*r.pdl);
    trial_ = Trial::Gemv;
  }
  if (r.exec && trial_ == Trial::None) {
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
  capture_gemv_.clear();
  return GraphStep::Capture;
}

// Back to the step's own PDL switches and kernel picks after a trial recording (ended or
// broken).
void CudaBackend::end_trial() {
  if (trial_ == Trial::None) return;
  trial_ = Trial::None;
  gemv_trial_.reset();
  apply_pdl(step_pdl_);
}

int CudaBackend::quant_gemv_kernel(const QuantGemvKey& key, int pick) const {
  return gemv_trial_ && gemv_trial_->first == key ? gemv_trial_->second : pick;
}

// A recording replays the step's ops on the step's inputs and writes only the step's outputs
// and KV slots, so replaying it again, or another recording of the same ops, computes the same
// results: a trial's timed replays leave the step done.
void CudaBackend::graph_end() {
  TF_ASSERT(capturing_, "graph_end without graph_begin returning Capture");
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  TF_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  const Trial trial = trial_;
  const std::optional<std::pair<QuantGemvKey, int>> gemv = gemv_trial_;
  end_trial();
  TF_CUDA_CHECK(e);
  Recording& r = graphs_[capture_key_];
  if (!r.exec) {
    r.exec = exec;
    r.gemv_kernels = capture_gemv_;
    TF_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
    return;
  }
  const auto [kept_us, new_us] = time_replays(r.exec, exec);
  const bool won = new_us < kept_us;
  TF_CUDA_CHECK(cudaGraphExecDestroy(won ? r.exec : exec));
  if (won) r.exec = exec;
  const int64_t seqs = batch_.n_seqs();
  const std::string step = fmt::format("recorded step {} seqs x {} tokens, {} blocks", seqs,
                                       seqs > 0 ? batch_.n_tokens() / seqs : 0, batch_.max_blocks);
  if (trial == Trial::Pdl) {
    if (won) r.pdl = pdl_trial(opt_, step_pdl_);  // what graph_begin applied (set_batch sets step_pdl_ before)
    graph_picks_[step] = fmt::format("step's PDL switches {:.1f} us, PDL everywhere {:.1f} us -> {}", kept_us, new_us,
                                     won ? "pdl everywhere" : "step's switches");
    return;
  }
  TF_ASSERT(trial == Trial::Gemv && gemv, "a second recording of a step outside its trials");
  const auto& [shape, kernel] = *gemv;
  int kept = kernel;  // the recording's kernel for the shape
  for (auto& [k, used] : r.gemv_kernels)
    if (k == shape) {
      kept = used;
      if (won) used = kernel;
    }
  if (won) quant_gemv_.at(shape).tile = kernel;  // later recordings launch the shape on it too
  std::string& line = graph_picks_[step + ", " + quant_gemv_shape(shape)];
  line += fmt::format("{}{} {:.1f} us against {} {:.1f} us -> {}", line.empty() ? "" : "; ", quant_gemv_name(kernel),
                      new_us, quant_gemv_name(kept), kept_us, quant_gemv_name(won ? kernel : kept));
}

// One replay of each to warm up (the first launch of a recording uploads it), then kRounds
// rounds alternating the two, each replay alone between two events.
std::pair<double, double> CudaBackend::time_replays(cudaGraphExec_t a, cudaGraphExec_t b) {
  constexpr int kRounds = 3;
  cudaEvent_t ev[2];
  for (cudaEvent_t& e : ev) TF_CUDA_CHECK(cudaEventCreate(&e));
  double total[2] = {0, 0};
  const cudaGraphExec_t execs[2] = {a, b};
  for (int round = 0; round <= kRounds; ++round)
    for (int i = 0; i < 2; ++i) {
      TF_CUDA_CHECK(cudaEventRecord(ev[0], stream_));
      TF_CUDA_CHECK(cudaGraphLaunch(execs[i], stream_));
      TF_CUDA_CHECK(cudaEventRecord(ev[1], stream_));
      TF_CUDA_CHECK(cudaEventSynchronize(ev[1]));
      float ms = 0;
      TF_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
      if (round > 0) total[i] += 1e3 * double(ms);
    }
  for (cudaEvent_t& e : ev) cudaEventDestroy(e);
  return {total[0] / kRounds, total[1] / kRounds};
}

void CudaBackend::graph_reset() {
  if (capturing_) {  // a forward threw while recording: end the recording, drop it
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream_, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // clear the capture-invalidated state
  }
  end_trial();
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

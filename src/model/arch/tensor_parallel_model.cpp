// In-process tensor parallelism over N host backends; see tensor_parallel_model.h.
#include "model/arch/tensor_parallel_model.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace tf {

TensorParallelModel::TensorParallelModel(const std::string& dir, Backend& rank0,
                                         std::vector<std::unique_ptr<Backend>> others, const LoadOptions& opt)
    : owned_(std::move(others)), group_(int(owned_.size()) + 1) {
  backends_.push_back(&rank0);
  for (const auto& b : owned_) backends_.push_back(b.get());
  const int n = int(backends_.size());
  for (Backend* b : backends_)
    if (b->device() != Device::Host)
      fail("tensor parallelism runs on host backends only (cpu, ref) for now: the {} backend needs an NCCL "
           "communicator, which is not wired yet", b->name());
  for (int r = 0; r < n; ++r) {
    LoadOptions o = opt;
    o.tp_rank = r;
    o.tp_size = n;
    o.comm = &group_.communicator(r);
    shards_.push_back(load_model(dir, *backends_[size_t(r)], o));
    layouts_.push_back(tp_shard(shards_.back()->config(), r, n));
  }
  gathered_.resize(size_t(n));
  threads_ = std::make_unique<RankThreads>(n, [this] { group_.abort(); });
}

TensorParallelModel::~TensorParallelModel() {
  threads_.reset();  // no rank thread runs while the buffers go
  for (int r = 0; r < size(); ++r)
    if (gathered_[size_t(r)].data) backends_[size_t(r)]->release(gathered_[size_t(r)]);
  if (logits_.data) backends_[0]->release(logits_);
}

int64_t TensorParallelModel::weight_bytes() const {
  int64_t b = 0;
  for (const auto& s : shards_) b += s->weight_bytes();
  return b;
}

int64_t TensorParallelModel::step_weight_bytes(int64_t n_tokens) const {
  int64_t b = 0;
  for (const auto& s : shards_) b += s->step_weight_bytes(n_tokens);
  return b;
}

std::vector<WeightCopyInfo> TensorParallelModel::weight_copies() const {
  std::vector<WeightCopyInfo> out = shards_[0]->weight_copies();
  for (size_t r = 1; r < shards_.size(); ++r) {
    const std::vector<WeightCopyInfo> c = shards_[r]->weight_copies();
    for (size_t i = 0; i < out.size(); ++i) out[i].bytes += c[i].bytes;
  }
  return out;
}

void TensorParallelModel::set_copy_ranges(const std::vector<CopyRange>& ranges) {
  for (const auto& s : shards_) s->set_copy_ranges(ranges);
}

int64_t TensorParallelModel::n_params() const {
  int64_t p = 0;
  for (const auto& s : shards_) p += s->n_params();
  return p;
}

void TensorParallelModel::init_kv_cache(Backend& backend, const KvCacheSpec& spec) {
  TF_ASSERT(&backend == backends_[0], "the KV pool belongs to rank 0's backend");
  for (int r = 0; r < size(); ++r) {
    KvCacheSpec s = spec;
    s.n_kv_heads = layouts_[size_t(r)].max_kv_heads();
    s.layer_kv_heads = layouts_[size_t(r)].kv_heads_per_layer();
    backends_[size_t(r)]->init_kv_cache(s);
  }
}

bool TensorParallelModel::ensure_logits(int64_t n_out) {
  if (n_out <= cap_out_) return false;
  const int64_t cap = std::max(n_out, cap_out_), n = size(), v = config().n_vocab;
  for (int r = 0; r < n; ++r) {
    Backend& be = *backends_[size_t(r)];
    if (gathered_[size_t(r)].data) be.release(gathered_[size_t(r)]);
    gathered_[size_t(r)] = be.alloc(DType::F32, {n, cap, v / n});
  }
  if (logits_.data) backends_[0]->release(logits_);
  logits_ = backends_[0]->alloc(DType::F32, {cap, v});
  cap_out_ = cap;
  return true;
}

PreparedStep TensorParallelModel::prepare(const Batch& batch) {
  n_out_ = batch.n_out();
  bool moved = ensure_logits(std::max<int64_t>(n_out_, 1));
  local_.resize(shards_.size());
  int copy = 0;
  for (size_t r = 0; r < shards_.size(); ++r) {
    const PreparedStep p = shards_[r]->prepare(batch);
    local_[r] = p.logits;
    moved |= p.buffers_moved;
    copy = p.weight_copy;
  }
  TensorView out = logits_;
  out.shape[0] = n_out_;
  return PreparedStep{.logits = out, .buffers_moved = moved, .weight_copy = copy};
}

// Phases: (1) every rank's shard forward, which all-reduces inside; (2) an all-gather of
// the vocabulary slices [n_out, n_vocab / N] into [N, n_out, n_vocab / N] on every rank;
// (3) rank 0 transposes the slices into rows [n_out, n_vocab]. A failure on one rank breaks
// the group's barrier so the others throw too; the group is reset before rethrowing.
void TensorParallelModel::run() {
  const int64_t n_out = n_out_, n = size(), v_rank = config().n_vocab / n;
  try {
    threads_->run([&](int r) {
      shards_[size_t(r)]->run();
      if (n_out == 0) return;
      TensorView recv = gathered_[size_t(r)];
      recv.shape[1] = n_out;  // [n, n_out, v_rank], contiguous
      group_.communicator(r).all_gather(local_[size_t(r)], recv);
    });
  } catch (...) {
    group_.reset();
    throw;
  }
  if (n_out == 0) return;
  const int64_t v = config().n_vocab;
  host_gathered_.resize(size_t(n * n_out * v_rank));
  host_logits_.resize(size_t(n_out * v));
  TensorView gathered = gathered_[0];
  gathered.shape[1] = n_out;
  backends_[0]->copy_to_host(gathered, host_gathered_.data());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < n_out; ++i)
      std::memcpy(host_logits_.data() + i * v + r * v_rank, host_gathered_.data() + (r * n_out + i) * v_rank,
                  size_t(v_rank) * sizeof(float));
  TensorView out = logits_;
  out.shape[0] = n_out;
  backends_[0]->copy_from_host(host_logits_.data(), out);
}

}  // namespace tf

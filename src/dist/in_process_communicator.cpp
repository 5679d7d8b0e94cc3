// Threads-and-shared-memory collectives; see in_process_communicator.h.
#include "dist/in_process_communicator.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace tf {

void BreakableBarrier::arrive_and_wait() {
  std::unique_lock lock(mu_);
  if (broken_) fail("collective abandoned: another rank of the tensor-parallel group failed");
  const uint64_t gen = generation_;
  if (++count_ == n_) {
    count_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != gen || broken_; });
  if (generation_ == gen) fail("collective abandoned: another rank of the tensor-parallel group failed");
}

void BreakableBarrier::break_all() {
  {
    std::lock_guard lock(mu_);
    broken_ = true;
  }
  cv_.notify_all();
}

void BreakableBarrier::reset() {
  std::lock_guard lock(mu_);
  broken_ = false;
  count_ = 0;
  ++generation_;
}

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(InProcessGroup& g, int rank) : g_(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_.size_; }

  void all_reduce_sum(const TensorView& buf) override {
    if (buf.dtype != DType::F32) fail("in-process all-reduce supports F32 only, got {}", dtype_name(buf.dtype));
    const int64_t n = buf.numel();
    publish(buf.data, buf.nbytes());
    if (rank_ == 0) g_.sum_.resize(size_t(n));
    g_.barrier_.arrive_and_wait();  // 1: every buffer published, the result sized
    check_same_size("all-reduce");
    // Reduce-scatter: this rank sums its chunk of the elements over all ranks, in rank order.
    const int64_t chunk = (n + size() - 1) / size();
    const int64_t lo = std::min(n, rank_ * chunk), hi = std::min(n, lo + chunk);
    float* sum = g_.sum_.data();
    std::memcpy(sum + lo, static_cast<const float*>(g_.src_[0]) + lo, size_t(hi - lo) * sizeof(float));
    for (int r = 1; r < size(); ++r) {
      const float* src = static_cast<const float*>(g_.src_[size_t(r)]);
      for (int64_t i = lo; i < hi; ++i) sum[i] += src[i];
    }
    g_.barrier_.arrive_and_wait();  // 2: the sum is complete
    std::memcpy(buf.data, sum, size_t(n) * sizeof(float));
    g_.barrier_.arrive_and_wait();  // 3: everyone copied; the sum buffer may be reused
  }

  void all_gather(const TensorView& send, const TensorView& recv) override {
    const size_t nb = send.nbytes();
    if (recv.dtype != send.dtype || recv.nbytes() != nb * size_t(size()))
      fail("all-gather: receive buffer {} {} does not hold {} x {} {} elements", dtype_name(recv.dtype),
           recv.shape_str(), size(), send.numel(), dtype_name(send.dtype));
    publish(send.data, nb);
    g_.barrier_.arrive_and_wait();  // 1: every send buffer published
    check_same_size("all-gather");
    for (int r = 0; r < size(); ++r)
      std::memcpy(static_cast<uint8_t*>(recv.data) + size_t(r) * nb, g_.src_[size_t(r)], nb);
    g_.barrier_.arrive_and_wait();  // 2: senders may reuse their buffers
  }

  void broadcast(const TensorView& buf, int root) override {
    if (root < 0 || root >= size()) fail("broadcast: root {} is not a rank of a group of {}", root, size());
    publish(buf.data, buf.nbytes());
    g_.barrier_.arrive_and_wait();  // 1: root's buffer published
    check_same_size("broadcast");
    if (rank_ != root) std::memcpy(buf.data, g_.src_[size_t(root)], buf.nbytes());
    g_.barrier_.arrive_and_wait();  // 2: root may reuse its buffer
  }

 private:
  void publish(const void* p, size_t nbytes) {
    g_.src_[size_t(rank_)] = p;
    g_.nbytes_[size_t(rank_)] = nbytes;
  }
  // Every rank sees the same sizes, so every rank fails alike (none is left waiting).
  void check_same_size(const char* what) const {
    for (int r = 1; r < size(); ++r)
      if (g_.nbytes_[size_t(r)] != g_.nbytes_[0])
        fail("{}: rank {} passed {} bytes but rank 0 passed {}", what, r, g_.nbytes_[size_t(r)], g_.nbytes_[0]);
  }

  InProcessGroup& g_;
  int rank_;
};

InProcessGroup::InProcessGroup(int size)
    : size_(size), barrier_(size), src_(size_t(std::max(size, 1))), nbytes_(size_t(std::max(size, 1))) {
  if (size < 1) fail("a communicator group needs at least one rank, got {}", size);
  for (int r = 0; r < size; ++r) comms_.push_back(std::make_unique<InProcessCommunicator>(*this, r));
}

InProcessGroup::~InProcessGroup() = default;

Communicator& InProcessGroup::communicator(int rank) {
  TF_ASSERT(rank >= 0 && rank < size_, "rank {} outside a group of {}", rank, size_);
  return *comms_[size_t(rank)];
}

}  // namespace tf

// The NCCL communicator: one rank per GPU, in its own process (mpirun or a torchrun-style
// launcher, launch_env.h) or its own thread. Compiled only in CUDA builds where nccl.h and
// libnccl are found (src/dist/CMakeLists.txt).
//
// NOT YET RUN: this project has had no multi-GPU machine, so this file has been compiled
// and never executed. Treat it as a starting point, not as working code.
//
// Ordering: the CUDA backend's stream is not visible through the Backend interface, so
// each collective first synchronizes the device (the backend's writes are then complete),
// runs on this communicator's stream and waits for it. Correct, and slow; the fast path
// would enqueue the collective on the backend's stream (and inside its CUDA Graphs).
#pragma once

#include <array>
#include <cstdint>

#include "dist/communicator.h"

namespace tf {

// The 128-byte ncclUniqueId, as plain bytes (so callers need not include nccl.h).
using NcclId = std::array<char, 128>;

// Rank 0 makes the id; every rank must receive the same bytes (MPI_Bcast, a shared file,
// a TCP store) before constructing its communicator.
NcclId nccl_make_id();
// Rank 0 writes `id` to `path` (atomically, via rename); other ranks poll for the file for
// up to timeout_s. For launches whose hosts share a file system.
NcclId nccl_exchange_id_via_file(const std::string& path, int rank, double timeout_s = 60);

class NcclCommunicator final : public Communicator {
 public:
  // Selects `device`, then joins the group of `size` ranks named by `id` as `rank` (blocks
  // until every rank joined).
  NcclCommunicator(int rank, int size, const NcclId& id, int device);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(const TensorView& buf) override;  // F32, F16, BF16 (device memory)
  void all_gather(const TensorView& send, const TensorView& recv) override;
  void broadcast(const TensorView& buf, int root) override;

 private:
  int rank_, size_, device_;
  void* comm_ = nullptr;    // ncclComm_t
  void* stream_ = nullptr;  // cudaStream_t
};

}  // namespace tf

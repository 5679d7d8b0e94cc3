// Collectives between the ranks of a tensor-parallel group: the one interface the sharded
// model calls, whatever carries the bytes (threads sharing memory in one process, NCCL
// between GPUs). Every rank calls the same collectives in the same order with tensors of
// the same shape; a call returns when this rank's result is complete.
#pragma once

#include "core/tensor.h"

namespace tf {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: buf = sum over ranks of buf; every rank ends with the same values.
  //   buf: any shape, F32 (NCCL also takes F16/BF16)
  virtual void all_reduce_sum(const TensorView& buf) = 0;
  // recv = the ranks' send buffers concatenated in rank order.
  //   send: n elements, recv: size() * n elements of send's dtype
  virtual void all_gather(const TensorView& send, const TensorView& recv) = 0;
  // buf = root's buf on every rank.
  virtual void broadcast(const TensorView& buf, int root) = 0;
};

}  // namespace tf

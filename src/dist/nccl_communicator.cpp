// NCCL collectives (compiled, never run here); see nccl_communicator.h.
#include "dist/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "core/error.h"

namespace tf {
namespace {

void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) fail("NCCL {} failed: {}", what, ncclGetErrorString(r));
}
void check(cudaError_t r, const char* what) {
  if (r != cudaSuccess) fail("CUDA {} failed: {}", what, cudaGetErrorString(r));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
    default: break;
  }
  fail("NCCL collectives do not take {} tensors", dtype_name(t));
}

}  // namespace

NcclId nccl_make_id() {
  ncclUniqueId id;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  NcclId out;
  static_assert(sizeof(id.internal) == sizeof(NcclId));
  std::memcpy(out.data(), id.internal, out.size());
  return out;
}

NcclId nccl_exchange_id_via_file(const std::string& path, int rank, double timeout_s) {
  NcclId id{};
  if (rank == 0) {
    id = nccl_make_id();
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(id.data(), std::streamsize(id.size()));
    std::filesystem::rename(tmp, path);
    return id;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    std::ifstream in(path, std::ios::binary);
    if (in && in.read(id.data(), std::streamsize(id.size()))) return id;
    if (std::chrono::steady_clock::now() > deadline)
      fail("rank {}: no NCCL id in '{}' after {} s (rank 0 writes it)", rank, path, timeout_s);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

NcclCommunicator::NcclCommunicator(int rank, int size, const NcclId& id, int device)
    : rank_(rank), size_(size), device_(device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = s;
  ncclUniqueId uid;
  std::memcpy(uid.internal, id.data(), id.size());
  ncclComm_t c = nullptr;
  check(ncclCommInitRank(&c, size, uid, rank), "ncclCommInitRank");
  comm_ = c;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) ncclCommDestroy(static_cast<ncclComm_t>(comm_));
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void NcclCommunicator::all_reduce_sum(const TensorView& buf) {
  auto s = static_cast<cudaStream_t>(stream_);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check(ncclAllReduce(buf.data, buf.data, size_t(buf.numel()), nccl_type(buf.dtype), ncclSum,
                      static_cast<ncclComm_t>(comm_), s), "ncclAllReduce");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

void NcclCommunicator::all_gather(const TensorView& send, const TensorView& recv) {
  if (recv.dtype != send.dtype || recv.numel() != send.numel() * size_)
    fail("all-gather: receive buffer {} does not hold {} x {} elements", recv.shape_str(), size_, send.numel());
  auto s = static_cast<cudaStream_t>(stream_);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check(ncclAllGather(send.data, recv.data, size_t(send.numel()), nccl_type(send.dtype),
                      static_cast<ncclComm_t>(comm_), s), "ncclAllGather");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

void NcclCommunicator::broadcast(const TensorView& buf, int root) {
  auto s = static_cast<cudaStream_t>(stream_);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check(ncclBroadcast(buf.data, buf.data, size_t(buf.numel()), nccl_type(buf.dtype), root,
                      static_cast<ncclComm_t>(comm_), s), "ncclBroadcast");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

}  // namespace tf

// The CUDA backend, first cut (issue 4): a correctness baseline on one GPU, one stream.
//
// Activations are BF16 (act_dtype), every op computes in FP32 and rounds once on the store;
// logits (matmul with an F32 output) are F32. Weights: upload() stores every float tensor as
// BF16, whatever dtype it is asked for (the op table of this cut reads BF16 weights only:
// cuBLAS BF16 GEMMs, BF16 norm weights, bias and embedding table). The KV pool is F32, BF16
// or F16 (not I8 yet) with the host backends' layout, [n_blocks, n_kv_heads, block_size,
// head_dim] per layer.
//
// All work goes to one stream in order. set_batch() copies the batch metadata with one
// cudaMemcpyAsync from a pinned staging buffer into a device buffer that only grows, so a
// forward makes no host round trip; copy_to_host()/copy_from_host() synchronize the stream.
//
// The front half (this class, cuda_backend.cpp) checks shapes and dtypes and dispatches to
// the launchers of the .cu files (back halves), which see pointers and sizes only.
#pragma once

#include <cuda_runtime_api.h>

#include <unordered_set>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/batch_args.h"

struct cublasContext;

namespace tf::cuda {

class CudaBackend final : public Backend {
 public:
  CudaBackend();  // on the current device; throws tf::Error if there is none
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  Device device() const override { return Device::Cuda; }
  DType act_dtype() const override { return DType::BF16; }

  TensorView alloc(DType dtype, std::initializer_list<int64_t> shape) override;
  void release(const TensorView& buf) override;
  TensorView upload(const TensorView& host, DType dtype) override;
  void copy_to_host(const TensorView& src, void* dst) override;
  void copy_from_host(const void* src, const TensorView& dst) override;
  void synchronize() override;

  void init_kv_cache(const KvCacheSpec& spec) override;
  const KvCacheSpec& kv_spec() const override { return kv_spec_; }
  void set_batch(const Batch& batch) override;

  void embedding(const TensorView& table, const TensorView& out) override;
  void rms_norm(const TensorView& x, const TensorView& w, float eps, const TensorView& out) override;
  void add_rms_norm(const TensorView& residual, const TensorView& delta, const TensorView& w, float eps,
                    const TensorView& out) override;
  void matmul(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out) override;
  void rope_kv_write(int layer, const TensorView& qkv, const TensorView& inv_freq,
                     const AttentionParams& p) override;
  void attention(int layer, const TensorView& qkv, const AttentionParams& p, const TensorView& out) override;
  void swiglu(const TensorView& gate_up, const TensorView& out) override;
  void gather_logit_rows(const TensorView& x, const TensorView& out) override;

  // K or V of one layer as [n_blocks * n_kv_heads * block_size, head_dim] of kv_spec().dtype,
  // on the device (tests read and poison them with copy_to_host / copy_from_host).
  const TensorView& k_cache(int layer) const { return k_cache_[size_t(layer)]; }
  const TensorView& v_cache(int layer) const { return v_cache_[size_t(layer)]; }
  cudaStream_t stream() const { return stream_; }

 private:
  void* alloc_bytes(size_t bytes);
  void free_kv_cache();
  void check_layer(int layer, const AttentionParams& p) const;

  cudaStream_t stream_ = nullptr;
  cublasContext* cublas_ = nullptr;
  std::unordered_set<void*> buffers_;  // everything alloc()/upload() handed out, freed at the end
  KvCacheSpec kv_spec_;
  std::vector<TensorView> k_cache_, v_cache_;  // per layer

  // Batch metadata: the host copy (sizes, checks), and the device copy the kernels read.
  // Both buffers hold all arrays back to back; staged_ marks the end of the last copy out
  // of the pinned buffer, which set_batch waits for before overwriting it.
  Batch batch_;
  int32_t* batch_pinned_ = nullptr;
  int32_t* batch_device_ = nullptr;
  size_t batch_capacity_ = 0;  // int32 elements of both buffers
  cudaEvent_t staged_ = nullptr;
  BatchArgs dev_batch_;
};

}  // namespace tf::cuda

// Helpers shared by the front-half files of the CUDA backend (cuda_backend.cpp, cuda_ops.cpp,
// cuda_matmul.cpp, cuda_attention.cpp, cuda_graphs.cpp): dtype and residency checks and typed
// pointers. Internal to src/backend/cuda.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

#include "backend/cuda/gemm.cuh"
#include "backend/shape_checks.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tf::cuda::detail {

using bf16 = __nv_bfloat16;

// cuBLAS's workspace, shared by cublasGemmEx and the cuBLASLt algorithms (one stream).
constexpr size_t kCublasWorkspaceBytes = 32u << 20;

// Times kernels as a decode step meets them, to choose among candidates: each launch alone
// between two events with the L2 emptied before it by a 128 MB write (a step reads every
// layer's weights once, so they never come from L2), after one warm-up; the median of the
// launches, so one launch delayed by something else does not move the answer. Without the
// scratch for the write (its allocation failed) the L2 stays warm.
class ColdTimer {
 public:
  explicit ColdTimer(cudaStream_t stream);
  ~ColdTimer();
  ColdTimer(const ColdTimer&) = delete;
  ColdTimer& operator=(const ColdTimer&) = delete;
  double us(const std::function<void()>& launch, int reps);

 private:
  static constexpr size_t kFlushBytes = size_t(128) << 20;
  cudaStream_t stream_;
  void* flush_ = nullptr;
  cudaEvent_t ev_[2] = {};
};

inline bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

// A tensor an op reads or writes: on the GPU, of the expected dtype.
inline void check_dev(const TensorView& t, DType dtype, const char* what) {
  TF_ASSERT(t.data && t.device == Device::Cuda, "{}: not a CUDA tensor (allocate it with the CUDA backend)", what);
  TF_ASSERT(t.dtype == dtype, "{}: dtype {}, the CUDA backend wants {}", what, dtype_name(t.dtype),
            dtype_name(dtype));
}

// The row scales of a layer's I8 pool (k_scale_ / v_scale_), or nullptr for float storage.
inline float* scales_of(const std::vector<TensorView>& scales, int layer) {
  return scales.empty() ? nullptr : scales[size_t(layer)].as<float>();
}

// The device view of a W8/W4/FP8 weight for the quantized kernels (empty for float weights);
// TF_ASSERT on a quantized view without its parameters.
inline QuantWeightArgs quant_args(const TensorView& w) {
  if (!dtype_is_quantized(w.dtype)) return {};
  check_quantized(w);
  return QuantWeightArgs{.dtype = w.dtype, .q = static_cast<const uint8_t*>(w.data), .scales = w.scales,
                         .zeros = static_cast<const uint8_t*>(w.zeros), .group_size = w.group_size};
}

inline const bf16* bf(const TensorView& t) { return static_cast<const bf16*>(t.data); }
inline bf16* bf_mut(const TensorView& t) { return static_cast<bf16*>(t.data); }

// Element i of a host float tensor (F32, BF16 or F16) as float.
inline float host_load(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::F32: return t.as<const float>()[i];
    case DType::BF16: return bf16_to_f32(t.as<const uint16_t>()[i]);
    default: return f16_to_f32(t.as<const uint16_t>()[i]);
  }
}

}  // namespace tf::cuda::detail

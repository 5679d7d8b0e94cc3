// A non-owning view of a dense, row-major tensor on some device. Kernels see pointers, sizes
// and strides through this; who owns the memory (a mapped file, a backend buffer) is not its
// business.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace tf {

enum class Device : uint8_t { Host, Cuda };

struct TensorView {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::F32;
  Device device = Device::Host;
  int n_dims = 0;
  std::array<int64_t, kMaxDims> shape{};  // shape[0] is the slowest dimension
  // Quantized weights (dtype W8 / W4 / FP8; src/quant/formats.h): the per-row or per-group
  // parameters beside `data`, on the same device. W8/FP8: scales F32 [m]; W4: scales F16
  // [m, k / group_size] and zeros U8 [m, k / group_size]. Unused (null, 0) otherwise.
  void* scales = nullptr;
  void* zeros = nullptr;
  int32_t group_size = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < n_dims; ++i) n *= shape[i];
    return n;
  }
  // Bytes of `data` (for W8/W4/FP8 without their scale and zero arrays).
  size_t nbytes() const { return size_t(n_rows()) * dtype_row_bytes(dtype, row_size()); }
  int64_t dim(int i) const { return shape[i]; }
  // Elements per row of the last dimension ("inner" size).
  int64_t row_size() const { return n_dims ? shape[n_dims - 1] : 1; }
  int64_t n_rows() const { return row_size() ? numel() / row_size() : 0; }

  template <typename T>
  T* as() const { return static_cast<T*>(data); }

  std::string shape_str() const;
};

inline TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> shape,
                            Device device = Device::Host) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  TF_ASSERT(shape.size() <= TensorView::kMaxDims);
  for (int64_t s : shape) v.shape[v.n_dims++] = s;
  return v;
}

}  // namespace tf

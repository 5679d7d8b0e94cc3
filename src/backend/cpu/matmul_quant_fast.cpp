// CPU matmul for quantized weights on integer dot products (kernels/qmatmul.cpp): each row
// of x is quantized to INT8 per block of 32 once per call, then the weight row blocks are
// split across the pool's threads as for float weights (matmul.cpp), so each weight byte
// is read once per call.
#include <algorithm>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/shape_checks.h"

namespace tf {
namespace {

constexpr int64_t kMinChunkBytes = 16 * 1024;  // as matmul.cpp

// The kernel format of w, or kCount when the integer kernels do not cover it.
cpu::QFormat qformat_of(const TensorView& w) {
  const int64_t k = w.shape[1];
  if (k % 32 != 0) return cpu::QFormat::kCount;
  switch (w.dtype) {
    case DType::W8: return w.scales ? cpu::QFormat::W8 : cpu::QFormat::kCount;
    case DType::W4:
      return w.scales && w.zeros && w.group_size > 0 && w.group_size % 32 == 0 && k % w.group_size == 0
                 ? cpu::QFormat::W4
                 : cpu::QFormat::kCount;
    case DType::Q8_0: return cpu::QFormat::Q8_0;
    case DType::Q4_0: return cpu::QFormat::Q4_0;
    case DType::Q4_K: return k % 256 == 0 ? cpu::QFormat::Q4_K : cpu::QFormat::kCount;
    default: return cpu::QFormat::kCount;
  }
}

}  // namespace

bool CpuBackend::matmul_quant_fast(const TensorView& x, const TensorView& w, const TensorView& bias,
                                   const TensorView& out) {
  if (x.n_dims != 2 || w.n_dims != 2 || x.dtype != DType::F32 || out.dtype != DType::F32) return false;
  const cpu::QFormat fmt = qformat_of(w);
  const cpu::KernelTable& kt = cpu::kernels();
  if (fmt == cpu::QFormat::kCount || !kt.qmatmul_blocks[size_t(fmt)]) return false;
  check_matmul(x, w, bias, out);
  const int64_t n = x.shape[0], k = x.shape[1], m = w.shape[0], nb = k / 32;
  ThreadPool& tp = pool();

  // ---- quantize the activations, rows split across the threads
  act_q_.resize(size_t(n * k));
  act_ds_.resize(size_t(2 * n * nb));
  float* d = act_ds_.data();
  float* s = act_ds_.data() + n * nb;
  const bool w4_order = fmt == cpu::QFormat::W4;
  const auto quantize = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      kt.quantize_row(x.as<float>() + r * k, k, w4_order, act_q_.data() + r * k, d + r * nb, s + r * nb);
  };
  if (n < 8) {
    quantize(0, n);
  } else {
    const int64_t chunks = tp.chunks_for(n, 4);
    tp.parallel_for(chunks, [&](int64_t c, int) { quantize(c * n / chunks, (c + 1) * n / chunks); });
  }

  // ---- weight row blocks against all tokens
  const cpu::QMatmulArgs a{.x = {.q = act_q_.data(), .d = d, .s = s, .n = n, .k = k}, .w = &w,
                           .bias = bias_f32(bias), .out = out.as<float>(), .m = m};
  const int64_t block_rows = kt.qmatmul_block_rows, n_blocks = (m + block_rows - 1) / block_rows;
  const int64_t block_bytes = block_rows * int64_t(dtype_row_bytes(w.dtype, k));
  const int64_t n_chunks = tp.chunks_for(n_blocks, std::max<int64_t>(1, kMinChunkBytes / std::max<int64_t>(1, block_bytes)));
  const auto kernel = kt.qmatmul_blocks[size_t(fmt)];
  tp.parallel_for(n_chunks, [&](int64_t c, int) { kernel(a, c * n_blocks / n_chunks, (c + 1) * n_blocks / n_chunks); });
  return true;
}

}  // namespace tf

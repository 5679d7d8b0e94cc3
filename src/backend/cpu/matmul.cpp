// CPU GEMM / GEMV front: out[n, m] = x[n, k] @ w[m, k]^T (+ bias), the weight rows split
// across the pool's threads in blocks (kernels/matmul.cpp has the register tiles), so each
// weight byte is read from memory once per call whatever n is (decode at batch n).
#include <algorithm>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/shape_checks.h"
#include "core/host_threads.h"

namespace tf {

// A chunk of weight rows should stream at least this many bytes (or do as much work), so
// that claiming it (one atomic) and the fork/join of the op stay small beside it.
constexpr int64_t kMinChunkBytes = 16 * 1024;

CpuBackend::CpuBackend(const BackendOptions& opt)
    : int8_activations_(opt.int8_activations), bf16_activations_(opt.bf16_activations), huge_pages_(opt.huge_pages) {
  (void)cpu::active_isa();
}

ThreadPool& CpuBackend::pool() {
  const int n = host_threads();
  if (!pool_ || pool_->size() != n) pool_ = std::make_unique<ThreadPool>(n);
  return *pool_;
}

float* CpuBackend::scratch(int t, size_t n) {
  if (scratch_.size() <= size_t(t)) scratch_.resize(size_t(t) + 1);
  if (scratch_[size_t(t)].size() < n) scratch_[size_t(t)].resize(n);
  return scratch_[size_t(t)].data();
}

const float* CpuBackend::bias_f32(const TensorView& bias) {
  if (!bias.data) return nullptr;
  if (bias.dtype == DType::F32) return bias.as<float>();
  bias_buf_.resize(size_t(bias.numel()));
  load_row_f32(bias.data, bias.dtype, 0, bias.numel(), bias_buf_.data());
  return bias_buf_.data();
}

// Prefill on AMX tiles (kernels/gemm_amx.cpp) with bf16_activations where the level has the
// kernel and the process may use the tiles: BF16 weights, k and m multiples of 32, a full
// tile of tokens or more. The activations rounded to BF16 into tiles (split across the
// threads), then the blocks of 32 weight rows.
bool CpuBackend::gemm_amx(const cpu::MatmulArgs& a) {
  using cpu::kAmxBlockRows, cpu::kAmxTileTokens;
  const cpu::KernelTable& kt = cpu::kernels();
  if (!bf16_activations_ || !kt.gemm_amx_blocks || a.w_dtype != DType::BF16 || !cpu::amx_gemm_shape(a.n, a.k, a.m) ||
      !cpu::amx_tiles_permitted())
    return false;
  ThreadPool& tp = pool();
  const int64_t n_tiles = (a.n + kAmxTileTokens - 1) / kAmxTileTokens;
  xv_.resize(size_t(n_tiles * a.k * kAmxTileTokens));
  const int64_t parts = std::min<int64_t>(n_tiles, tp.size());
  tp.parallel_for(parts, [&](int64_t c, int) {
    kt.gemm_amx_pack_x(a.x, a.n, a.k, c * n_tiles / parts, (c + 1) * n_tiles / parts, xv_.data());
  });
  const int64_t n_blocks = a.m / kAmxBlockRows;
  const int64_t n_chunks =
      tp.chunks_for(n_blocks, std::max<int64_t>(1, kMinChunkBytes / (kAmxBlockRows * a.k * int64_t(sizeof(uint16_t)))));
  tp.parallel_for(n_chunks, [&](int64_t c, int) {
    kt.gemm_amx_blocks(a, xv_.data(), c * n_blocks / n_chunks, (c + 1) * n_blocks / n_chunks);
  });
  return true;
}

void CpuBackend::matmul(const TensorView& x, const TensorView& w, const TensorView& bias,
                        const TensorView& out) {
  if (dtype_is_quantized(w.dtype)) {
    if (!matmul_quant_fast(x, w, bias, out)) matmul_dequant(x, w, bias, out);
    return;
  }
  check_matmul(x, w, bias, out);
  TF_ASSERT(w.dtype == DType::F32 || w.dtype == DType::BF16 || w.dtype == DType::F16,
            "matmul: weight dtype {} unsupported", dtype_name(w.dtype));
  const cpu::KernelTable& kt = cpu::kernels();
  const cpu::MatmulArgs a{.x = x.as<float>(), .w = w.data, .w_dtype = w.dtype, .bias = bias_f32(bias),
                          .out = out.as<float>(), .n = x.shape[0], .k = x.shape[1], .m = w.shape[0]};
  if (gemm_amx(a)) return;
  const int64_t row_bytes = a.k * int64_t(dtype_size(w.dtype));
  if (a.n >= kt.gemm_tile_tokens) return gemm_float(a, row_bytes);
  ThreadPool& tp = pool();
  const int64_t n_blocks = (a.m + kt.matmul_block_rows - 1) / kt.matmul_block_rows;
  const int64_t n_chunks =
      tp.chunks_for(n_blocks, std::max<int64_t>(1, kMinChunkBytes / std::max<int64_t>(1, kt.matmul_block_rows * row_bytes)));
  for (int t = 0; t < tp.size(); ++t) scratch(t, size_t(kt.matmul_scratch_floats(a.n, a.k)));
  tp.parallel_for(n_chunks, [&](int64_t c, int t) {
    kt.matmul_blocks(a, c * n_blocks / n_chunks, (c + 1) * n_blocks / n_chunks, scratch_[size_t(t)].data());
  });
}

// Prefill: the activations transposed into token tiles once (the tiles split across the
// threads), then the weight row blocks.
void CpuBackend::gemm_float(const cpu::MatmulArgs& a, int64_t row_bytes) {
  const cpu::KernelTable& kt = cpu::kernels();
  ThreadPool& tp = pool();
  const int64_t n_blocks = (a.m + kt.gemm_block_rows - 1) / kt.gemm_block_rows;
  const int64_t n_chunks =
      tp.chunks_for(n_blocks, std::max<int64_t>(1, kMinChunkBytes / std::max<int64_t>(1, kt.gemm_block_rows * row_bytes)));
  for (int t = 0; t < tp.size(); ++t) scratch(t, size_t(kt.gemm_scratch_floats(a.n)));
  const int64_t n_tiles = (a.n + kt.gemm_tile_tokens - 1) / kt.gemm_tile_tokens;
  xt_.resize(size_t(n_tiles * a.k * kt.gemm_tile_tokens));
  const int64_t parts = std::min<int64_t>(n_tiles, tp.size());
  tp.parallel_for(parts, [&](int64_t c, int) {
    kt.gemm_pack_x(a.x, a.n, a.k, c * n_tiles / parts, (c + 1) * n_tiles / parts, xt_.data());
  });
  tp.parallel_for(n_chunks, [&](int64_t c, int t) {
    kt.gemm_blocks(a, xt_.data(), c * n_blocks / n_chunks, (c + 1) * n_blocks / n_chunks, scratch_[size_t(t)].data());
  });
}

}  // namespace tf

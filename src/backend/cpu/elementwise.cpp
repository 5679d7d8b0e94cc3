// Row-wise CPU ops: embedding lookup, RMSNorm, SwiGLU, and the row gather before the LM
// head. Rows are independent: a decode step's few rows run on the calling thread, larger
// batches are split across the pool in chunks of rows.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/shape_checks.h"

namespace tf {
namespace {

// Rows per chunk below which an op is not worth a fork/join.
constexpr int64_t kMinRowsPerChunk = 8;

// fn(r0, r1) over rows [0, rows), split across the pool when there are enough of them.
template <typename Fn>
void for_rows(ThreadPool& pool, int64_t rows, Fn&& fn) {
  if (rows < 2 * kMinRowsPerChunk) return fn(int64_t(0), rows);
  const int64_t n_chunks = pool.chunks_for(rows, kMinRowsPerChunk);
  pool.parallel_for(n_chunks, [&](int64_t c, int) { fn(c * rows / n_chunks, (c + 1) * rows / n_chunks); });
}

}  // namespace

void CpuBackend::embedding(const TensorView& table, const TensorView& out) {
  const auto& ids = batch().token_ids;
  const int64_t d = table.shape[1], n = int64_t(ids.size());
  check_2d(out, n, d, "embedding out");
  const cpu::KernelTable& kt = cpu::kernels();
  const size_t row_bytes = size_t(d) * dtype_size(table.dtype);
  for (int64_t t = 0; t < n; ++t) {
    TF_ASSERT(ids[size_t(t)] >= 0 && ids[size_t(t)] < table.shape[0], "token id {} out of range", ids[size_t(t)]);
    kt.widen_row(table.as<uint8_t>() + size_t(ids[size_t(t)]) * row_bytes, table.dtype, d, out.as<float>() + t * d);
  }
}

void CpuBackend::rms_norm(const TensorView& x, const TensorView& w, float eps,
                          const TensorView& out) {
  const int64_t d = x.row_size(), rows = x.n_rows();
  const cpu::KernelTable& kt = cpu::kernels();
  const float* wf = w.as<float>();
  if (w.dtype != DType::F32) {
    float* buf = scratch(0, size_t(d));
    kt.widen_row(w.data, w.dtype, d, buf);
    wf = buf;
  }
  for_rows(pool(), rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) kt.rms_norm_row(x.as<float>() + r * d, wf, d, eps, out.as<float>() + r * d);
  });
}

void CpuBackend::swiglu(const TensorView& gate_up, const TensorView& out) {
  const int64_t d_ff = out.shape[1], rows = out.shape[0];
  check_2d(gate_up, rows, 2 * d_ff, "swiglu gate_up");
  const cpu::KernelTable& kt = cpu::kernels();
  for_rows(pool(), rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* g = gate_up.as<float>() + r * 2 * d_ff;
      kt.swiglu_row(g, g + d_ff, d_ff, out.as<float>() + r * d_ff);
    }
  });
}

void CpuBackend::gather_logit_rows(const TensorView& x, const TensorView& out) {
  const int64_t d = x.shape[1];
  check_2d(out, batch().n_out(), d, "gather_logit_rows out");
  for (int32_t i = 0; i < batch().n_out(); ++i)
    std::copy_n(x.as<float>() + int64_t(batch().logits_rows[size_t(i)]) * d, d, out.as<float>() + i * d);
}

}  // namespace tf

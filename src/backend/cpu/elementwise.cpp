// Row-wise CPU ops: embedding lookup, RMSNorm, SwiGLU and GeGLU, the mixture-of-experts
// MLPs (grouped by expert), and the row gather before the LM head. Rows are independent: a
// decode step's few rows run on the calling thread, larger batches are split across the pool
// in chunks of rows.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/shape_checks.h"
#include "quant/quantized_rows.h"
#include "quant/quantized_weight.h"

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

inline float gelu_tanh(float g) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * (g + 0.044715f * g * g * g)));
}

}  // namespace

void CpuBackend::embedding(const TensorView& table, const TensorView& out) {
  const auto& ids = batch().token_ids;
  const int64_t d = table.shape[1], n = int64_t(ids.size());
  check_2d(out, n, d, "embedding out");
  const cpu::KernelTable& kt = cpu::kernels();
  const size_t row_bytes = dtype_row_bytes(table.dtype, d);
  for (int64_t t = 0; t < n; ++t) {
    TF_ASSERT(ids[size_t(t)] >= 0 && ids[size_t(t)] < table.shape[0], "token id {} out of range", ids[size_t(t)]);
    if (dtype_is_quantized(table.dtype))  // a GGUF table (reads_gguf_block): the reference's row
      dequantize_row(table, ids[size_t(t)], out.as<float>() + t * d);
    else
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

// GeGLU (tanh approximation) in scalar code: the same at every ISA level.
void CpuBackend::geglu(const TensorView& gate_up, const TensorView& out) {
  const int64_t d_ff = out.shape[1], rows = out.shape[0];
  check_2d(gate_up, rows, 2 * d_ff, "geglu gate_up");
  for_rows(pool(), rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* g = gate_up.as<float>() + r * 2 * d_ff;
      const float* u = g + d_ff;
      float* o = out.as<float>() + r * d_ff;
      for (int64_t i = 0; i < d_ff; ++i) o[i] = gelu_tanh(g[i]) * u[i];
    }
  });
}

// Tokens grouped by expert: each expert that some (row, slot) pair of the batch chose gets
// those pairs' rows of x gathered into one block [m_e, d_model], which goes through the
// expert's gate|up rows and down rows as two matmuls (CpuBackend::matmul on the pool), so a
// chosen expert's weights are read once per step however many tokens chose it, and an
// unchosen one's not at all. Each pair's output lands in its own row of y [rows * top_k,
// d_model]; out[r] = sum_j weights[r, j] y[r * top_k + j] then adds them in j order, as the
// reference does, so the grouping changes no sum.
void CpuBackend::moe_experts(const TensorView& x, const TensorView& ids, const TensorView& weights,
                             const TensorView& w_gate_up, const TensorView& w_down, const MoeParams& p,
                             const TensorView& out) {
  const MoeShape m = check_moe(x, ids, weights, w_gate_up, w_down, p, out);
  // Each expert's rows of the stacked weights go through matmul, dense or quantized alike.
  const int64_t k = p.top_k, n_pairs = m.rows * k, d = m.d_model, f = m.d_ff;
  const int32_t* id = ids.as<const int32_t>();
  std::vector<std::vector<int64_t>> pairs(size_t(p.n_experts));  // [expert] pair indices r * k + j
  for (int64_t i = 0; i < n_pairs; ++i) {
    TF_ASSERT(id[i] >= 0 && id[i] < p.n_experts, "moe_experts: expert id {} of {}", id[i], p.n_experts);
    pairs[size_t(id[i])].push_back(i);
  }
  std::vector<float> y(size_t(n_pairs * d)), xs, gu, act, ys;
  for (int64_t e = 0; e < p.n_experts; ++e) {
    const std::vector<int64_t>& mine = pairs[size_t(e)];
    const int64_t me = int64_t(mine.size());
    if (me == 0) continue;
    xs.resize(size_t(me * d));
    for (int64_t i = 0; i < me; ++i)
      std::copy_n(x.as<const float>() + (mine[size_t(i)] / k) * d, d, xs.data() + i * d);
    gu.resize(size_t(me * 2 * f));
    act.resize(size_t(me * f));
    ys.resize(size_t(me * d));
    const TensorView xv = make_view(xs.data(), DType::F32, {me, d}), guv = make_view(gu.data(), DType::F32, {me, 2 * f}),
                     actv = make_view(act.data(), DType::F32, {me, f}), yv = make_view(ys.data(), DType::F32, {me, d});
    matmul(xv, quantized_rows(w_gate_up, e * 2 * f, 2 * f), TensorView{}, guv);
    swiglu(guv, actv);
    matmul(actv, quantized_rows(w_down, e * d, d), TensorView{}, yv);
    for (int64_t i = 0; i < me; ++i) std::copy_n(ys.data() + i * d, d, y.data() + mine[size_t(i)] * d);
  }
  const float* wt = weights.as<const float>();
  for_rows(pool(), m.rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* o = out.as<float>() + r * d;
      for (int64_t c = 0; c < d; ++c) o[c] = 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        const float w = wt[r * k + j];
        const float* yr = y.data() + (r * k + j) * d;
        for (int64_t c = 0; c < d; ++c) o[c] += w * yr[c];
      }
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

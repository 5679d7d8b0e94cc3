// CPU paged attention and the fused RoPE + KV write.
//
// Attention: every (token, query head) pair is independent; threads split them. For one
// pair we walk the sequence's block table over key positions [first, q_pos] (first > 0 only
// with a sliding window), compute scores, softmax with the running max subtracted, and
// accumulate V. One code path serves prefill, chunked prefill and decode, because this step's
// K/V were written to the cache before attention runs.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/shape_checks.h"

namespace tf {
namespace {

void rope_head(float* v, int64_t head_dim, int32_t pos, const float* inv_freq) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float angle = float(pos) * inv_freq[i];
    const float c = std::cos(angle), s = std::sin(angle);
    const float a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

// Row `off` of a KV pool as F32: a pointer into the pool for F32 storage, else widened into buf.
inline const float* kv_row(const TensorView& pool, int64_t off, int64_t hd, float* buf) {
  if (pool.dtype == DType::F32) return pool.as<float>() + off;
  load_row_f32(pool.data, pool.dtype, off, hd, buf);
  return buf;
}

}  // namespace

void CpuBackend::rope_kv_write(int layer, const TensorView& qkv, const TensorView& inv_freq,
                               const AttentionParams& p) {
  const int64_t hd = p.head_dim, row = (p.n_heads + 2 * p.n_kv_heads) * hd;
  const int32_t n = batch().n_tokens();
  check_2d(qkv, n, row, "rope_kv_write qkv");
  const TensorView& kc = k_cache(layer);
  const TensorView& vc = v_cache(layer);
#pragma omp parallel for schedule(static) if (n > 4)
  for (int32_t t = 0; t < n; ++t) {
    float* r = qkv.as<float>() + t * row;
    for (int64_t h = 0; h < p.n_heads + p.n_kv_heads; ++h)
      rope_head(r + h * hd, hd, batch().positions[size_t(t)], inv_freq.as<float>());
    const int64_t slot = batch().slot_mapping[size_t(t)];
    for (int64_t h = 0; h < p.n_kv_heads; ++h) {
      const float* k = r + (p.n_heads + h) * hd;
      const float* v = r + (p.n_heads + p.n_kv_heads + h) * hd;
      const int64_t off = kv_offset(slot, h);
      if (kc.dtype == DType::F32) {
        std::copy_n(k, hd, kc.as<float>() + off);
        std::copy_n(v, hd, vc.as<float>() + off);
      } else {
        for (int64_t i = 0; i < hd; ++i) {
          store_f32(kc.data, kc.dtype, off + i, k[i]);
          store_f32(vc.data, vc.dtype, off + i, v[i]);
        }
      }
    }
  }
}

void CpuBackend::attention(int layer, const TensorView& qkv, const AttentionParams& p,
                           const TensorView& out) {
  const Batch& b = batch();
  const int64_t hd = p.head_dim, row = (p.n_heads + 2 * p.n_kv_heads) * hd;
  const int64_t group = p.n_heads / p.n_kv_heads, bs = kv_spec().block_size;
  const int32_t n = b.n_tokens();
  check_2d(out, n, p.n_heads * hd, "attention out");
  const TensorView& kc = k_cache(layer);
  const TensorView& vc = v_cache(layer);

  // token -> sequence, so that (token, head) pairs can be one flat parallel loop
  std::vector<int32_t> seq_of(static_cast<size_t>(n));
  for (int32_t s = 0; s < b.n_seqs(); ++s)
    for (int32_t t = b.seq_starts[size_t(s)]; t < b.seq_starts[size_t(s) + 1]; ++t) seq_of[size_t(t)] = s;

#pragma omp parallel
  {
    const size_t hd_sz = static_cast<size_t>(hd);
    std::vector<float> scores, acc(hd_sz), kbuf(hd_sz), vbuf(hd_sz);
#pragma omp for schedule(dynamic, 1) collapse(2)
    for (int32_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < p.n_heads; ++h) {
        const int32_t* table = b.block_tables.data() + int64_t(seq_of[size_t(t)]) * b.max_blocks;
        const int32_t qpos = b.positions[size_t(t)];
        const int32_t first =
            p.sliding_window > 0 ? std::max<int32_t>(0, qpos - int32_t(p.sliding_window) + 1) : 0;
        const float* q = qkv.as<float>() + t * row + h * hd;
        const int64_t kvh = h / group;
        scores.resize(size_t(qpos - first + 1));
        float mx = -INFINITY;
        for (int32_t kp = first; kp <= qpos; ++kp) {
          const int64_t off = kv_offset(int64_t(table[kp / bs]) * bs + kp % bs, kvh);
          const float* k = kv_row(kc, off, hd, kbuf.data());
          float dot = 0;
#pragma omp simd reduction(+ : dot)
          for (int64_t i = 0; i < hd; ++i) dot += q[i] * k[i];
          scores[size_t(kp - first)] = dot * p.scale;
          mx = std::max(mx, dot * p.scale);
        }
        float sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int32_t kp = first; kp <= qpos; ++kp) {
          const float e = std::exp(scores[size_t(kp - first)] - mx);
          sum += e;
          const int64_t off = kv_offset(int64_t(table[kp / bs]) * bs + kp % bs, kvh);
          const float* v = kv_row(vc, off, hd, vbuf.data());
#pragma omp simd
          for (int64_t i = 0; i < hd; ++i) acc[size_t(i)] += e * v[i];
        }
        float* o = out.as<float>() + t * p.n_heads * hd + h * hd;
        const float inv = 1.0f / sum;
        for (int64_t i = 0; i < hd; ++i) o[i] = acc[size_t(i)] * inv;
      }
    }
  }
}

}  // namespace tf

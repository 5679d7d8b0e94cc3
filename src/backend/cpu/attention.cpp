// CPU paged attention and the fused RoPE + KV write.
//
// Attention (one code path for prefill, chunked prefill and decode, because this step's K/V
// were written to the cache before attention runs). A work item is one sequence, one KV head
// and a tile of consecutive tokens of that sequence (max(1, kTileRows / group) of them); its
// rows are the (token, query head) pairs of the tile whose query heads share the KV head
// (GQA: the `group` heads h with h / group == kv head), so every K/V row is loaded and
// converted once per item, not once per query head and token. Threads take items
// one at a time from the pool (core/thread_pool.h), those that see the most keys first. (One KV head of one decoding sequence is
// one item, so a batch of a single MQA sequence runs on one thread: splitting the keys across
// threads, as flash-decoding does, is not done.)
//
// An item walks its keys, positions [min first, max q_pos] over its tokens, in tiles of
// kTileKeys keys gathered through the block table (a tile may span blocks):
//   1. load:    K and V rows of the tile as F32 (pointers into an F32 pool; BF16/F16
//               widened, I8 and FP8 dequantized as q * scale into a small tile buffer);
//   2. scores:  q_r . k_j for every row and key of the tile, in register blocks of 4 rows x
//               2 keys, vectorised over head_dim;
//   3. softmax: online (FlashAttention) over s = scale * q_r . k_j, keys outside
//               [first_r, pos_r] (causal edge, sliding window) masked: m_r = running max,
//               l_r = running sum of exp(s - m_r), p = exp(s - m_r); when m_r grows, acc_r
//               and l_r are rescaled by exp(m_old - m_new);
//   4. values:  acc[r] += sum_j p[r][j] * v_j, in register blocks of 2 rows x 4 vectors of
//               head_dim, accumulated across the tile's keys.
// At the end out_r = acc_r / l_r. Compared with the two-pass softmax of the reference this
// only reorders float operations (results agree to ~1e-7 relative, see the op tests).
// The item kernel is kernels/attention.cpp (one copy per ISA level); this file builds the
// items and hands them to the pool's threads.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/shape_checks.h"
#include "quant/kv_fp8.h"
#include "quant/kv_int8.h"

namespace tf {

cpu::AttendScratch::AttendScratch(int max_rows_, int64_t hd)
    : max_rows(max_rows_),
      head_dim(hd),
      acc(size_t(max_rows_ * hd)),
      s(size_t(max_rows_ * kTileKeys)),
      kbuf(size_t(kTileKeys * hd)),
      vbuf(size_t(kTileKeys * hd)),
      m(size_t(max_rows_)),
      l(size_t(max_rows_)),
      q(size_t(max_rows_)),
      krow(kTileKeys),
      vrow(kTileKeys),
      out(size_t(max_rows_)),
      acc_rows(size_t(max_rows_)),
      p_rows(size_t(max_rows_)),
      first(size_t(max_rows_)),
      last(size_t(max_rows_)) {
  for (int r = 0; r < max_rows_; ++r) {
    acc_rows[size_t(r)] = acc.data() + r * hd;
    p_rows[size_t(r)] = s.data() + r * kTileKeys;
  }
}

namespace {

constexpr int kTileRows = 16;  // target rows (tokens x group) per item; at least one token

// Rotates one head in place: (v[i], v[i + half]) by the angle whose cos/sin are c[i], s[i].
void rope_head(float* v, int64_t half, const float* c, const float* s) {
  for (int64_t i = 0; i < half; ++i) {
    const float a = v[i], b = v[i + half];
    v[i] = a * c[i] - b * s[i];
    v[i + half] = b * c[i] + a * s[i];
  }
}

// RMSNorm of one head over head_dim with weight `norm` (the reference's q/k norm in F32).
void norm_head(float* v, int64_t hd, float eps, const float* norm) {
  float ss = 0;
  for (int64_t i = 0; i < hd; ++i) ss += v[i] * v[i];
  const float inv = 1.0f / std::sqrt(ss / float(hd) + eps);
  for (int64_t i = 0; i < hd; ++i) v[i] = v[i] * inv * norm[i];
}

}  // namespace

void CpuBackend::rope_kv_write(int layer, const TensorView& qkv, const QkRope& rope, const AttentionParams& p) {
  const int64_t hd = p.head_dim, row = (p.n_heads + 2 * p.n_kv_heads) * hd;
  const int32_t n = batch().n_tokens();
  check_2d(qkv, n, row, "rope_kv_write qkv");
  check_qk_rope(rope, hd);
  const int64_t half = rope.inv_freq.numel();  // rotated pairs (i, i + half): the first 2 * half dims
  const TensorView& kc = k_cache(layer);
  const TensorView& vc = v_cache(layer);
  const int32_t* slots = slot_mapping(layer);
  std::vector<float> q_norm, k_norm;
  if (rope.q_norm.data) q_norm.resize(size_t(hd)), load_row_f32(rope.q_norm.data, rope.q_norm.dtype, 0, hd, q_norm.data());
  if (rope.k_norm.data) k_norm.resize(size_t(hd)), load_row_f32(rope.k_norm.data, rope.k_norm.dtype, 0, hd, k_norm.data());
  const auto tokens = [&](int64_t t0, int64_t t1, int thread) {
    // cos/sin of the token's angles (times mscale), once for all its heads
    float* cs = scratch(thread, size_t(hd));
    for (int64_t t = t0; t < t1; ++t) {
      float* r = qkv.as<float>() + t * row;
      const int32_t pos = batch().positions[size_t(t)];
      const float* freq =
          (rope.inv_freq_long.data && pos >= rope.long_from ? rope.inv_freq_long : rope.inv_freq).as<float>();
      for (int64_t i = 0; i < half; ++i) {
        const float angle = float(pos) * freq[i];
        cs[i] = std::cos(angle) * rope.mscale;
        cs[half + i] = std::sin(angle) * rope.mscale;
      }
      for (int64_t h = 0; h < p.n_heads + p.n_kv_heads; ++h) {
        const std::vector<float>& norm = h < p.n_heads ? q_norm : k_norm;
        if (!norm.empty()) norm_head(r + h * hd, hd, rope.eps, norm.data());
        rope_head(r + h * hd, half, cs, cs + half);
      }
      const int64_t slot = slots[t];
      for (int64_t h = 0; h < p.n_kv_heads; ++h) {
        const float* k = r + (p.n_heads + h) * hd;
        const float* v = r + (p.n_heads + p.n_kv_heads + h) * hd;
        const int64_t pr = kv_row_index(layer, slot, h), off = pr * hd;
        switch (kc.dtype) {
          case DType::F32:
            std::copy_n(k, hd, kc.as<float>() + off);
            std::copy_n(v, hd, vc.as<float>() + off);
            break;
          case DType::I8:
            k_scale(layer).as<float>()[pr] = quantize_row_kv_int8(k, hd, kc.as<int8_t>() + off);
            v_scale(layer).as<float>()[pr] = quantize_row_kv_int8(v, hd, vc.as<int8_t>() + off);
            break;
          case DType::FP8:
            k_scale(layer).as<float>()[pr] = quantize_row_kv_fp8(k, hd, kc.as<uint8_t>() + off);
            v_scale(layer).as<float>()[pr] = quantize_row_kv_fp8(v, hd, vc.as<uint8_t>() + off);
            break;
          default:
            store_row_f32(kc.data, kc.dtype, off, hd, k);
            store_row_f32(vc.data, vc.dtype, off, hd, v);
        }
      }
    }
  };
  ThreadPool& tp = pool();
  for (int t = 0; t < tp.size(); ++t) scratch(t, size_t(hd));
  if (n <= 4) return tokens(0, n, 0);
  const int64_t n_chunks = tp.chunks_for(n, 2);
  tp.parallel_for(n_chunks, [&](int64_t c, int thread) { tokens(c * n / n_chunks, (c + 1) * n / n_chunks, thread); });
}

void CpuBackend::attention(int layer, const TensorView& qkv, const AttentionParams& p,
                           const TensorView& out) {
  const Batch& b = batch();
  const int64_t hd = p.head_dim, group = p.n_heads / p.n_kv_heads;
  check_2d(out, b.n_tokens(), p.n_heads * hd, "attention out");
  TF_ASSERT(p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0,
            "attention: {} query heads over {} kv heads", p.n_heads, p.n_kv_heads);
  const cpu::AttendArgs args{.batch = &b, .block_tables = block_tables(layer), .p = p,
                             .k_pool = {.data = &k_cache(layer), .scales = &k_scale(layer)},
                             .v_pool = {.data = &v_cache(layer), .scales = &v_scale(layer)},
                             .qkv = qkv.as<float>(), .out = out.as<float>(),
                             .block_size = kv_spec().block_size, .n_kv_heads = kv_spec().kv_heads_of(layer)};

  // Items: each sequence's tokens in tiles of tile_tokens, times KV heads; the items with
  // the most keys (the last position of their tile) go first, so the threads, which take
  // items one at a time, do not end on a long one.
  const int32_t tile_tokens = int32_t(std::max<int64_t>(1, kTileRows / group));
  std::vector<cpu::AttendItem> items;
  for (int32_t s = 0; s < b.n_seqs(); ++s) {
    const int32_t begin = b.seq_starts[size_t(s)], end = b.seq_starts[size_t(s) + 1];
    for (int32_t t1 = end; t1 > begin; t1 -= tile_tokens)
      for (int32_t kvh = 0; kvh < int32_t(p.n_kv_heads); ++kvh)
        items.push_back({.seq = s, .t0 = std::max(begin, t1 - tile_tokens), .t1 = t1, .kvh = kvh});
  }
  std::stable_sort(items.begin(), items.end(), [&](const cpu::AttendItem& x, const cpu::AttendItem& y) {
    return b.positions[size_t(x.t1 - 1)] > b.positions[size_t(y.t1 - 1)];
  });
  const int max_rows = int(tile_tokens * group);

  const cpu::KernelTable& kt = cpu::kernels();
  ThreadPool& tp = pool();
  // Per-thread scratch, kept across calls (a decode step calls this once per layer): made
  // on a thread's first item when missing or too small for this call's items.
  if (attend_scratch_.size() < size_t(tp.size())) attend_scratch_.resize(size_t(tp.size()));
  tp.parallel_for(int64_t(items.size()), [&](int64_t i, int t) {
    auto& sc = attend_scratch_[size_t(t)];
    if (!sc || sc->max_rows < max_rows || sc->head_dim != hd) sc.emplace(max_rows, hd);
    kt.attend_item(args, items[size_t(i)], *sc);
  });
}

}  // namespace tf

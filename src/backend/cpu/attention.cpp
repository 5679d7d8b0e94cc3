// CPU paged attention and the fused RoPE + KV write.
//
// Attention (one code path for prefill, chunked prefill and decode, because this step's K/V
// were written to the cache before attention runs). A work item is one sequence, one KV head
// and a tile of consecutive tokens of that sequence (max(1, kTileRows / group) of them); its
// rows are the (token, query head) pairs of the tile whose query heads share the KV head
// (GQA: the `group` heads h with h / group == kv head), so every K/V row is loaded and
// converted once per item, not once per query head and token. Threads take items
// dynamically, those that see the most keys first. (One KV head of one decoding sequence is
// one item, so a batch of a single MQA sequence runs on one thread: splitting the keys across
// threads, as flash-decoding does, is not done.)
//
// An item walks its keys, positions [min first, max q_pos] over its tokens, in tiles of
// kTileKeys keys gathered through the block table (a tile may span blocks):
//   1. load:    K and V rows of the tile as F32 (pointers into an F32 pool; BF16/F16
//               widened, I8 / FP8 dequantized as value * scale into a small tile buffer);
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
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/shape_checks.h"
#include "quant/kv_fp8.h"
#include "quant/kv_int8.h"

namespace tf {
namespace {

// One hardware vector: wider generic vectors than the target has get split by GCC, and the
// register-blocked accumulators below then spill to the stack.
#if defined(__AVX512F__)
constexpr int kLanes = 16;
#elif defined(__AVX__)
constexpr int kLanes = 8;
#else
constexpr int kLanes = 4;
#endif
typedef float VecF __attribute__((vector_size(kLanes * 4)));

constexpr int kTileKeys = 32;    // keys per tile: K/V tile of 32 x head_dim stays in L1/L2
constexpr int kTileRows = 16;    // target rows (tokens x group) per item; at least one token

inline VecF load_vec(const float* p) {
  VecF v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void store_vec(float* p, VecF v) { std::memcpy(p, &v, sizeof(v)); }
inline float hsum(VecF v) {
  float s = 0;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}

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

// One layer's K or V pool: rows [n_blocks * n_kv_heads * block_size, head_dim] of `data`,
// plus one F32 scale per row when the storage is I8 or FP8.
struct Pool {
  const TensorView& data;
  const TensorView& scales;

  // Row `row` as F32: a pointer into an F32 pool, else converted into buf[head_dim].
  const float* row_f32(int64_t row, int64_t hd, float* buf) const {
    switch (data.dtype) {
      case DType::F32: return data.as<float>() + row * hd;
      case DType::I8:
        dequantize_row_kv_int8(data.as<int8_t>() + row * hd, scales.as<float>()[row], hd, buf);
        return buf;
      case DType::FP8:
        dequantize_row_kv_fp8(data.as<uint8_t>() + row * hd, scales.as<float>()[row], hd, buf);
        return buf;
      default: load_row_f32(data.data, data.dtype, row * hd, hd, buf); return buf;
    }
  }
};

// s[r * kTileKeys + j] = q[r] . k[j] for a register block of NR rows and NK keys: each
// loaded slice of a key serves NR rows and each slice of a query NK keys.
template <int NR, int NK>
inline void score_block(const float* const* q, const float* const* k, int64_t hd, float* s) {
  VecF acc[NR][NK];
  for (int r = 0; r < NR; ++r)
    for (int j = 0; j < NK; ++j) acc[r][j] = VecF{};
  int64_t i = 0;
  for (; i + kLanes <= hd; i += kLanes) {
    VecF kv[NK];
    for (int j = 0; j < NK; ++j) kv[j] = load_vec(k[j] + i);
    for (int r = 0; r < NR; ++r) {
      const VecF qv = load_vec(q[r] + i);
      for (int j = 0; j < NK; ++j) acc[r][j] += qv * kv[j];
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int j = 0; j < NK; ++j) {
      float dot = hsum(acc[r][j]);
      for (int64_t t = i; t < hd; ++t) dot += q[r][t] * k[j][t];
      s[r * kTileKeys + j] = dot;
    }
  }
}

// acc[r][i0 + c] += sum_j p[r][j] * v[j][i0 + c] for NR rows and c < NC * kLanes: the
// accumulators stay in registers across the keys, each p[r][j] is broadcast once per block.
template <int NR, int NC>
inline void value_block(float* const* acc, const float* const* p, const float* const* v,
                        int n_keys, int64_t i0) {
  VecF a[NR][NC];
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < NC; ++c) a[r][c] = load_vec(acc[r] + i0 + c * kLanes);
  for (int j = 0; j < n_keys; ++j) {
    VecF vj[NC];
    for (int c = 0; c < NC; ++c) vj[c] = load_vec(v[j] + i0 + c * kLanes);
    for (int r = 0; r < NR; ++r) {
      const float pr = p[r][j];
      for (int c = 0; c < NC; ++c) a[r][c] += pr * vj[c];
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < NC; ++c) store_vec(acc[r] + i0 + c * kLanes, a[r][c]);
}

// acc[r][:] += sum_j p[r][j] * v[j][:] over head_dim for NR rows.
template <int NR>
inline void accumulate_values(float* const* acc, const float* const* p, const float* const* v,
                              int n_keys, int64_t hd) {
  int64_t i = 0;
  for (; i + 4 * kLanes <= hd; i += 4 * kLanes) value_block<NR, 4>(acc, p, v, n_keys, i);
  for (; i + kLanes <= hd; i += kLanes) value_block<NR, 1>(acc, p, v, n_keys, i);
  for (; i < hd; ++i)
    for (int r = 0; r < NR; ++r)
      for (int j = 0; j < n_keys; ++j) acc[r][i] += p[r][j] * v[j][i];
}

// Calls fn.template operator()<NR>(r0) for rows [r0, r0 + NR): blocks of kBlock, then single
// rows for the remainder.
template <int kBlock, typename Fn>
inline void for_row_blocks(int n_rows, Fn&& fn) {
  int r = 0;
  for (; r + kBlock <= n_rows; r += kBlock) fn.template operator()<kBlock>(r);
  for (; r < n_rows; ++r) fn.template operator()<1>(r);
}

// A work item: tokens [t0, t1) of sequence `seq` against KV head `kvh`.
struct Item {
  int32_t seq, t0, t1;
  int32_t kvh;
};

// Per-thread scratch, sized once per call.
struct Scratch {
  std::vector<float> acc, s, kbuf, vbuf, m, l;
  std::vector<const float*> q, krow, vrow;
  std::vector<float*> out, acc_rows;    // acc_rows[r] = acc + r * head_dim
  std::vector<const float*> p_rows;     // p_rows[r] = s + r * kTileKeys
  std::vector<int32_t> first, last;
  Scratch(int max_rows, int64_t hd)
      : acc(size_t(max_rows * hd)),
        s(size_t(max_rows * kTileKeys)),
        kbuf(size_t(kTileKeys * hd)),
        vbuf(size_t(kTileKeys * hd)),
        m(size_t(max_rows)),
        l(size_t(max_rows)),
        q(size_t(max_rows)),
        krow(kTileKeys),
        vrow(kTileKeys),
        out(size_t(max_rows)),
        acc_rows(size_t(max_rows)),
        p_rows(size_t(max_rows)),
        first(size_t(max_rows)),
        last(size_t(max_rows)) {
    for (int r = 0; r < max_rows; ++r) {
      acc_rows[size_t(r)] = acc.data() + r * hd;
      p_rows[size_t(r)] = s.data() + r * kTileKeys;
    }
  }
};

struct AttendArgs {
  const Batch& batch;
  const AttentionParams& p;
  const Pool& k_pool;
  const Pool& v_pool;
  const float* qkv;  // [n_tokens, (n_heads + 2 * n_kv_heads) * head_dim]
  float* out;        // [n_tokens, n_heads * head_dim]
  int64_t block_size, n_kv_heads;
};

// Row of the pool holding (slot, kv_head), as HostBackend::kv_row_index (a protected member,
// out of reach of this free function).
inline int64_t pool_row(int64_t slot, int64_t kv_head, int64_t block_size, int64_t n_kv_heads) {
  return ((slot / block_size) * n_kv_heads + kv_head) * block_size + slot % block_size;
}

void attend_item(const AttendArgs& a, const Item& it, Scratch& w) {
  const AttentionParams& p = a.p;
  const int64_t hd = p.head_dim, group = p.n_heads / p.n_kv_heads;
  const int64_t row = (p.n_heads + 2 * p.n_kv_heads) * hd;
  const int32_t* table = a.batch.block_tables.data() + int64_t(it.seq) * a.batch.max_blocks;

  // ---- rows: (token, head of the group), their queries, visible keys and outputs
  const int n_rows = int((it.t1 - it.t0) * group);
  int32_t lo = INT32_MAX, hi = INT32_MIN;
  for (int32_t t = it.t0; t < it.t1; ++t) {
    const int32_t qpos = a.batch.positions[size_t(t)];
    const int32_t first =
        p.sliding_window > 0 ? std::max<int32_t>(0, qpos - int32_t(p.sliding_window) + 1) : 0;
    lo = std::min(lo, first);
    hi = std::max(hi, qpos);
    for (int64_t g = 0; g < group; ++g) {
      const size_t r = size_t((t - it.t0) * group + g);
      const int64_t h = it.kvh * group + g;
      w.q[r] = a.qkv + t * row + h * hd;
      w.out[r] = a.out + t * p.n_heads * hd + h * hd;
      w.first[r] = first;
      w.last[r] = qpos;
      w.m[r] = -INFINITY;
      w.l[r] = 0;
    }
  }
  std::fill_n(w.acc.begin(), n_rows * hd, 0.0f);

  for (int32_t k0 = lo; k0 <= hi; k0 += kTileKeys) {
    const int nk = std::min<int32_t>(kTileKeys, hi - k0 + 1);
    // ---- 1. load the tile's K and V rows as F32
    for (int j = 0; j < nk; ++j) {
      const int32_t kp = k0 + j;
      const int64_t slot = int64_t(table[kp / a.block_size]) * a.block_size + kp % a.block_size;
      const int64_t pr = pool_row(slot, it.kvh, a.block_size, a.n_kv_heads);
      w.krow[size_t(j)] = a.k_pool.row_f32(pr, hd, w.kbuf.data() + j * hd);
      w.vrow[size_t(j)] = a.v_pool.row_f32(pr, hd, w.vbuf.data() + j * hd);
    }
    // ---- 2. raw scores q_r . k_j into s[r][j], in register blocks of 4 rows x 2 keys
    for_row_blocks<4>(n_rows, [&]<int NR>(int r0) {
      const float* const* q = w.q.data() + r0;
      float* s_rows = w.s.data() + r0 * kTileKeys;
      int j = 0;
      for (; j + 2 <= nk; j += 2) score_block<NR, 2>(q, w.krow.data() + j, hd, s_rows + j);
      if (j < nk) score_block<NR, 1>(q, w.krow.data() + j, hd, s_rows + j);
    });
    // ---- 3. online softmax: scores -> probabilities relative to the running max
    for (int r = 0; r < n_rows; ++r) {
      float* sr = w.s.data() + r * kTileKeys;
      const int j_lo = std::max(0, w.first[size_t(r)] - k0);
      const int j_hi = std::min(nk - 1, w.last[size_t(r)] - k0);  // visible keys [j_lo, j_hi]
      if (j_lo > j_hi) {  // nothing visible in this tile
        std::fill_n(sr, nk, 0.0f);
        continue;
      }
      float mx = w.m[size_t(r)];
      for (int j = j_lo; j <= j_hi; ++j) mx = std::max(mx, sr[j] * p.scale);
      const float alpha = std::exp(w.m[size_t(r)] - mx);  // 0 on the first visible tile
      if (alpha != 1.0f) {
        float* ar = w.acc_rows[size_t(r)];
        for (int64_t i = 0; i < hd; ++i) ar[i] *= alpha;
      }
      float sum = 0;
      for (int j = 0; j < nk; ++j) {
        const float e = (j >= j_lo && j <= j_hi) ? std::exp(sr[j] * p.scale - mx) : 0.0f;
        sr[j] = e;
        sum += e;
      }
      w.l[size_t(r)] = w.l[size_t(r)] * alpha + sum;
      w.m[size_t(r)] = mx;
    }
    // ---- 4. acc += p . V
    for_row_blocks<2>(n_rows, [&]<int NR>(int r0) {
      accumulate_values<NR>(w.acc_rows.data() + r0, w.p_rows.data() + r0, w.vrow.data(), nk, hd);
    });
  }

  for (int r = 0; r < n_rows; ++r) {
    const float inv = 1.0f / w.l[size_t(r)];
    for (int64_t i = 0; i < hd; ++i) w.out[size_t(r)][i] = w.acc_rows[size_t(r)][i] * inv;
  }
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
      const int64_t pr = kv_row_index(slot, h), off = pr * hd;
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
  const int64_t hd = p.head_dim, group = p.n_heads / p.n_kv_heads;
  check_2d(out, b.n_tokens(), p.n_heads * hd, "attention out");
  TF_ASSERT(p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0,
            "attention: {} query heads over {} kv heads", p.n_heads, p.n_kv_heads);
  const Pool k_pool{k_cache(layer), k_scale(layer)}, v_pool{v_cache(layer), v_scale(layer)};
  const AttendArgs args{.batch = b, .p = p, .k_pool = k_pool, .v_pool = v_pool,
                        .qkv = qkv.as<float>(), .out = out.as<float>(),
                        .block_size = kv_spec().block_size, .n_kv_heads = kv_spec().n_kv_heads};

  // Items: each sequence's tokens in tiles of tile_tokens, times KV heads; the items with
  // the most keys (the last position of their tile) go first, so the dynamic schedule does
  // not end on a long item.
  const int32_t tile_tokens = int32_t(std::max<int64_t>(1, kTileRows / group));
  std::vector<Item> items;
  for (int32_t s = 0; s < b.n_seqs(); ++s) {
    const int32_t begin = b.seq_starts[size_t(s)], end = b.seq_starts[size_t(s) + 1];
    for (int32_t t1 = end; t1 > begin; t1 -= tile_tokens)
      for (int32_t kvh = 0; kvh < int32_t(p.n_kv_heads); ++kvh)
        items.push_back(Item{.seq = s, .t0 = std::max(begin, t1 - tile_tokens), .t1 = t1, .kvh = kvh});
  }
  std::stable_sort(items.begin(), items.end(), [&](const Item& x, const Item& y) {
    return b.positions[size_t(x.t1 - 1)] > b.positions[size_t(y.t1 - 1)];
  });
  const int max_rows = int(tile_tokens * group);

#pragma omp parallel if (items.size() > 1)
  {
    Scratch scratch(max_rows, hd);
#pragma omp for schedule(dynamic, 1)
    for (size_t i = 0; i < items.size(); ++i) attend_item(args, items[i], scratch);
  }
}

}  // namespace tf

// The paged attention kernel of one work item (KernelTable::attend_item); the algorithm is
// described at the top of src/backend/cpu/attention.cpp, which builds the items.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/simd.h"
#include "quant/kv_fp8.h"
#include "quant/kv_int8.h"

namespace tf::cpu::TF_CPU_ISA_NS {
namespace {

constexpr int kTileKeys = AttendScratch::kTileKeys;

// Row `row` of a pool as F32: a pointer into an F32 pool, else converted into buf[head_dim].
const float* row_f32(const KvPool& pool, int64_t row, int64_t hd, float* buf) {
  const TensorView& data = *pool.data;
  switch (data.dtype) {
    case DType::F32: return data.as<float>() + row * hd;
    case DType::I8:
      dequantize_row_kv_int8(data.as<int8_t>() + row * hd, pool.scales->as<float>()[row], hd, buf);
      return buf;
    case DType::FP8:
      dequantize_row_kv_fp8(data.as<uint8_t>() + row * hd, pool.scales->as<float>()[row], hd, buf);
      return buf;
    case DType::BF16: {
      const uint16_t* src = data.as<uint16_t>() + row * hd;
      int64_t i = 0;
      for (; i + kLanes <= hd; i += kLanes) store(buf + i, widen_bf16(src + i));
      for (; i < hd; ++i) buf[i] = bf16_to_f32(src[i]);
      return buf;
    }
    default: {
      const uint16_t* src = data.as<uint16_t>() + row * hd;
      int64_t i = 0;
      for (; i + kLanes <= hd; i += kLanes) store(buf + i, widen_f16(src + i));
      for (; i < hd; ++i) buf[i] = f16_to_f32(src[i]);
      return buf;
    }
  }
}

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
    for (int j = 0; j < NK; ++j) kv[j] = load(k[j] + i);
    for (int r = 0; r < NR; ++r) {
      const VecF qv = load(q[r] + i);
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
    for (int c = 0; c < NC; ++c) a[r][c] = load(acc[r] + i0 + c * kLanes);
  for (int j = 0; j < n_keys; ++j) {
    VecF vj[NC];
    for (int c = 0; c < NC; ++c) vj[c] = load(v[j] + i0 + c * kLanes);
    for (int r = 0; r < NR; ++r) {
      const float pr = p[r][j];
      for (int c = 0; c < NC; ++c) a[r][c] += pr * vj[c];
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < NC; ++c) store(acc[r] + i0 + c * kLanes, a[r][c]);
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

// Row of the pool holding (slot, kv_head), as HostBackend::kv_row_index (a protected member,
// out of reach of this free function).
inline int64_t pool_row(int64_t slot, int64_t kv_head, int64_t block_size, int64_t n_kv_heads) {
  return ((slot / block_size) * n_kv_heads + kv_head) * block_size + slot % block_size;
}

}  // namespace

void attend_item(const AttendArgs& a, const AttendItem& it, AttendScratch& w) {
  const AttentionParams& p = a.p;
  const int64_t hd = p.head_dim, group = p.n_heads / p.n_kv_heads;
  const int64_t row = (p.n_heads + 2 * p.n_kv_heads) * hd;
  const int32_t* table = a.batch->block_tables.data() + int64_t(it.seq) * a.batch->max_blocks;

  // ---- rows: (token, head of the group), their queries, visible keys and outputs
  const int n_rows = int((it.t1 - it.t0) * group);
  int32_t lo = INT32_MAX, hi = INT32_MIN;
  for (int32_t t = it.t0; t < it.t1; ++t) {
    const int32_t qpos = a.batch->positions[size_t(t)];
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
      w.krow[size_t(j)] = row_f32(a.k_pool, pr, hd, w.kbuf.data() + j * hd);
      w.vrow[size_t(j)] = row_f32(a.v_pool, pr, hd, w.vbuf.data() + j * hd);
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
      int j = 0;
      VecF lane_j;  // j + lane for the visibility mask
      for (int i = 0; i < kLanes; ++i) lane_j[i] = float(i);
      VecF vsum = VecF{};
      for (; j + kLanes <= nk; j += kLanes) {
        const VecF idx = lane_j + float(j);
        const VecF e = exp_vec(load(sr + j) * p.scale - mx);
        const VecF visible = (idx >= float(j_lo)) & (idx <= float(j_hi)) ? e : VecF{};
        store(sr + j, visible);
        vsum += visible;
      }
      sum = hsum(vsum);
      for (; j < nk; ++j) {
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

}  // namespace tf::cpu::TF_CPU_ISA_NS

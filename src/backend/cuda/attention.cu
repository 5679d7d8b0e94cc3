// Paged attention, the plain kernel: any batch token (chunked prefill, prefix hits, decode),
// used for the tokens of prefill chunks, and for decode tokens of shapes the decode kernel
// does not cover.
//
// One thread block of kThreads threads per (listed token, query head); the key range of the token
// is walked in tiles of kThreads keys with an online softmax:
//
//   1. Find the token's sequence (binary search in seq_starts), its position qpos and the
//      first visible key (sliding window), and load q * scale into shared memory as float.
//   2. Per tile: thread j takes key kp = tile_start + j, looks up its block in the sequence's
//      block table (GQA: kv head = h / group, read in place, never copied) and computes the
//      score q . k in float. A block-wide max gives the new running max m'; thread j stores
//      p_j = exp(score_j - m') and its key's row offset in shared memory.
//   3. Every thread owns output dims d = tid, tid + kThreads (head_dim <= 2 * kThreads):
//      it rescales its accumulators and the running denominator l by exp(m - m'), then adds
//      p_j * V[key j][d] for the tile's keys (consecutive threads read consecutive dims of
//      one V row: coalesced). l is summed by every thread redundantly from the same p_j, so
//      all threads agree on it without another reduction.
//   4. out[d] = acc[d] / l, rounded to BF16.
//
// Invariants: after each tile, acc[d] = sum_j exp(s_j - m) V_j[d] and l = sum_j exp(s_j - m)
// over the keys seen so far, m their max score (FP32 throughout). The key qpos itself is
// always visible, so l > 0 at the end. A key whose block-table entry is -1 (a block dropped
// outside the sliding window; never inside the visible range when the KV manager is right)
// is masked (p = 0) instead of read.
//
// Cost: each thread reads its key's K row alone (uncoalesced), and K/V are re-read by every
// query token and by each of the `group` query heads that share a kv head. Fine for a
// baseline and for decode at small batch; prefill wants a tiled (FlashAttention) kernel.
#include "backend/cuda/attention.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"

namespace tf::cuda {
namespace {

constexpr int kThreads = 128;  // also the key tile
constexpr int kDimsPerThread = int(kAttnMaxHeadDim / kThreads);

// Index of the sequence owning token row `it`: the last s with seq_starts[s] <= it.
__device__ int32_t seq_of_token(const int32_t* seq_starts, int32_t n_seqs, int32_t it) {
  int32_t lo = 0, hi = n_seqs - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if (seq_starts[mid] <= it) lo = mid; else hi = mid - 1;
  }
  return lo;
}

template <typename KvT>
__global__ void __launch_bounds__(kThreads) paged_attention_kernel(PagedAttentionArgs a) {
  __shared__ float q_s[kAttnMaxHeadDim];
  __shared__ float p_s[kThreads];
  __shared__ int64_t row_s[kThreads];  // element offset of key j's row in the pool, -1 masked
  __shared__ float scratch[32];
  const int tid = threadIdx.x;
  const int32_t it = a.tokens[blockIdx.x / a.n_heads];
  const int64_t h = blockIdx.x % a.n_heads, hd = a.head_dim;
  const KvT* k_pool = static_cast<const KvT*>(a.k_pool);
  const KvT* v_pool = static_cast<const KvT*>(a.v_pool);

  // ---- 1. the token, its key range, q
  const int32_t is = seq_of_token(a.batch.seq_starts, a.batch.n_seqs, it);
  const int32_t* table = a.batch.block_tables + int64_t(is) * a.batch.max_blocks;
  const int32_t qpos = a.batch.positions[it];
  const int32_t first = a.sliding_window > 0 ? max(0, qpos - int32_t(a.sliding_window) + 1) : 0;
  const int64_t kvh = h / (a.n_heads / a.n_kv_heads);
  const bf16* q = a.qkv + int64_t(it) * (a.n_heads + 2 * a.n_kv_heads) * hd + h * hd;
  for (int64_t d = tid; d < hd; d += kThreads) q_s[d] = to_float(q[d]) * a.scale;
  __syncthreads();

  float acc[kDimsPerThread];
  for (float& x : acc) x = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int32_t tile = first; tile <= qpos; tile += kThreads) {
    const int32_t n_keys = min(kThreads, qpos - tile + 1);
    // ---- 2. scores of this tile, running max, probabilities
    float s = -INFINITY;
    int64_t row = -1;
    if (tid < n_keys) {
      const int32_t kp = tile + tid, block = table[kp / a.block_size];
      if (block >= 0) {
        row = ((int64_t(block) * a.n_kv_heads + kvh) * a.block_size + kp % a.block_size) * hd;
        const KvT* k = k_pool + row;
        float dot = 0.0f;
        for (int64_t d = 0; d < hd; ++d) dot += q_s[d] * to_float(k[d]);
        s = a.k_scale ? dot * a.k_scale[row / hd] : dot;
      }
    }
    const float m_new = fmaxf(m, block_max(s, scratch));
    if (m_new == -INFINITY) continue;  // every key of the tile masked (uniform over the block)
    p_s[tid] = row >= 0 ? expf(s - m_new) : 0.0f;
    row_s[tid] = row;
    __syncthreads();
    // ---- 3. rescale and accumulate p_j * V_j
    const float corr = expf(m - m_new);  // 0 on the first tile (m = -inf)
    l *= corr;
    for (float& x : acc) x *= corr;
    for (int j = 0; j < n_keys; ++j) {
      const float pj = p_s[j];
      if (row_s[j] < 0) continue;
      l += pj;
      const KvT* v = v_pool + row_s[j];
      const float pv = a.v_scale ? pj * a.v_scale[row_s[j] / hd] : pj;
#pragma unroll
      for (int i = 0; i < kDimsPerThread; ++i) {
        const int64_t d = tid + int64_t(i) * kThreads;
        if (d < hd) acc[i] += pv * to_float(v[d]);
      }
    }
    m = m_new;
    __syncthreads();  // p_s / row_s are rewritten by the next tile
  }
  // ---- 4. normalize
  bf16* o = a.out + int64_t(it) * a.n_heads * hd + h * hd;
#pragma unroll
  for (int i = 0; i < kDimsPerThread; ++i) {
    const int64_t d = tid + int64_t(i) * kThreads;
    if (d < hd) o[d] = from_float<bf16>(acc[i] / l);
  }
}

}  // namespace

void launch_paged_attention(const PagedAttentionArgs& a, cudaStream_t stream) {
  if (a.n_list == 0) return;
  const unsigned grid = unsigned(int64_t(a.n_list) * a.n_heads);
  switch (a.kv_dtype) {
    case DType::BF16: paged_attention_kernel<bf16><<<grid, kThreads, 0, stream>>>(a); break;
    case DType::F16: paged_attention_kernel<__half><<<grid, kThreads, 0, stream>>>(a); break;
    case DType::I8: paged_attention_kernel<int8_t><<<grid, kThreads, 0, stream>>>(a); break;
    case DType::FP8: paged_attention_kernel<fp8_e4m3><<<grid, kThreads, 0, stream>>>(a); break;
    default: paged_attention_kernel<float><<<grid, kThreads, 0, stream>>>(a); break;
  }
  TF_CUDA_CHECK_LAUNCH("paged_attention_kernel");
}

}  // namespace tf::cuda

// Paged decode attention (one new token per sequence, or each row of a short chunk such as a
// speculative verification), flash-decoding style.
//
// Grid (decode item, kv head, split). A block of 4 warps walks the keys of its split;
// each warp takes kKeysPerWarp keys at a time (a step; the loads of the next kDepth steps
// are in flight in a register ring), one group of kLanes = 32 / kKeysPerWarp lanes
// per key, each lane holding kDims = head_dim / kLanes consecutive dims. A lane group reads
// its key's K row once (16-byte loads) and scores it against every query head of the kv
// head (GQA: the `group` heads h = kvh * group + g share K/V, which is read once for all of
// them, never copied), reduces the partial dots over its kLanes lanes with shuffles, and
// keeps its own online-softmax state (m, l, acc over its dims) per head. At the end the
// 4 x kKeysPerWarp states are merged in shared memory:
//   M = max m_i,  L = sum l_i exp(m_i - M),  A[d] = sum acc_i[d] exp(m_i - M),  out = A / L.
// With one split the block writes out; otherwise it writes (M, L, A) to the workspace and
// combine_kernel merges the splits the same way. FP32 throughout; one BF16 rounding on the
// output.
//
// Invariants: a state that saw no key has m = -inf, l = 0, acc = 0 and contributes nothing
// (its weight exp(-inf - M) is 0 once M is finite); a split with no key at all writes
// m = -inf, l = 0. The key qpos itself is always in the last non-empty split, so L > 0.
// Keys whose block-table entry is -1 (outside a sliding window) are skipped.
#include "backend/cuda/attention.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_split.cuh"
#include "backend/cuda/launch.cuh"

namespace tf::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int32_t kStagedBlocks = kDecodeStagedBlocks;

// kDims consecutive elements of a KV row as loaded (raw words: 16-, 8- or 4-byte loads, as
// the width allows), and as float. Loads are kept raw while in flight so that a deeper
// prefetch ring costs a quarter (INT8) to half (BF16) the registers of converted floats.
template <typename KvT, int kDims>
struct RawDims {
  static constexpr int kBytes = kDims * int(sizeof(KvT));
  static_assert(kBytes % 4 == 0, "a lane's slice of a KV row is whole 32-bit words");
  static constexpr int kWords = kBytes / 4;
  uint32_t w[kWords];

  __device__ __forceinline__ void load(const KvT* p) {
    if constexpr (kBytes % 16 == 0) {
#pragma unroll
      for (int v = 0; v < kWords / 4; ++v) {
        const uint4 u = reinterpret_cast<const uint4*>(p)[v];
        w[4 * v] = u.x, w[4 * v + 1] = u.y, w[4 * v + 2] = u.z, w[4 * v + 3] = u.w;
      }
    } else if constexpr (kBytes % 8 == 0) {
#pragma unroll
      for (int v = 0; v < kWords / 2; ++v) {
        const uint2 u = reinterpret_cast<const uint2*>(p)[v];
        w[2 * v] = u.x, w[2 * v + 1] = u.y;
      }
    } else {
#pragma unroll
      for (int v = 0; v < kWords; ++v) w[v] = reinterpret_cast<const uint32_t*>(p)[v];
    }
  }
  __device__ __forceinline__ void to_floats(float (&out)[kDims]) const {
    const KvT* e = reinterpret_cast<const KvT*>(w);
#pragma unroll
    for (int i = 0; i < kDims; ++i) out[i] = to_float(e[i]);
  }
};

template <typename KvT, int kHeadDim, int kGroup>
__global__ void __launch_bounds__(kWarps * 32) decode_attention_kernel(PagedAttentionArgs a) {
  // Lanes per key: enough that a lane holds at most 32 / kGroup dims of q and of acc (about
  // 120 registers, four blocks per SM), at least 8 (16-byte loads of BF16 rows).
  constexpr int kLanesRaw = kHeadDim * kGroup / 32;
  constexpr int kLanes = kLanesRaw < 8 ? 8 : (kLanesRaw > 32 ? 32 : kLanesRaw);
  constexpr int kKeysPerWarp = 32 / kLanes, kDims = kHeadDim / kLanes;
  constexpr int kStates = kWarps * kKeysPerWarp;
  __shared__ float m_s[kStates][kGroup], l_s[kStates][kGroup];
  __shared__ float acc_s[kStates][kGroup][kHeadDim];
  __shared__ int32_t blocks_s[kStagedBlocks];

  pdl_begin();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kg = lane / kLanes, kl = lane % kLanes;  // key group within the warp, lane within it
  const int state = warp * kKeysPerWarp + kg;
  const int32_t s = a.batch.decode_seqs[blockIdx.x];
  const int64_t kvh = blockIdx.y, hd = kHeadDim;
  const int32_t split = int32_t(blockIdx.z);
  const DecodeKeys keys = decode_keys(a, int32_t(blockIdx.x), split);
  const int32_t it = keys.it, k_begin = keys.k_begin, k_end = keys.k_end;
  if (k_begin >= k_end) {  // past this sequence's keys (uniform over the block)
    mark_split_empty(a, kvh, split);
    return;
  }
  const int64_t group = a.n_heads / a.n_kv_heads;
  const int32_t* table = a.batch.block_tables + int64_t(s) * a.batch.max_blocks;
  const KvT* k_pool = static_cast<const KvT*>(a.k_pool);
  const KvT* v_pool = static_cast<const KvT*>(a.v_pool);

  float q[kGroup][kDims], acc[kGroup][kDims], m[kGroup], l[kGroup];
  const bf16* qrow = a.qkv + int64_t(it) * (a.n_heads + 2 * a.n_kv_heads) * hd + kvh * group * hd;
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < kDims; ++i) {
      q[g][i] = g < group ? to_float(qrow[g * hd + kl * kDims + i]) * a.scale : 0.0f;
      acc[g][i] = 0.0f;
    }
  }

  // The block ids of the split's keys, staged in shared memory when they fit (one dependent
  // global load fewer per key).
  const int32_t b_first = k_begin / int32_t(a.block_size), b_last = (k_end - 1) / int32_t(a.block_size);
  const bool staged = b_last - b_first < kStagedBlocks;
  if (staged)
    for (int32_t i = threadIdx.x; i <= b_last - b_first; i += kWarps * 32) blocks_s[i] = table[b_first + i];
  __syncthreads();

  // K/V of key kp (this lane's dims, raw) and the row scales; false when the key is masked
  // or past the split.
  using Raw = RawDims<KvT, kDims>;
  auto load = [&](int32_t kp, Raw& kr, Raw& vr, float& ks, float& vs) {
    if (kp >= k_end) return false;
    const int32_t block = staged ? blocks_s[kp / a.block_size - b_first] : table[kp / a.block_size];
    if (block < 0) return false;
    const int64_t row = (int64_t(block) * a.n_kv_heads + kvh) * a.block_size + kp % a.block_size;
    kr.load(k_pool + row * hd + kl * kDims);
    vr.load(v_pool + row * hd + kl * kDims);
    if (a.k_scale) {
      ks = a.k_scale[row];
      vs = a.v_scale[row];
    }
    return true;
  };

  // Software-pipelined over a ring of kDepth key steps: the loads of step i + kDepth are
  // issued when step i is consumed, so kDepth steps of K/V are in flight per lane group
  // (one step in flight left the kernel waiting a full memory latency per step: ~60 us per
  // layer at batch 32 on the H200). kDepth is sized so the ring stays <= 32 registers.
  constexpr int kDepth = Raw::kWords >= 16 ? 1 : (Raw::kWords >= 8 ? 2 : 4);
  constexpr int32_t kStride = kWarps * kKeysPerWarp;
  const int32_t kp_first = k_begin + warp * kKeysPerWarp;  // this warp's first step (uniform)
  Raw kr[kDepth], vr[kDepth];
  float ks_r[kDepth], vs_r[kDepth];
  bool valid_r[kDepth];
#pragma unroll
  for (int d = 0; d < kDepth; ++d) {
    ks_r[d] = vs_r[d] = 1.0f;
    valid_r[d] = load(kp_first + d * kStride + kg, kr[d], vr[d], ks_r[d], vs_r[d]);
  }
  for (int32_t kp0 = kp_first; kp0 < k_end; kp0 += kDepth * kStride) {
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      const int32_t kp = kp0 + d * kStride;
      if (kp >= k_end) break;  // uniform over the warp
      float kf[kDims], vf[kDims];
      kr[d].to_floats(kf);
      vr[d].to_floats(vf);
      const bool valid = valid_r[d];
      const float ks = ks_r[d], vs = vs_r[d];
      valid_r[d] = load(kp + kDepth * kStride + kg, kr[d], vr[d], ks_r[d], vs_r[d]);
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < kDims; ++i) dot += q[g][i] * kf[i];
#pragma unroll
        for (int o = kLanes / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        if (!valid) continue;  // uniform within the lane group (after the shuffles)
        dot *= ks;
        const float m_new = fmaxf(m[g], dot);
        const float corr = expf(m[g] - m_new), p = expf(dot - m_new);
        l[g] = l[g] * corr + p;
#pragma unroll
        for (int i = 0; i < kDims; ++i) acc[g][i] = acc[g][i] * corr + p * (vf[i] * vs);
        m[g] = m_new;
      }
    }
  }

  // ---- merge the block's states
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    if (kl == 0) {
      m_s[state][g] = m[g];
      l_s[state][g] = l[g];
    }
#pragma unroll
    for (int i = 0; i < kDims; ++i) acc_s[state][g][kl * kDims + i] = acc[g][i];
  }
  __syncthreads();
  for (int t = threadIdx.x; t < group * kHeadDim; t += kWarps * 32) {
    const int g = t / kHeadDim, d = t % kHeadDim;
    float mx = -INFINITY;
    for (int st = 0; st < kStates; ++st) mx = fmaxf(mx, m_s[st][g]);
    float sum_l = 0.0f, sum_a = 0.0f;
    if (mx != -INFINITY) {
      for (int st = 0; st < kStates; ++st) {
        const float w = expf(m_s[st][g] - mx);
        sum_l += l_s[st][g] * w;
        sum_a += acc_s[st][g][d] * w;
      }
    }
    store_split(a, it, kvh * group + g, split, d, mx, sum_l, sum_a);
  }
}

// Grid (decode item, head), head_dim threads: merges the n_splits partial states.
__global__ void combine_kernel(PagedAttentionArgs a) {
  pdl_begin();
  const int64_t hd = a.head_dim, h = blockIdx.y;
  const int32_t it = a.batch.decode_tokens[blockIdx.x];
  const float* ws = split_state(a, h, 0);
  float mx = -INFINITY;
  for (int sp = 0; sp < a.n_splits; ++sp) mx = fmaxf(mx, ws[sp * (hd + 2)]);
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float sum_l = 0.0f, sum_a = 0.0f;
    for (int sp = 0; sp < a.n_splits; ++sp) {
      const float* part = ws + sp * (hd + 2);
      if (part[0] == -INFINITY) continue;
      const float w = expf(part[0] - mx);
      sum_l += part[1] * w;
      sum_a += part[2 + d] * w;
    }
    a.out[int64_t(it) * a.n_heads * hd + h * hd + d] = from_float<bf16>(sum_a / sum_l);
  }
}

template <typename KvT, int kHeadDim>
void launch_group(const PagedAttentionArgs& a, dim3 grid, cudaStream_t stream) {
  const int64_t group = a.n_heads / a.n_kv_heads;
  if (group == 1)
    launch_pdl(decode_attention_kernel<KvT, kHeadDim, 1>, grid, dim3(kWarps * 32), 0, stream, a);
  else if (group == 2)
    launch_pdl(decode_attention_kernel<KvT, kHeadDim, 2>, grid, dim3(kWarps * 32), 0, stream, a);
  else if (group <= 4)
    launch_pdl(decode_attention_kernel<KvT, kHeadDim, 4>, grid, dim3(kWarps * 32), 0, stream, a);
  else
    launch_pdl(decode_attention_kernel<KvT, kHeadDim, 8>, grid, dim3(kWarps * 32), 0, stream, a);
}

template <typename KvT>
void launch_kv(const PagedAttentionArgs& a, dim3 grid, cudaStream_t stream) {
  with_head_dim(a.head_dim, [&](auto d) { launch_group<KvT, decltype(d)::value>(a, grid, stream); });
}

}  // namespace

bool decode_supported(int64_t head_dim, int64_t group) {
  return (head_dim == 64 || head_dim == 128 || head_dim == 256) && group >= 1 && group <= 8;
}

void launch_decode_attention(const PagedAttentionArgs& a, cudaStream_t stream) {
  if (a.batch.n_decode == 0) return;
  const dim3 grid(unsigned(a.batch.n_decode), unsigned(a.n_kv_heads), unsigned(a.n_splits));
  bool merged = false;
  if (a.decode_mma && decode_mma_supported(a.kv_dtype, a.head_dim, a.n_heads / a.n_kv_heads)) {
    merged = launch_decode_attention_mma(a, stream);
  } else {
    switch (a.kv_dtype) {
      case DType::BF16: launch_kv<bf16>(a, grid, stream); break;
      case DType::F16: launch_kv<__half>(a, grid, stream); break;
      case DType::I8: launch_kv<int8_t>(a, grid, stream); break;
      case DType::FP8: launch_kv<fp8_e4m3>(a, grid, stream); break;
      default: launch_kv<float>(a, grid, stream); break;
    }
    TF_CUDA_CHECK_LAUNCH("decode_attention_kernel");
  }
  if (a.n_splits > 1 && !merged) {
    launch_pdl(combine_kernel, dim3(unsigned(a.batch.n_decode), unsigned(a.n_heads)), dim3(unsigned(a.head_dim)), 0,
               stream, a);
    TF_CUDA_CHECK_LAUNCH("combine_kernel");
  }
}

}  // namespace tf::cuda

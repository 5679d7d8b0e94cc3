// Paged prefill attention on tensor cores, FlashAttention-style (online softmax over key
// tiles, never materialising the score matrix), for the prefill chunks of a batch.
// launch_flash_attention sends BF16, INT8 and FP8 pools at head_dim 64 and 128 to the
// register-resident FlashAttention-2 kernel of flash_attention_bf16.cu; this file's WMMA
// kernel serves the F16 and F32 pools, whose values it converts to BF16 on the way into shared
// memory, and every pool at head_dim 256.
//
// Work item: a tile of up to kRows = 64 consecutive query rows of one sequence (set_batch
// lists them as (sequence, first row, rows)) and one query head; grid (tiles, heads), four
// warps, each owning 16 query rows. Per key tile of kKeys = 64 keys:
//   1. the block loads the tile's K and V rows from the paged pool into shared memory as
//      BF16 (F16/F32 rounded to BF16, INT8 and FP8 dequantized with their row scale; masked or
//      missing keys are zeros); GQA reads the kv head h / group in place;
//   2. S = Q K^T with WMMA 16x16x16 BF16 fragments, FP32 accumulation, into shared memory;
//   3. each warp runs the online softmax on its 16 rows (two lanes per row): scale, causal
//      and sliding-window mask, new running max m', p = exp(s - m') rounded to BF16 for the
//      second product, l' = l exp(m - m') + sum p, and O *= exp(m - m');
//   4. O += P V with WMMA, O kept in FP32 in shared memory.
// At the end out = O / l, rounded once to BF16.
//
// Invariants: for each row, O = sum_j exp(s_j - m) V_j and l = sum_j exp(s_j - m) over the
// keys seen so far (P rounded to BF16 as FlashAttention does: ~2^-9 relative per weight);
// a row whose keys are all masked so far keeps m = -inf, l = 0, O = 0. Its own position is
// always visible, so l > 0 at the end. Instantiated for head_dim 64, 128 and 256; at 256
// (Gemma 3) it serves BF16 pools too, whose register-resident kernel would need ~330 registers
// a thread for its Q and O fragments: here O lives in shared memory (195 KB a block).
#include <mma.h>

#include <type_traits>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"

namespace tf::cuda {
namespace {

using namespace nvcuda;

constexpr int kWarps = 4, kRows = 16 * kWarps, kKeys = 64;

template <int kD>
struct Smem {
  static constexpr int kLd = kD + 8;       // BF16 row stride (multiple of 8; staggers banks)
  static constexpr int kLdS = kKeys + 4;   // F32 score stride
  static constexpr int kLdP = kKeys + 8;   // BF16 probability stride
  static constexpr int kLdO = kD + 4;      // F32 output stride
  bf16 q[kRows * kLd];
  bf16 k[kKeys * kLd];
  bf16 v[kKeys * kLd];
  float s[kRows * kLdS];
  bf16 p[kRows * kLdP];
  float o[kRows * kLdO];
  float m[kRows], l[kRows];
  int32_t pos[kRows];
};

template <typename KvT>
__device__ __forceinline__ float kv_value(const KvT* pool, int64_t i, float scale) {
  return to_float(pool[i]) * scale;
}

template <typename KvT, int kD>
__global__ void __launch_bounds__(kWarps * 32) flash_attention_kernel(PagedAttentionArgs a) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Smem<kD>& sm = *reinterpret_cast<Smem<kD>*>(smem_raw);
  constexpr int kLd = Smem<kD>::kLd, kLdS = Smem<kD>::kLdS, kLdP = Smem<kD>::kLdP, kLdO = Smem<kD>::kLdO;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int32_t* tile = a.batch.flash_tiles + 3 * int64_t(blockIdx.x);
  const int32_t s = tile[0], row0 = tile[1], n_rows = tile[2];
  const int64_t h = blockIdx.y, kvh = h / (a.n_heads / a.n_kv_heads);
  const int64_t qkv_row = (a.n_heads + 2 * a.n_kv_heads) * kD;
  const int32_t* table = a.batch.block_tables + int64_t(s) * a.batch.max_blocks;
  const KvT* k_pool = static_cast<const KvT*>(a.k_pool);
  const KvT* v_pool = static_cast<const KvT*>(a.v_pool);

  // ---- Q (16-byte chunks), positions, running state
  constexpr int kChunks = kD / 8;
  for (int i = tid; i < kRows * kChunks; i += kWarps * 32) {
    const int r = i / kChunks, c = i % kChunks;
    const uint4 z{0, 0, 0, 0};
    *reinterpret_cast<uint4*>(sm.q + r * kLd + c * 8) =
        r < n_rows ? *reinterpret_cast<const uint4*>(a.qkv + int64_t(row0 + r) * qkv_row + h * kD + c * 8) : z;
  }
  for (int r = tid; r < kRows; r += kWarps * 32) {
    sm.pos[r] = r < n_rows ? a.batch.positions[row0 + r] : -1;
    sm.m[r] = -INFINITY;
    sm.l[r] = 0.0f;
  }
  for (int i = tid; i < kRows * kLdO; i += kWarps * 32) sm.o[i] = 0.0f;
  __syncthreads();
  const int32_t last_pos = sm.pos[n_rows - 1];
  const int32_t first_key = a.sliding_window > 0 ? max(0, sm.pos[0] - int32_t(a.sliding_window) + 1) : 0;

  for (int32_t kt = first_key / kKeys * kKeys; kt <= last_pos; kt += kKeys) {
    // ---- 1. K and V tiles: BF16 rows copied in 16-byte chunks, the other dtypes converted
    // element-wise
    if constexpr (std::is_same_v<KvT, bf16>) {
      for (int i = tid; i < kKeys * kChunks; i += kWarps * 32) {
        const int j = i / kChunks, c = i % kChunks;
        const int32_t kp = kt + j;
        uint4 kv{0, 0, 0, 0}, vv{0, 0, 0, 0};
        const int32_t block = kp <= last_pos ? table[kp / a.block_size] : -1;
        if (block >= 0) {
          const int64_t row = (int64_t(block) * a.n_kv_heads + kvh) * a.block_size + kp % a.block_size;
          kv = *reinterpret_cast<const uint4*>(k_pool + row * kD + c * 8);
          vv = *reinterpret_cast<const uint4*>(v_pool + row * kD + c * 8);
        }
        *reinterpret_cast<uint4*>(sm.k + j * kLd + c * 8) = kv;
        *reinterpret_cast<uint4*>(sm.v + j * kLd + c * 8) = vv;
      }
    } else {
      for (int i = tid; i < kKeys * kD; i += kWarps * 32) {
        const int j = i / kD, d = i % kD;
        const int32_t kp = kt + j;
        float kv = 0.0f, vv = 0.0f;
        const int32_t block = kp <= last_pos ? table[kp / a.block_size] : -1;
        if (block >= 0) {
          const int64_t row = (int64_t(block) * a.n_kv_heads + kvh) * a.block_size + kp % a.block_size;
          kv = kv_value(k_pool, row * kD + d, a.k_scale ? a.k_scale[row] : 1.0f);
          vv = kv_value(v_pool, row * kD + d, a.v_scale ? a.v_scale[row] : 1.0f);
        }
        sm.k[j * kLd + d] = from_float<bf16>(kv);
        sm.v[j * kLd + d] = from_float<bf16>(vv);
      }
    }
    __syncthreads();

    // ---- 2. S = Q K^T for this warp's 16 rows
    {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kKeys / 16];
#pragma unroll
      for (int n = 0; n < kKeys / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
      for (int kk = 0; kk < kD; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> qa;
        wmma::load_matrix_sync(qa, sm.q + warp * 16 * kLd + kk, kLd);
#pragma unroll
        for (int n = 0; n < kKeys / 16; ++n) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> kb;
          wmma::load_matrix_sync(kb, sm.k + n * 16 * kLd + kk, kLd);
          wmma::mma_sync(acc[n], qa, kb, acc[n]);
        }
      }
#pragma unroll
      for (int n = 0; n < kKeys / 16; ++n)
        wmma::store_matrix_sync(sm.s + warp * 16 * kLdS + n * 16, acc[n], kLdS, wmma::mem_row_major);
    }
    __syncwarp();

    // ---- 3. online softmax: lanes 2r, 2r+1 share row r of the warp (32 keys each)
    {
      const int r = warp * 16 + lane / 2, half = lane % 2;
      const int32_t qpos = sm.pos[r];
      const int32_t lo = a.sliding_window > 0 ? qpos - int32_t(a.sliding_window) + 1 : 0;
      float* srow = sm.s + r * kLdS;
      float mx = -INFINITY;
      for (int j = half * 32; j < half * 32 + 32; ++j) {
        const int32_t kp = kt + j;
        const bool visible = qpos >= 0 && kp <= qpos && kp >= lo;
        const float x = visible ? srow[j] * a.scale : -INFINITY;
        srow[j] = x;
        mx = fmaxf(mx, x);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      const float m_old = sm.m[r], m_new = fmaxf(m_old, mx);
      const float corr = m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
      float sum = 0.0f;
      for (int j = half * 32; j < half * 32 + 32; ++j) {
        const float p = m_new == -INFINITY ? 0.0f : expf(srow[j] - m_new);
        const bf16 pb = from_float<bf16>(p);
        sm.p[r * kLdP + j] = pb;
        sum += to_float(pb);  // l sums the weights actually applied to V
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      float* orow = sm.o + r * kLdO;
      for (int d = half; d < kD; d += 2) orow[d] *= corr;
      __syncwarp();
      if (half == 0) {
        sm.l[r] = sm.l[r] * corr + sum;
        sm.m[r] = m_new;
      }
    }
    __syncwarp();

    // ---- 4. O += P V for this warp's rows
#pragma unroll
    for (int n = 0; n < kD / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> oc;
      float* optr = sm.o + warp * 16 * kLdO + n * 16;
      wmma::load_matrix_sync(oc, optr, kLdO, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kKeys; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> pa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> vb;
        wmma::load_matrix_sync(pa, sm.p + warp * 16 * kLdP + kk, kLdP);
        wmma::load_matrix_sync(vb, sm.v + kk * kLd + n * 16, kLd);
        wmma::mma_sync(oc, pa, vb, oc);
      }
      wmma::store_matrix_sync(optr, oc, kLdO, wmma::mem_row_major);
    }
    __syncthreads();  // K/V tiles are overwritten next
  }

  // ---- out = O / l
  for (int i = tid; i < n_rows * kD; i += kWarps * 32) {
    const int r = i / kD, d = i % kD;
    a.out[int64_t(row0 + r) * a.n_heads * kD + h * kD + d] = from_float<bf16>(sm.o[r * kLdO + d] / sm.l[r]);
  }
}

template <typename KvT, int kD>
void launch_typed(const PagedAttentionArgs& a, cudaStream_t stream) {
  const size_t smem = sizeof(Smem<kD>);
  static std::atomic<uint64_t> configured{0};
  once_per_device(configured, [smem] {
    TF_CUDA_CHECK(cudaFuncSetAttribute(flash_attention_kernel<KvT, kD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(smem)));
  });
  const dim3 grid(unsigned(a.batch.n_flash), unsigned(a.n_heads));
  flash_attention_kernel<KvT, kD><<<grid, kWarps * 32, smem, stream>>>(a);
}

template <typename KvT>
void launch_kv(const PagedAttentionArgs& a, cudaStream_t stream) {
  with_head_dim(a.head_dim, [&](auto d) { launch_typed<KvT, decltype(d)::value>(a, stream); });
}

}  // namespace

bool flash_supported(int64_t head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }

void launch_flash_attention(const PagedAttentionArgs& a, cudaStream_t stream) {
  if (a.batch.n_flash == 0) return;
  const bool fa2 = a.kv_dtype == DType::BF16 || a.kv_dtype == DType::I8 || a.kv_dtype == DType::FP8;
  if (fa2 && a.head_dim <= 128) {
    launch_flash_attention_bf16(a, stream);
    TF_CUDA_CHECK_LAUNCH("flash_bf16_kernel");
    return;
  }
  switch (a.kv_dtype) {
    case DType::BF16: launch_kv<bf16>(a, stream); break;
    case DType::F16: launch_kv<__half>(a, stream); break;
    case DType::I8: launch_kv<int8_t>(a, stream); break;
    case DType::FP8: launch_kv<fp8_e4m3>(a, stream); break;
    default: launch_kv<float>(a, stream); break;
  }
  TF_CUDA_CHECK_LAUNCH("flash_attention_kernel");
}

}  // namespace tf::cuda

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/rope_kv.cuh"

namespace tf::cuda {
namespace {

// Grid (n_tokens, n_heads + 2 * n_kv_heads): one block per (token, head) where the heads are
// q heads, then k heads, then v heads as laid out in a qkv row. Thread i handles the pair
// (i, i + head_dim/2). Every element of qkv and of the pool is written by one thread only.
template <typename KvT>
__global__ void rope_kv_write_kernel(RopeKvArgs a) {
  const int64_t it = blockIdx.x, head = blockIdx.y, hd = a.head_dim, half = hd / 2;
  const int64_t row = (a.n_heads + 2 * a.n_kv_heads) * hd;
  bf16* r = a.qkv + it * row + head * hd;
  const int32_t pos = a.batch.positions[it];
  const int64_t slot = a.batch.slot_mapping[it];
  // Row of (slot, kv head) in the pool: [n_blocks, n_kv_heads, block_size] flattened.
  auto pool_row = [&](int64_t kvh) {
    return ((slot / a.block_size * a.n_kv_heads + kvh) * a.block_size + slot % a.block_size) * hd;
  };
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    if (head < a.n_heads + a.n_kv_heads) {  // q or k: rotate
      const float angle = float(pos) * a.inv_freq[i];
      float s, c;
      sincosf(angle, &s, &c);
      const float x0 = to_float(r[i]), x1 = to_float(r[i + half]);
      const float y0 = x0 * c - x1 * s, y1 = x1 * c + x0 * s;
      r[i] = from_float<bf16>(y0);
      r[i + half] = from_float<bf16>(y1);
      if (head >= a.n_heads) {
        KvT* k = static_cast<KvT*>(a.k_pool) + pool_row(head - a.n_heads);
        k[i] = from_float<KvT>(y0);
        k[i + half] = from_float<KvT>(y1);
      }
    } else {  // v: copy
      KvT* v = static_cast<KvT*>(a.v_pool) + pool_row(head - a.n_heads - a.n_kv_heads);
      v[i] = from_float<KvT>(to_float(r[i]));
      v[i + half] = from_float<KvT>(to_float(r[i + half]));
    }
  }
}

}  // namespace

void launch_rope_kv_write(const RopeKvArgs& a, cudaStream_t stream) {
  if (a.batch.n_tokens == 0) return;
  const dim3 grid(unsigned(a.batch.n_tokens), unsigned(a.n_heads + 2 * a.n_kv_heads));
  const int threads = int(a.head_dim / 2 < 128 ? (a.head_dim / 2 + 31) / 32 * 32 : 128);
  switch (a.kv_dtype) {
    case DType::BF16: rope_kv_write_kernel<bf16><<<grid, threads, 0, stream>>>(a); break;
    case DType::F16: rope_kv_write_kernel<__half><<<grid, threads, 0, stream>>>(a); break;
    default: rope_kv_write_kernel<float><<<grid, threads, 0, stream>>>(a); break;
  }
  TF_CUDA_CHECK_LAUNCH("rope_kv_write_kernel");
}

}  // namespace tf::cuda

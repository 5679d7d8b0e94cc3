#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rope_device.cuh"
#include "backend/cuda/rope_kv.cuh"

#include <type_traits>

namespace tf::cuda {
namespace {

// Grid (n_tokens, n_heads + 2 * n_kv_heads): one block per (token, head) where the heads are
// q heads, then k heads, then v heads as laid out in a qkv row. Thread i < head_dim / 2
// handles the pair (i, i + head_dim/2); every element of qkv and of the pool is written by
// one thread only. kRotate: rotate q and k in qkv; kWrite: write k and v to the pool (from
// the float rotation when both are on, from qkv otherwise).
template <typename KvT, bool kRotate, bool kWrite>
__global__ void rope_kv_write_kernel(RopeKvArgs a) {
  __shared__ float scratch[32];
  pdl_begin();
  const int64_t it = blockIdx.x, head = blockIdx.y, hd = a.head_dim, half = hd / 2;
  const int64_t i = threadIdx.x;
  const bool active = i < half;
  const bool is_v = head >= a.n_heads + a.n_kv_heads, is_q = head < a.n_heads;
  bf16* r = a.qkv + it * (a.n_heads + 2 * a.n_kv_heads) * hd + head * hd;
  float y0 = 0.0f, y1 = 0.0f;
  if (active) {
    y0 = to_float(r[i]);
    y1 = to_float(r[i + half]);
    if (kRotate && !is_v) {
      rope_rotate(y0, y1, a.batch.positions[it], a.inv_freq[i]);
      r[i] = from_float<bf16>(y0);
      r[i + half] = from_float<bf16>(y1);
    }
  }
  if (!kWrite || is_q) return;  // uniform over the block

  const int64_t slot = a.batch.slot_mapping[it];
  const int64_t kvh = is_v ? head - a.n_heads - a.n_kv_heads : head - a.n_heads;
  const int64_t row = kv_slot_row(slot, a.n_kv_heads, kvh, a.block_size);
  KvT* dst = static_cast<KvT*>(is_v ? a.v_pool : a.k_pool) + row * hd;
  if constexpr (std::is_same_v<KvT, int8_t> || std::is_same_v<KvT, fp8_e4m3>) {
    constexpr bool kInt8 = std::is_same_v<KvT, int8_t>;
    const bool finite = isfinite(y0) && isfinite(y1);
    const float amax = block_max(!active ? 0.0f : finite ? fmaxf(fabsf(y0), fabsf(y1)) : INFINITY, scratch);
    float scale;
    if (isinf(amax)) {
      scale = NAN;
    } else {
      scale = amax / (kInt8 ? 127.0f : 448.0f);
    }
    if (active) {
      const bool zero = !(scale > 0.0f) || isnan(scale);  // zero row, underflow, or non-finite
      if constexpr (kInt8) {
        dst[i] = zero ? int8_t(0) : int8_t(fminf(fmaxf(rintf(y0 / scale), -127.0f), 127.0f));
        dst[i + half] = zero ? int8_t(0) : int8_t(fminf(fmaxf(rintf(y1 / scale), -127.0f), 127.0f));
      } else {  // the constructor rounds to nearest even and saturates (__NV_SATFINITE)
        dst[i] = zero ? fp8_e4m3(0.0f) : fp8_e4m3(y0 / scale);
        dst[i + half] = zero ? fp8_e4m3(0.0f) : fp8_e4m3(y1 / scale);
      }
    }
    if (i == 0) (is_v ? a.v_scale : a.k_scale)[row] = scale;
  } else {
    if (active) {
      dst[i] = from_float<KvT>(y0);
      dst[i + half] = from_float<KvT>(y1);
    }
  }
}

template <typename KvT>
void launch_kv(const RopeKvArgs& a, dim3 grid, int threads, cudaStream_t stream) {
  if (a.fused) {
    launch_pdl(rope_kv_write_kernel<KvT, true, true>, grid, dim3(threads), 0, stream, a);
  } else {
    launch_pdl(rope_kv_write_kernel<KvT, true, false>, grid, dim3(threads), 0, stream, a);
    launch_pdl(rope_kv_write_kernel<KvT, false, true>, grid, dim3(threads), 0, stream, a);
  }
}

}  // namespace

void launch_rope_kv_write(const RopeKvArgs& a, cudaStream_t stream) {
  if (a.batch.n_tokens == 0) return;
  const dim3 grid(unsigned(a.batch.n_tokens), unsigned(a.n_heads + 2 * a.n_kv_heads));
  const int threads = int((a.head_dim / 2 + 31) / 32 * 32);  // head_dim <= 256: at most 128
  switch (a.kv_dtype) {
    case DType::BF16: launch_kv<bf16>(a, grid, threads, stream); break;
    case DType::F16: launch_kv<__half>(a, grid, threads, stream); break;
    case DType::I8: launch_kv<int8_t>(a, grid, threads, stream); break;
    case DType::FP8: launch_kv<fp8_e4m3>(a, grid, threads, stream); break;
    default: launch_kv<float>(a, grid, threads, stream); break;
  }
  TF_CUDA_CHECK_LAUNCH("rope_kv_write_kernel");
}

}  // namespace tf::cuda

// The small-batch matmul kernel (gemv.cu describes the algorithm and the fusions), templated
// on the weight format so that BF16 (gemv.cu) and the quantized formats (gemv_quant.cu) share
// the loop, the prologue and the epilogues. A format (WeightBf16 here, the others in
// gemv_quant.cu) says how many elements a 16-byte chunk of a weight row holds and multiplies
// one chunk into the accumulators; everything else is the same code. Also the epilogues and
// virtual rows the half2, k-split and integer tensor-core GEMVs share (gemv_half2.cu,
// gemv_split.cu, gemv_imma.cu). Internal to src/backend/cuda.
#pragma once

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rope_device.cuh"

namespace tf::cuda::gemv_detail {

constexpr int kWarps = 8;
constexpr int kUnroll = 4;

// Chunk i (8 BF16) of input row r: from global memory through the read-only path, or from
// the block's normalized copy in shared memory.
template <bool kShared>
__device__ __forceinline__ uint4 x_chunk(const uint4* x, int64_t n_chunks, int r, int64_t i) {
  if constexpr (kShared)
    return x[r * n_chunks + i];
  else
    return __ldg(x + r * n_chunks + i);
}

// acc[r] += w[0..7] . x chunk xi of row r, for R rows.
template <int R, bool kShared>
__device__ __forceinline__ void fma8(const float (&w)[8], const uint4* x, int64_t n_chunks, int64_t xi,
                                     float (&acc)[R]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const uint4 xv = x_chunk<kShared>(x, n_chunks, r, xi);
    acc[r] += w[0] * bf16_lo(xv.x) + w[1] * bf16_hi(xv.x) + w[2] * bf16_lo(xv.y) + w[3] * bf16_hi(xv.y) +
              w[4] * bf16_lo(xv.z) + w[5] * bf16_hi(xv.z) + w[6] * bf16_lo(xv.w) + w[7] * bf16_hi(xv.w);
  }
}

// BF16 weights: a chunk is 8 elements, x chunk i.
struct WeightBf16 {
  static constexpr int kElems = 8;
  static constexpr bool kRowScale = false;  // no scale after the reduction
  __device__ static const uint4* row(const GemmArgs& g, int64_t j) {
    return reinterpret_cast<const uint4*>(g.w + j * g.k);
  }
  template <int R, bool kShared>
  __device__ static void fma(const GemmArgs&, int64_t, const uint4& wv, const uint4* x, int64_t n_chunks, int64_t i,
                             float (&acc)[R]) {
    float w[8];
    unpack8(wv, w);
    fma8<R, kShared>(w, x, n_chunks, i, acc);
  }
  __device__ static float row_scale(const GemmArgs&, int64_t) { return 1.0f; }
};

// xs[r] = BF16(x[r] * inv_rms(x[r]) * norm_w) for the g.rows <= R rows, by the whole block
// of kThreads threads (the same arithmetic as norm.cu; only the order of the sum of squares
// differs).
template <int R, int kThreads>
__device__ void normalize_rows(const GemmArgs& g, const GemvFusion& f, uint4* xs) {
  constexpr int kBlockWarps = kThreads / 32;
  __shared__ float partial[kBlockWarps][R];
  const int64_t n_chunks = g.k / 8;
  const uint4* x = reinterpret_cast<const uint4*>(g.x);
  const uint4* nw = reinterpret_cast<const uint4*>(f.norm_w);
  float ss[R];
#pragma unroll
  for (int r = 0; r < R; ++r) ss[r] = 0.0f;
  for (int64_t c = threadIdx.x; c < n_chunks; c += kThreads) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r >= g.rows) break;
      float v[8];
      unpack8(__ldg(x + r * n_chunks + c), v);
#pragma unroll
      for (int e = 0; e < 8; ++e) ss[r] += v[e] * v[e];
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    ss[r] = warp_sum(ss[r]);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32][r] = ss[r];
  }
  __syncthreads();
  float inv[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float t = 0.0f;
#pragma unroll
    for (int w = 0; w < kBlockWarps; ++w) t += partial[w][r];
    inv[r] = 1.0f / sqrtf(t / float(g.k) + f.eps);
  }
  for (int64_t c = threadIdx.x; c < n_chunks; c += kThreads) {
    float wv[8];
    unpack8(__ldg(nw + c), wv);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r >= g.rows) break;
      float v[8];
      unpack8(__ldg(x + r * n_chunks + c), v);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = v[e] * inv[r] * wv[e];
      xs[r * n_chunks + c] = pack8(v);
    }
  }
  __syncthreads();
}

// Output feature j (of m_out) of token r from its FP32 product y, bias included (Swiglu: y of
// the gate row, y_up of the up row), with the rounding rules of gemv.cuh. Store writes BF16
// or, with g.out_f32, F32.
template <GemvEpilogue kEpi>
__device__ __forceinline__ void store_output(const GemmArgs& g, int64_t m_out, int64_t j, int64_t r, float y,
                                             float y_up) {
  const int64_t i = r * m_out + j;
  bf16* out = static_cast<bf16*>(g.out);
  if constexpr (kEpi == GemvEpilogue::Swiglu) {
    const float gate = to_float(from_float<bf16>(y)), up = to_float(from_float<bf16>(y_up));
    out[i] = from_float<bf16>(gate / (1.0f + expf(-gate)) * up);
  } else if constexpr (kEpi == GemvEpilogue::AddTo) {
    out[i] = from_float<bf16>(to_float(out[i]) + to_float(from_float<bf16>(y)));
  } else if (g.out_f32) {
    static_cast<float*>(g.out)[i] = y;
  } else {
    out[i] = from_float<bf16>(y);
  }
}

// RopeKv: the output feature of warp `warp` of block `blk`: head blk / (d / 8), pair index
// i = 4 (blk % (d / 8)) + warp % 4, first (warp < 4) or second element of the pair.
__device__ __forceinline__ int64_t rope_feature(const RopeKvArgs& r, int64_t blk, int warp) {
  const int64_t half = r.head_dim / 2, quads = half / 4;
  return blk / quads * r.head_dim + (warp / 4) * half + blk % quads * 4 + warp % 4;
}

// RopeKv: one rotation pair of one token, y0 = BF16(y) of feature head * d + i and y1 of
// feature head * d + i + d / 2 (i < d / 2): rotates q and k (not v), stores the pair into the
// token's qkv row `r` of out and k/v into the paged pool (the arithmetic of rope_kv.cu).
template <typename KvT>
__device__ __forceinline__ void rope_kv_pair(const RopeKvArgs& a, bf16* out, int64_t head, int64_t i, int r, float y0,
                                             float y1) {
  const int64_t hd = a.head_dim, half = hd / 2;
  const bool is_q = head < a.n_heads, is_v = head >= a.n_heads + a.n_kv_heads;
  if (!is_v) rope_rotate(y0, y1, a.batch.positions[r], a.inv_freq[i]);
  bf16* row = out + int64_t(r) * (a.n_heads + 2 * a.n_kv_heads) * hd + head * hd;
  row[i] = from_float<bf16>(y0);
  row[i + half] = from_float<bf16>(y1);
  if (is_q) return;
  const int64_t slot = a.batch.slot_mapping[r];
  const int64_t kvh = is_v ? head - a.n_heads - a.n_kv_heads : head - a.n_heads;
  const int64_t prow = kv_slot_row(slot, a.n_kv_heads, kvh, a.block_size);
  KvT* dst = static_cast<KvT*>(is_v ? a.v_pool : a.k_pool) + prow * hd;
  dst[i] = from_float<KvT>(y0);
  dst[i + half] = from_float<KvT>(y1);
}

// rope_kv_pair for the pool's dtype (BF16, F16 or F32: gemv_supported).
__device__ __forceinline__ void rope_kv_pair_any(const RopeKvArgs& a, bf16* out, int64_t head, int64_t i, int r,
                                                 float y0, float y1) {
  switch (a.kv_dtype) {
    case DType::BF16: rope_kv_pair<bf16>(a, out, head, i, r, y0, y1); break;
    case DType::F16: rope_kv_pair<__half>(a, out, head, i, r, y0, y1); break;
    default: rope_kv_pair<float>(a, out, head, i, r, y0, y1); break;
  }
}

// RopeKv epilogue: ys[w][r] holds BF16(y) of warp w's feature for token r. Thread t < 4 R
// rotates pair t % 4 of token t / 4 and stores it.
template <int R>
__device__ void rope_kv_store(const RopeKvArgs& a, bf16* out, const float (&ys)[kWarps][R]) {
  const int t = threadIdx.x;
  if (t >= 4 * R) return;
  const int p = t % 4, r = t / 4;
  const int64_t quads = a.head_dim / 8;
  rope_kv_pair_any(a, out, blockIdx.x / quads, blockIdx.x % quads * 4 + p, r, ys[p][r], ys[4 + p][r]);
}

template <typename W, int R, bool kNorm, GemvEpilogue kEpi>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(GemmArgs g, GemvFusion f) {
  constexpr int kRowsW = kEpi == GemvEpilogue::Swiglu ? 2 : 1;  // weight rows per warp
  constexpr bool kRope = kEpi == GemvEpilogue::RopeKv;
  extern __shared__ uint4 xs[];                                  // kNorm: normalized x [R][k / 8]
  const int lane = threadIdx.x % 32;
  const int64_t m_out = kEpi == GemvEpilogue::Swiglu ? g.m / 2 : g.m;
  const int64_t j = kRope ? rope_feature(f.rope, blockIdx.x, int(threadIdx.x / 32))
                          : int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const bool active = j < m_out;
  const int64_t n_chunks = g.k / W::kElems;  // 16-byte chunks of a weight row
  const int64_t n_xchunks = g.k / 8;         // 16-byte chunks of an input row
  const uint4* wr[kRowsW];
#pragma unroll
  for (int u = 0; u < kRowsW; ++u) wr[u] = W::row(g, active ? j + u * m_out : 0);
  auto load_group = [&](int64_t i, uint4 (&wv)[kRowsW][kUnroll]) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int q = 0; q < kRowsW; ++q) wv[q][u] = load_stream(wr[q] + i + 32 * u);
  };
  // The first group of weight chunks: weights are never written, so they load before the
  // previous kernel is known to be done.
  uint4 wv[kRowsW][kUnroll];
  if (active && lane + 32 * (kUnroll - 1) < n_chunks) load_group(lane, wv);
  pdl_begin();

  const uint4* x = reinterpret_cast<const uint4*>(g.x);
  if constexpr (kNorm) {
    normalize_rows<R, kWarps * 32>(g, f, xs);
    x = xs;
  }
  if (!active) return;
  float acc[kRowsW][R];
#pragma unroll
  for (int q = 0; q < kRowsW; ++q)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[q][r] = 0.0f;
  int64_t i = lane;
  for (; i + 32 * (kUnroll - 1) < n_chunks; i += 32 * kUnroll) {
    if (i != lane) load_group(i, wv);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int q = 0; q < kRowsW; ++q)
        W::template fma<R, kNorm>(g, j + q * m_out, wv[q][u], x, n_xchunks, i + 32 * u, acc[q]);
  }
  for (; i < n_chunks; i += 32)
#pragma unroll
    for (int q = 0; q < kRowsW; ++q)
      W::template fma<R, kNorm>(g, j + q * m_out, load_stream(wr[q] + i), x, n_xchunks, i, acc[q]);
#pragma unroll
  for (int q = 0; q < kRowsW; ++q) {
    const float s = W::kRowScale ? W::row_scale(g, j + q * m_out) : 1.0f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      acc[q][r] = warp_sum(acc[q][r]);
      if constexpr (W::kRowScale) acc[q][r] *= s;
    }
  }
  if constexpr (kRope) {  // every warp of the block is active (m = heads x head_dim, 8 | head_dim)
    __shared__ float ys[kWarps][R];
    if (lane == 0)
#pragma unroll
      for (int r = 0; r < R; ++r)
        ys[threadIdx.x / 32][r] = to_float(from_float<bf16>(acc[0][r] + (g.bias ? to_float(g.bias[j]) : 0.0f)));
    __syncthreads();
    rope_kv_store<R>(f.rope, static_cast<bf16*>(g.out), ys);
    return;
  }
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if constexpr (kEpi == GemvEpilogue::Swiglu) {
      const float gb = g.bias ? to_float(g.bias[j]) : 0.0f, ub = g.bias ? to_float(g.bias[j + m_out]) : 0.0f;
      store_output<kEpi>(g, m_out, j, r, acc[0][r] + gb, acc[1][r] + ub);
    } else {
      store_output<kEpi>(g, m_out, j, r, acc[0][r] + (g.bias ? to_float(g.bias[j]) : 0.0f), 0.0f);
    }
  }
}

template <typename W, int R>
void launch_rows(const GemmArgs& g, const GemvFusion& f, cudaStream_t stream) {
  const int64_t m_out = f.epilogue == GemvEpilogue::Swiglu ? g.m / 2 : g.m;
  const dim3 grid(unsigned((m_out + kWarps - 1) / kWarps)), block(kWarps * 32);
  const size_t smem = f.norm_w ? size_t(R) * size_t(g.k) * 2 : 0;
  auto go = [&](void (*kernel)(GemmArgs, GemvFusion)) { launch_pdl(kernel, grid, block, smem, stream, g, f); };
  using E = GemvEpilogue;
  if (f.norm_w) {  // rows <= kGemvNormMaxRows: callers check gemv_supported()
    if constexpr (R <= kGemvNormMaxRows) {
      if (f.epilogue == E::Swiglu)
        go(gemv_kernel<W, R, true, E::Swiglu>);
      else if (f.epilogue == E::RopeKv)
        go(gemv_kernel<W, R, true, E::RopeKv>);
      else
        go(gemv_kernel<W, R, true, E::Store>);
    }
    return;
  }
  switch (f.epilogue) {
    case E::Store: go(gemv_kernel<W, R, false, E::Store>); break;
    case E::AddTo: go(gemv_kernel<W, R, false, E::AddTo>); break;
    case E::Swiglu: go(gemv_kernel<W, R, false, E::Swiglu>); break;
    case E::RopeKv: go(gemv_kernel<W, R, false, E::RopeKv>); break;
  }
}

// launch_gemv for one weight format (rows 1..kGemvMaxRows; callers check gemv_supported).
template <typename W>
void launch_format(const GemmArgs& g, const GemvFusion& f, cudaStream_t stream) {
  switch (g.rows) {
    case 1: launch_rows<W, 1>(g, f, stream); break;
    case 2: launch_rows<W, 2>(g, f, stream); break;
    case 3: launch_rows<W, 3>(g, f, stream); break;
    case 4: launch_rows<W, 4>(g, f, stream); break;
    case 5: launch_rows<W, 5>(g, f, stream); break;
    case 6: launch_rows<W, 6>(g, f, stream); break;
    case 7: launch_rows<W, 7>(g, f, stream); break;
    default: launch_rows<W, 8>(g, f, stream); break;
  }
}

// The quantized formats' launchers (gemv_quant.cu).
void launch_gemv_w8(const GemmArgs& g, const GemvFusion& f, cudaStream_t stream);
void launch_gemv_w4(const GemmArgs& g, const GemvFusion& f, cudaStream_t stream);
void launch_gemv_fp8(const GemmArgs& g, const GemvFusion& f, cudaStream_t stream);

// The weight row behind virtual row v of the kernels that give each block a range of rows
// (gemv_split.cu, gemv_imma.cu): SwiGLU and RoPE/KV need two weight rows per output, so their
// even/odd virtual rows are (gate j, up j) or (rotation pair i, i + head_dim / 2) of a head,
// and every block's range is even, so a pair never straddles two blocks. m < 2^31.
template <GemvEpilogue kEpi>
__device__ __forceinline__ int32_t virtual_weight_row(const GemmArgs& g, const GemvFusion& f, int32_t v) {
  if constexpr (kEpi == GemvEpilogue::Swiglu) {
    return (v & 1) ? int32_t(g.m / 2) + v / 2 : v / 2;
  } else if constexpr (kEpi == GemvEpilogue::RopeKv) {
    const int32_t hd = f.rope.head_dim, head = v / hd, w = v % hd;
    return head * hd + (w & 1) * (hd / 2) + w / 2;
  } else {
    return v;
  }
}

// Calls launch.run<kNorm, kEpi>() for f's norm and epilogue (a norm goes with Store, SwiGLU or
// RoPE/KV, as gemv_supported allows).
template <typename Launch>
void with_fusion(const GemvFusion& f, const Launch& launch) {
  using E = GemvEpilogue;
  if (f.norm_w) {
    if (f.epilogue == E::Swiglu)
      launch.template run<true, E::Swiglu>();
    else if (f.epilogue == E::RopeKv)
      launch.template run<true, E::RopeKv>();
    else
      launch.template run<true, E::Store>();
    return;
  }
  switch (f.epilogue) {
    case E::Store: launch.template run<false, E::Store>(); break;
    case E::AddTo: launch.template run<false, E::AddTo>(); break;
    case E::Swiglu: launch.template run<false, E::Swiglu>(); break;
    case E::RopeKv: launch.template run<false, E::RopeKv>(); break;
  }
}

}  // namespace tf::cuda::gemv_detail

// Small-batch matmul for decode: memory-bound, so the only goal is to stream the weight
// matrix at full bandwidth.
//
// One warp per output feature j (8 warps per block): lane l reads 16-byte chunks l, l + 32,
// ... of row j of w (8 BF16 each, so a warp reads 512 contiguous bytes per step: coalesced),
// four chunks in flight before any arithmetic, and multiplies them with the same chunks of
// each of the R input rows (x is small and shared by all warps: it stays in L1/L2). FP32
// accumulators, one warp reduction per input row at the end, bias added in FP32, one
// rounding on the store. Weights are read with L1::no_allocate: read once, they would only
// evict x from L1.
//
// Launched with programmatic dependent launch: each warp issues its first four weight loads
// before pdl_begin(), so the weight stream starts while the previous op is still finishing.
//
// Fusions (GemvFusion), each saving one kernel and one round trip of the activations:
//   norm prologue: every block computes the inverse RMS of the R input rows itself (they are
//     a few KB, read from L2) and keeps the normalized rows in shared memory;
//   AddTo epilogue: the warp owning output j adds it into the residual out[:, j] (each
//     element is read and written by that warp alone, so in place is race-free);
//   Swiglu epilogue: warp j streams two weight rows, gate j and up j, and writes
//     silu(gate) * up, so the [rows, 2 d_ff] product never exists;
//   RopeKv epilogue (the QKV projection): a block's 8 warps own the RoPE pairs (i, i + d/2)
//     of 4 consecutive i of one head (warps w and w + 4), so after the reduction the block
//     rotates its pairs (shared memory) and writes q/k/v to the qkv rows and k/v to the
//     paged pool, as the separate rope_kv kernel would (rope_kv.cu, fused variant).
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rope_device.cuh"

namespace tf::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kUnroll = 4;

// Chunk i of input row r: from global memory through the read-only path, or from the block's
// normalized copy in shared memory.
template <bool kShared>
__device__ __forceinline__ uint4 x_chunk(const uint4* x, int64_t n_chunks, int r, int64_t i) {
  if constexpr (kShared)
    return x[r * n_chunks + i];
  else
    return __ldg(x + r * n_chunks + i);
}

template <int R, bool kShared>
__device__ __forceinline__ void fma_chunk(const uint4& wv, const uint4* x, int64_t n_chunks, int64_t i,
                                          float (&acc)[R]) {
  float w[8];
  unpack8(wv, w);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const uint4 xv = x_chunk<kShared>(x, n_chunks, r, i);
    acc[r] += w[0] * bf16_lo(xv.x) + w[1] * bf16_hi(xv.x) + w[2] * bf16_lo(xv.y) + w[3] * bf16_hi(xv.y) +
              w[4] * bf16_lo(xv.z) + w[5] * bf16_hi(xv.z) + w[6] * bf16_lo(xv.w) + w[7] * bf16_hi(xv.w);
  }
}

// xs[r] = BF16(x[r] * inv_rms(x[r]) * norm_w) for the R rows, by the whole block (the same
// arithmetic as norm.cu; only the order of the sum of squares differs).
template <int R>
__device__ void normalize_rows(const GemmArgs& g, const GemvFusion& f, uint4* xs) {
  __shared__ float partial[kWarps][R];
  const int64_t n_chunks = g.k / 8;
  const uint4* x = reinterpret_cast<const uint4*>(g.x);
  const uint4* nw = reinterpret_cast<const uint4*>(f.norm_w);
  float ss[R];
#pragma unroll
  for (int r = 0; r < R; ++r) ss[r] = 0.0f;
  for (int64_t c = threadIdx.x; c < n_chunks; c += kWarps * 32) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
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
    for (int w = 0; w < kWarps; ++w) t += partial[w][r];
    inv[r] = 1.0f / sqrtf(t / float(g.k) + f.eps);
  }
  for (int64_t c = threadIdx.x; c < n_chunks; c += kWarps * 32) {
    float wv[8];
    unpack8(__ldg(nw + c), wv);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float v[8];
      unpack8(__ldg(x + r * n_chunks + c), v);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = v[e] * inv[r] * wv[e];
      xs[r * n_chunks + c] = pack8(v);
    }
  }
  __syncthreads();
}

// RopeKv: the output feature of warp `warp` of block `blk`: head blk / (d / 8), pair index
// i = 4 (blk % (d / 8)) + warp % 4, first (warp < 4) or second element of the pair.
__device__ __forceinline__ int64_t rope_feature(const RopeKvArgs& r, int64_t blk, int warp) {
  const int64_t half = r.head_dim / 2, quads = half / 4;
  return blk / quads * r.head_dim + (warp / 4) * half + blk % quads * 4 + warp % 4;
}

// RopeKv epilogue: ys[w][r] holds BF16(y) of warp w's feature for token r. Thread t < 4 R
// rotates pair t % 4 of token t / 4 and stores it (the arithmetic of rope_kv.cu).
template <int R, typename KvT>
__device__ void rope_kv_store(const RopeKvArgs& a, bf16* out, const float (&ys)[kWarps][R]) {
  const int t = threadIdx.x;
  if (t >= 4 * R) return;
  const int p = t % 4, r = t / 4;
  const int64_t hd = a.head_dim, half = hd / 2, quads = half / 4;
  const int64_t head = blockIdx.x / quads, i = blockIdx.x % quads * 4 + p;
  const bool is_q = head < a.n_heads, is_v = head >= a.n_heads + a.n_kv_heads;
  float y0 = ys[p][r], y1 = ys[4 + p][r];
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

template <int R, bool kNorm, GemvEpilogue kEpi, typename OutT>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(GemmArgs g, GemvFusion f) {
  constexpr int kRowsW = kEpi == GemvEpilogue::Swiglu ? 2 : 1;  // weight rows per warp
  constexpr bool kRope = kEpi == GemvEpilogue::RopeKv;
  extern __shared__ uint4 xs[];                                  // kNorm: normalized x [R][k / 8]
  const int lane = threadIdx.x % 32;
  const int64_t m_out = kEpi == GemvEpilogue::Swiglu ? g.m / 2 : g.m;
  const int64_t j = kRope ? rope_feature(f.rope, blockIdx.x, int(threadIdx.x / 32))
                          : int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const bool active = j < m_out;
  const int64_t n_chunks = g.k / 8;
  const uint4* wr[kRowsW];
#pragma unroll
  for (int u = 0; u < kRowsW; ++u) wr[u] = reinterpret_cast<const uint4*>(g.w + (j + u * m_out) * g.k);
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
    normalize_rows<R>(g, f, xs);
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
      for (int q = 0; q < kRowsW; ++q) fma_chunk<R, kNorm>(wv[q][u], x, n_chunks, i + 32 * u, acc[q]);
  }
  for (; i < n_chunks; i += 32)
#pragma unroll
    for (int q = 0; q < kRowsW; ++q) fma_chunk<R, kNorm>(load_stream(wr[q] + i), x, n_chunks, i, acc[q]);
#pragma unroll
  for (int q = 0; q < kRowsW; ++q)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[q][r] = warp_sum(acc[q][r]);
  if constexpr (kRope) {  // every warp of the block is active (m = heads x head_dim, 8 | head_dim)
    __shared__ float ys[kWarps][R];
    if (lane == 0)
#pragma unroll
      for (int r = 0; r < R; ++r)
        ys[threadIdx.x / 32][r] = to_float(from_float<bf16>(acc[0][r] + (g.bias ? to_float(g.bias[j]) : 0.0f)));
    __syncthreads();
    bf16* out = static_cast<bf16*>(g.out);
    switch (f.rope.kv_dtype) {
      case DType::BF16: rope_kv_store<R, bf16>(f.rope, out, ys); break;
      case DType::F16: rope_kv_store<R, __half>(f.rope, out, ys); break;
      default: rope_kv_store<R, float>(f.rope, out, ys); break;
    }
    return;
  }
  if (lane != 0) return;
  OutT* out = static_cast<OutT*>(g.out);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if constexpr (kEpi == GemvEpilogue::Swiglu) {
      const float gb = g.bias ? to_float(g.bias[j]) : 0.0f, ub = g.bias ? to_float(g.bias[j + m_out]) : 0.0f;
      const float gate = to_float(from_float<bf16>(acc[0][r] + gb));
      const float up = to_float(from_float<bf16>(acc[1][r] + ub));
      out[r * m_out + j] = from_float<OutT>(gate / (1.0f + expf(-gate)) * up);
    } else {
      const float y = acc[0][r] + (g.bias ? to_float(g.bias[j]) : 0.0f);
      if constexpr (kEpi == GemvEpilogue::AddTo)
        out[r * m_out + j] = from_float<OutT>(to_float(out[r * m_out + j]) + to_float(from_float<bf16>(y)));
      else
        out[r * m_out + j] = from_float<OutT>(y);
    }
  }
}

template <int R>
void launch_rows(const GemmArgs& g, const GemvFusion& f, cudaStream_t stream) {
  const int64_t m_out = f.epilogue == GemvEpilogue::Swiglu ? g.m / 2 : g.m;
  const dim3 grid(unsigned((m_out + kWarps - 1) / kWarps)), block(kWarps * 32);
  const size_t smem = f.norm_w ? size_t(R) * size_t(g.k) * 2 : 0;
  auto go = [&](void (*kernel)(GemmArgs, GemvFusion)) { launch_pdl(kernel, grid, block, smem, stream, g, f); };
  using E = GemvEpilogue;
  if (f.norm_w) {  // rows <= kGemvNormMaxRows: callers check gemv_supported()
    if constexpr (R <= kGemvNormMaxRows) {
      if (f.epilogue == E::Swiglu)
        go(gemv_kernel<R, true, E::Swiglu, bf16>);
      else if (f.epilogue == E::RopeKv)
        go(gemv_kernel<R, true, E::RopeKv, bf16>);
      else
        go(gemv_kernel<R, true, E::Store, bf16>);
    }
    return;
  }
  switch (f.epilogue) {
    case E::Store: go(g.out_f32 ? gemv_kernel<R, false, E::Store, float> : gemv_kernel<R, false, E::Store, bf16>); break;
    case E::AddTo: go(gemv_kernel<R, false, E::AddTo, bf16>); break;
    case E::Swiglu: go(gemv_kernel<R, false, E::Swiglu, bf16>); break;
    case E::RopeKv: go(gemv_kernel<R, false, E::RopeKv, bf16>); break;
  }
}

}  // namespace

bool gemv_supported(const GemmArgs& g, const GemvFusion& f) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (g.rows < 1 || g.rows > kGemvMaxRows || g.k % 8 != 0 || !aligned(g.x) || !aligned(g.w)) return false;
  if (f.epilogue != GemvEpilogue::Store && g.out_f32) return false;
  if (f.epilogue == GemvEpilogue::Swiglu && g.m % 2 != 0) return false;
  if (f.epilogue == GemvEpilogue::RopeKv) {
    const RopeKvArgs& r = f.rope;
    const bool pool_ok = r.kv_dtype == DType::BF16 || r.kv_dtype == DType::F16 || r.kv_dtype == DType::F32;
    if (!pool_ok || r.head_dim <= 0 || r.head_dim % 8 != 0 || r.n_heads <= 0 || r.n_kv_heads <= 0 ||
        g.m != (r.n_heads + 2 * r.n_kv_heads) * r.head_dim || r.batch.n_tokens != g.rows)
      return false;
  }
  if (f.norm_w)
    return g.rows <= kGemvNormMaxRows && g.rows * g.k * 2 <= kGemvNormMaxBytes && aligned(f.norm_w) &&
           f.epilogue != GemvEpilogue::AddTo && !g.out_f32;
  return true;
}

void launch_gemv(const GemmArgs& g, cudaStream_t stream, const GemvFusion& f) {
  if (g.m == 0) return;
  switch (g.rows) {
    case 1: launch_rows<1>(g, f, stream); break;
    case 2: launch_rows<2>(g, f, stream); break;
    case 3: launch_rows<3>(g, f, stream); break;
    case 4: launch_rows<4>(g, f, stream); break;
    case 5: launch_rows<5>(g, f, stream); break;
    case 6: launch_rows<6>(g, f, stream); break;
    case 7: launch_rows<7>(g, f, stream); break;
    default: launch_rows<8>(g, f, stream); break;
  }
}

}  // namespace tf::cuda

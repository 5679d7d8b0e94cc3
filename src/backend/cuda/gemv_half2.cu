// The W4 and W8 decode GEMV for 1..4 rows on packed half2 arithmetic (gemv_half2.cuh). The
// CUDA-core GEMV of gemv_quant.cu turns each code into an FP32 float and multiplies it with an
// FP32 copy of x: about six instructions per weight and row, so at one row it is bound by
// issue, not by bytes. Here:
//   - the block first writes its input rows into shared memory as F16, each row multiplied by
//     a power of two 2^-e that brings its largest magnitude below 1 (so no F16 sum below can
//     overflow; the factor is exact and undone on the FP32 result), in the order the codes
//     unpack (below), and chunk-interleaved so that the lanes of a warp read consecutive
//     16-byte words (no bank conflicts);
//   - W4: a word of 8 codes becomes four half2 with one shift and four AND-ORs (each code
//     under the exponent of 1024: 0x6400 | q is 1024 + q, 0x6400 | q << 4 is 1024 + 16 q) and
//     four subtractions of 1024 + zero (or 1024 + 16 zero) that leave q - zero (16 (q - zero)
//     for codes 1, 3, 5, 7, whose x is staged divided by 16): exact. The pairs are codes
//     (0, 4), (1, 5), (2, 6), (3, 7) of the word, so x is staged in that order;
//   - W8: a word of 4 codes, sign-flipped (q + 128), becomes two half2 1024 + q + 128 with
//     two byte permutes, minus 1152: q exactly. Pairs (0, 2), (1, 3), x staged so;
//   - half2 FMAs sum a chunk's products (W4: 32, W8: 16; half of them per half), then the
//     chunk's sum joins the FP32 accumulator (W4 times the group's scale; W8's row scale
//     multiplies the reduced sum). With |x| < 1 a half's sum stays below 240 (W4) or 1016
//     (W8); F16 rounds it to 2^-11 relative, the BF16 output to 2^-8.
// Layout of the work is the CUDA-core GEMV's (gemv_kernel.cuh): a warp per output feature (one
// or two features per warp, a launch option the backend times; gate and up rows with SwiGLU;
// one with RoPE/KV, whose block owns 4 rotation pairs), lanes on consecutive 16-byte chunks,
// four chunks of weights in flight per lane while the previous four are multiplied, the
// first four (with their scales and zero points) issued before pdl_begin(). The fused
// prologue and epilogues are the CUDA-core GEMV's, with the same roundings.
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "backend/cuda/gemv_kernel.cuh"
#include "backend/cuda/gemv_half2.cuh"
#include "backend/cuda/gemv_half2_formats.cuh"

namespace tf::cuda {

namespace {

using gemv_detail::kWarps;
using half2_detail::FormatW4;
using half2_detail::FormatW8;

constexpr int kChunksInFlight = 4;          // 16-byte weight chunks per lane per step
constexpr size_t kMaxSmem = 160 * 1024;     // input rows in shared memory, bytes

// uint4 index of staged word e (inputs 8e..8e+7 of chunk i) in a row of the shared input:
// the words of 32 consecutive chunks lie 32 apart, so a warp's lanes (consecutive chunks)
// read consecutive words.
template <typename F>
__device__ __forceinline__ int64_t x_word(int64_t i, int e) {
  return (i & ~int64_t(31)) * (F::kElems / 8) + e * 32 + (i & 31);
}

// uint4 words of one staged input row (whole blocks of 32 chunks).
template <typename F>
__host__ __device__ inline int64_t x_row_words(int64_t k) {
  return (k / F::kElems + 31) / 32 * 32 * (F::kElems / 8);
}

// Input rows [rows, k] (BF16; with a norm, rms_norm(x) * norm_w rounded to BF16 first, as
// normalize_rows) into xs in the layout above; unscale[r] = 2^e of row r. The whole block.
template <typename F, int R, bool kNorm>
__device__ void stage_rows(const GemmArgs& g, const GemvFusion& f, uint4* xs, float (&unscale)[R]) {
  __shared__ float partial[kWarps][2 * R];
  const int64_t n8 = g.k / 8;
  const uint4* x = reinterpret_cast<const uint4*>(g.x);
  const uint4* nw = reinterpret_cast<const uint4*>(f.norm_w);
  float ss[R], amax[R];
#pragma unroll
  for (int r = 0; r < R; ++r) ss[r] = amax[r] = 0.0f;
  for (int64_t c = threadIdx.x; c < n8; c += kWarps * 32) {
    float w[8];
    if constexpr (kNorm) unpack8(__ldg(nw + c), w);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float v[8];
      unpack8(__ldg(x + r * n8 + c), v);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if constexpr (kNorm) ss[r] += v[e] * v[e];
        amax[r] = fmaxf(amax[r], fabsf(kNorm ? v[e] * w[e] : v[e]));
      }
    }
  }
  const int warp = int(threadIdx.x / 32);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    ss[r] = warp_sum(ss[r]);
    amax[r] = warp_max(amax[r]);
    if (threadIdx.x % 32 == 0) partial[warp][r] = ss[r], partial[warp][R + r] = amax[r];
  }
  __syncthreads();
  float inv[R], pow2[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float t = 0.0f, a = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) t += partial[w][r], a = fmaxf(a, partial[w][R + r]);
    inv[r] = kNorm ? 1.0f / sqrtf(t / float(g.k) + f.eps) : 1.0f;
    a *= inv[r];
    int e = 0;
    if (a > 0.0f && isfinite(a)) frexpf(a, &e);  // a = m 2^e, 0.5 <= m < 1
    pow2[r] = ldexpf(1.0f, -e);
    unscale[r] = ldexpf(1.0f, e);
  }
  const int64_t stride = x_row_words<F>(g.k);
  constexpr int kWords = F::kElems / 8;
  for (int64_t c = threadIdx.x; c < n8; c += kWarps * 32) {
    float w[8];
    if constexpr (kNorm) unpack8(__ldg(nw + c), w);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float v[8];
      unpack8(__ldg(x + r * n8 + c), v);
      if constexpr (kNorm) {
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = to_float(from_float<bf16>(v[e] * inv[r] * w[e]));
      }
      xs[r * stride + x_word<F>(c / kWords, int(c % kWords))] = F::stage(v, pow2[r]);
    }
  }
  __syncthreads();
}

template <typename F, int R, bool kNorm, GemvEpilogue kEpi, int kFeatW>
__global__ void __launch_bounds__(kWarps * 32) gemv_half2_kernel(GemmArgs g, GemvFusion f) {
  using Chunk = typename F::Chunk;
  constexpr bool kRope = kEpi == GemvEpilogue::RopeKv, kSwiglu = kEpi == GemvEpilogue::Swiglu;
  constexpr int kRowsW = kRope ? 1 : kSwiglu ? 2 : kFeatW;  // weight rows per warp
  constexpr int kU = kChunksInFlight / kRowsW;               // chunks per weight row per step
  extern __shared__ uint4 xs[];
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
  const int64_t m_out = kSwiglu ? g.m / 2 : g.m;
  constexpr int64_t kPerGroup = kRope || kSwiglu ? kWarps : kWarps * kRowsW;  // features of a block's group
  const int64_t n_groups_m = (m_out + kPerGroup - 1) / kPerGroup;
  // The warp's output features and weight rows in group `grp` (a block takes groups
  // blockIdx.x, + gridDim.x, ...; RopeKv launches one block per group): RopeKv one feature
  // (its pair layout), Swiglu one feature (gate and up rows), else kFeatW features
  // 8 kFeatW grp + 8 q + w.
  int64_t feat[kRowsW], wrow[kRowsW];
  bool active[kRowsW];
  auto set_rows = [&](int64_t grp) {
    if constexpr (kRope) {
      feat[0] = wrow[0] = gemv_detail::rope_feature(f.rope, grp, warp);
      active[0] = true;
    } else if constexpr (kSwiglu) {
      feat[0] = feat[1] = grp * kWarps + warp;
      wrow[0] = feat[0], wrow[1] = feat[0] + m_out;
      active[0] = active[1] = feat[0] < m_out;
    } else {
#pragma unroll
      for (int q = 0; q < kRowsW; ++q) {
        feat[q] = wrow[q] = grp * kPerGroup + q * kWarps + warp;
        active[q] = feat[q] < m_out;
      }
    }
  };
  const int64_t n_chunks = g.k / F::kElems;
  const typename F::Groups groups = F::groups(g);
  auto load = [&](int64_t i0, Chunk (&c)[kRowsW][kU]) {
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int q = 0; q < kRowsW; ++q)
        if (active[q] && i0 + 32 * u < n_chunks) F::load(g, groups, wrow[q], i0 + 32 * u, c[q][u]);
  };
  // The first chunks: weights are never written, so they load before the previous kernel is
  // known to be done.
  int64_t grp = blockIdx.x;
  set_rows(grp);
  Chunk next[kRowsW][kU] = {};
  load(lane, next);
  pdl_begin();

  float unscale[R];
  stage_rows<F, R, kNorm>(g, f, xs, unscale);
  const int64_t stride = x_row_words<F>(g.k);
  for (;;) {
    float acc[kRowsW][R];
#pragma unroll
    for (int q = 0; q < kRowsW; ++q)
#pragma unroll
      for (int r = 0; r < R; ++r) acc[q][r] = 0.0f;
    for (int64_t i0 = lane; i0 < n_chunks; i0 += 32 * kU) {
      Chunk cur[kRowsW][kU];
#pragma unroll
      for (int q = 0; q < kRowsW; ++q)
#pragma unroll
        for (int u = 0; u < kU; ++u) cur[q][u] = next[q][u];
      if (i0 + 32 * kU < n_chunks) load(i0 + 32 * kU, next);
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t i = i0 + 32 * u;
#pragma unroll
        for (int q = 0; q < kRowsW; ++q)
          if (active[q] && i < n_chunks) F::template multiply<R>(cur[q][u], xs + x_word<F>(i, 0), stride, acc[q]);
      }
    }
    // This group's features; then the next group's first chunks go in flight before the
    // reduction and the stores.
    int64_t out_feat[kRowsW], out_row[kRowsW];
    bool out_active[kRowsW];
#pragma unroll
    for (int q = 0; q < kRowsW; ++q) out_feat[q] = feat[q], out_row[q] = wrow[q], out_active[q] = active[q];
    const int64_t grp_next = grp + gridDim.x;
    if (grp_next < n_groups_m) {
      set_rows(grp_next);
      load(lane, next);
    }
#pragma unroll
    for (int q = 0; q < kRowsW; ++q) {
      const float s = F::kRowScale && out_active[q] ? static_cast<const float*>(g.wq.scales)[out_row[q]] : 1.0f;
#pragma unroll
      for (int r = 0; r < R; ++r) acc[q][r] = warp_sum(acc[q][r]) * unscale[r] * s;
    }
    if constexpr (kRope) {  // one group per block; every warp active (m = heads x head_dim, 8 | head_dim)
      __shared__ float ys[kWarps][R];
      if (lane == 0)
#pragma unroll
        for (int r = 0; r < R; ++r)
          ys[warp][r] = to_float(from_float<bf16>(acc[0][r] + (g.bias ? to_float(g.bias[out_feat[0]]) : 0.0f)));
      __syncthreads();
      gemv_detail::rope_kv_store<R>(f.rope, static_cast<bf16*>(g.out), ys);
      return;
    }
    if (lane == 0) {
      if constexpr (kSwiglu) {
        if (out_active[0]) {
          const int64_t j = out_feat[0];
          const float gb = g.bias ? to_float(g.bias[j]) : 0.0f, ub = g.bias ? to_float(g.bias[j + m_out]) : 0.0f;
#pragma unroll
          for (int r = 0; r < R; ++r)
            gemv_detail::store_output<kEpi>(g, m_out, j, r, acc[0][r] + gb, acc[1][r] + ub);
        }
      } else {
#pragma unroll
        for (int q = 0; q < kRowsW; ++q) {
          if (!out_active[q]) continue;
          const float b = g.bias ? to_float(g.bias[out_feat[q]]) : 0.0f;
#pragma unroll
          for (int r = 0; r < R; ++r)
            gemv_detail::store_output<kEpi>(g, m_out, out_feat[q], r, acc[q][r] + b, 0.0f);
        }
      }
    }
    if (grp_next >= n_groups_m) return;
    grp = grp_next;
  }
}

template <typename F>
size_t smem_bytes(const GemmArgs& g) {
  return size_t(g.rows) * size_t(x_row_words<F>(g.k)) * 16;
}

// A block per group of features, or (persistent, not with RoPE/KV) only as many blocks as fit
// on the device at once, each looping over groups, so that each block stages its input rows
// once for more weight rows.
template <typename F, int R, bool kNorm, GemvEpilogue kEpi, int kFeatW = 1>
void launch_kernel(const GemmArgs& g, const GemvFusion& f, cudaStream_t stream, bool persistent) {
  static std::atomic<uint64_t> attr_done{0};
  auto* kernel = gemv_half2_kernel<F, R, kNorm, kEpi, kFeatW>;
  once_per_device(attr_done, [&] {
    TF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxSmem)));
  });
  const int64_t m_out = kEpi == GemvEpilogue::Swiglu ? g.m / 2 : g.m;
  const int64_t per_block = kEpi == GemvEpilogue::Swiglu || kEpi == GemvEpilogue::RopeKv ? kWarps : kFeatW * kWarps;
  int64_t blocks = (m_out + per_block - 1) / per_block;
  const size_t smem = smem_bytes<F>(g);
  const bool resident = persistent && kEpi != GemvEpilogue::RopeKv;
  if (resident) blocks = std::min(blocks, resident_blocks(kernel, kWarps * 32, smem));
  const dim3 grid(static_cast<unsigned>(blocks)), block(kWarps * 32);
  if (resident)
    launch_resident(kernel, grid, block, smem, stream, g, f);
  else
    launch_pdl(kernel, grid, block, smem, stream, g, f);
}

template <typename F, int R, int kFeatW>
void launch_rows(const GemmArgs& g, const GemvFusion& f, cudaStream_t stream, bool persistent) {
  using E = GemvEpilogue;
  const bool p = persistent;
  if (f.norm_w) {
    if (f.epilogue == E::Swiglu)
      launch_kernel<F, R, true, E::Swiglu>(g, f, stream, p);
    else if (f.epilogue == E::RopeKv)
      launch_kernel<F, R, true, E::RopeKv>(g, f, stream, p);
    else
      launch_kernel<F, R, true, E::Store, kFeatW>(g, f, stream, p);
    return;
  }
  switch (f.epilogue) {
    case E::Store: launch_kernel<F, R, false, E::Store, kFeatW>(g, f, stream, p); break;
    case E::AddTo: launch_kernel<F, R, false, E::AddTo, kFeatW>(g, f, stream, p); break;
    case E::Swiglu: launch_kernel<F, R, false, E::Swiglu>(g, f, stream, p); break;
    case E::RopeKv: launch_kernel<F, R, false, E::RopeKv>(g, f, stream, p); break;
  }
}

template <typename F, int kFeatW>
void launch_feat(const GemmArgs& g, const GemvFusion& f, cudaStream_t stream, bool persistent) {
  switch (g.rows) {
    case 1: launch_rows<F, 1, kFeatW>(g, f, stream, persistent); break;
    case 2: launch_rows<F, 2, kFeatW>(g, f, stream, persistent); break;
    case 3: launch_rows<F, 3, kFeatW>(g, f, stream, persistent); break;
    default: launch_rows<F, 4, kFeatW>(g, f, stream, persistent); break;
  }
}

template <typename F>
void launch_format(const GemmArgs& g, const GemvFusion& f, cudaStream_t stream, const Half2Options& o) {
  if (o.features_per_warp == 2)
    launch_feat<F, 2>(g, f, stream, o.persistent);
  else
    launch_feat<F, 1>(g, f, stream, o.persistent);
}

}  // namespace

bool gemv_half2_supported(const GemmArgs& g, const GemvFusion& f, const Half2Options& o) {
  if (o.imma) return gemv_imma_supported(g, f);
  if (o.split > 0) return gemv_split_supported(g, f, o.split, o.stages);
  const bool own_layout = f.epilogue == GemvEpilogue::Swiglu || f.epilogue == GemvEpilogue::RopeKv;
  if (o.features_per_warp != 1 && (o.features_per_warp != 2 || own_layout)) return false;
  if (o.persistent && f.epilogue == GemvEpilogue::RopeKv) return false;
  if (g.rows > kGemvHalf2MaxRows || !gemv_supported(g, f)) return false;
  switch (g.wq.dtype) {
    case DType::W4: return smem_bytes<FormatW4>(g) <= kMaxSmem;
    case DType::W8: return smem_bytes<FormatW8>(g) <= kMaxSmem;
    default: return false;
  }
}

void launch_gemv_half2(const GemmArgs& g, cudaStream_t stream, const GemvFusion& f, const Half2Options& o) {
  if (o.imma) return launch_gemv_imma(g, stream, f);
  if (o.split > 0) return launch_gemv_split(g, stream, f, o.split, o.stages, o.blocks_per_sm);
  if (g.m == 0) return;
  if (g.wq.dtype == DType::W8)
    launch_format<FormatW8>(g, f, stream, o);
  else
    launch_format<FormatW4>(g, f, stream, o);
}

}  // namespace tf::cuda

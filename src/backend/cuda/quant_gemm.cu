// Kernels of quant_gemm.cuh other than the tensor-core kernel (quant_mma.cuh), and the
// choice of that kernel's tile.
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant_gemm.cuh"
#include "backend/cuda/quant_mma.cuh"
#include "backend/cuda/row_device.cuh"

namespace tf::cuda {
namespace {

// ---- dequantization ---------------------------------------------------------------------------

// One thread per 16-byte chunk of W4 codes (32 elements of one row, all in one group since
// group sizes are multiples of 32), or per 8 bytes of W8/FP8 codes: each element s * code in
// FP32, rounded once to BF16 (the host's dequantize() then BF16), stored 16 bytes at a time.
// Every byte is read once and written once: the kernel runs at the copy bandwidth.
__global__ void dequantize_w4_kernel(QuantWeightArgs w, int64_t m, int64_t k, bf16* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, per_row = k / 32;
  if (i >= m * per_row) return;
  const int64_t row = i / per_row, col = i % per_row * 32;
  const int64_t grp = row * (k / w.group_size) + col / w.group_size;
  const float s = __half2float(static_cast<const __half*>(w.scales)[grp]);
  const float z = float(w.zeros[grp]);
  const uint4 c = reinterpret_cast<const uint4*>(w.q)[i];
  const uint32_t words[4] = {c.x, c.y, c.z, c.w};
  uint4* dst = reinterpret_cast<uint4*>(out + row * k + col);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    float v[8];
#pragma unroll
    for (int b = 0; b < 8; ++b) v[b] = s * (float((words[e] >> (4 * b)) & 15u) - z);
    dst[e] = pack8(v);
  }
}

template <DType kW>
__global__ void dequantize_w8_kernel(QuantWeightArgs w, int64_t m, int64_t k, bf16* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m * k / 8) return;
  const int64_t row = i * 8 / k;
  const float s = static_cast<const float*>(w.scales)[row];
  const uint2 c = reinterpret_cast<const uint2*>(w.q)[i];
  const uint32_t words[2] = {c.x, c.y};
  float v[8];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    if constexpr (kW == DType::W8) {
#pragma unroll
      for (int b = 0; b < 4; ++b) v[4 * e + b] = s * float(int8_t(words[e] >> (8 * b)));
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const __half2_raw r =
            __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t((words[e] >> (16 * h)) & 0xffffu), __NV_E4M3);
        const float2 f2 = __half22float2(__half2(r));
        v[4 * e + 2 * h] = s * f2.x;
        v[4 * e + 2 * h + 1] = s * f2.y;
      }
    }
  }
  reinterpret_cast<uint4*>(out)[i] = pack8(v);
}

// ---- FP8 activations -------------------------------------------------------------------------

constexpr int kRowThreads = 256;

// One block per row; 16-byte loads (k is a multiple of 8: callers quantize for FP8 GEMMs,
// whose k is a multiple of 16).
__global__ void __launch_bounds__(kRowThreads) quantize_rows_fp8_kernel(const bf16* x, int64_t k, uint8_t* q,
                                                                        float* scale) {
  __shared__ float scratch[32];
  pdl_begin();
  const uint4* xr = reinterpret_cast<const uint4*>(x + int64_t(blockIdx.x) * k);
  uint2* qr = reinterpret_cast<uint2*>(q + int64_t(blockIdx.x) * k);
  const int64_t n8 = k / 8;
  float amax = 0.0f;
  bool finite = true;
  for (int64_t i = threadIdx.x; i < n8; i += kRowThreads) {
    float v[8];
    unpack8(xr[i], v);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      finite &= isfinite(v[e]);
      amax = fmaxf(amax, fabsf(v[e]));
    }
  }
  const float s = fp8_row_scale(amax, finite, scratch);
  const bool zero = !(s > 0.0f);
  for (int64_t i = threadIdx.x; i < n8; i += kRowThreads) {
    float v[8];
    unpack8(xr[i], v);
    qr[i] = fp8_pack8(v, s, zero);
  }
  if (threadIdx.x == 0) scale[blockIdx.x] = s;
}

// RMSNorm, then per-token FP8 of its output, in one kernel (the norm before an FP8 W8A8
// matmul): one block per row, the row's 8-element chunks kept in registers (k a multiple of
// 8, at most kFp8NormMaxK). The steps are those of rms_norm_vec_kernel (norm.cu) and
// quantize_rows_fp8_kernel (row_device.cuh), the normalized values rounded to BF16 before
// their maximum is taken: the codes and scales are those of the two kernels apart, bit for
// bit.
__global__ void __launch_bounds__(kFp8NormThreads)
    rms_norm_quantize_fp8_kernel(const bf16* x, const bf16* w, float eps, int64_t k, uint8_t* q, float* scale) {
  __shared__ float scratch[32];
  pdl_begin();
  const int64_t n8 = k / 8;
  const uint4* xr = reinterpret_cast<const uint4*>(x + int64_t(blockIdx.x) * k);
  float v[kFp8NormChunks][8];
  const float ss = block_sum(load_chunks_sum_squares<kFp8NormThreads>(xr, n8, v), scratch);
  float amax = 0.0f;
  bool finite = true;
  norm_chunks<kFp8NormThreads>(v, n8, ss, k, eps, w, amax, finite);
  store_fp8_row<kFp8NormThreads>(v, n8, amax, finite, q + int64_t(blockIdx.x) * k, scale + blockIdx.x, scratch);
}

// The scale kernel of an FP8 GEMM fused with what follows the product (Fp8Then): y[r, j] =
// acc[r, j] * xs[r] * ws[j] (+ bias[j]) rounded to BF16 as fp8_scale_kernel does, then
//   AddTo:          out[r, j] += y[r, j] (out [rows, m], rounded once, as add_kernel)
//   Swiglu / Geglu: out[r, j] = act(y[r, j]) * y[r, m/2 + j] (out [rows, m/2], as gated_kernel)
// Four consecutive outputs per thread (m % 16 == 0: aligned reads of acc on either half).
template <Fp8Then kThen, typename AccT>
__global__ void fp8_scale_then_kernel(const AccT* acc, const float* xs, const float* ws, const bf16* bias,
                                      int64_t rows, int64_t m, bf16* out) {
  pdl_begin();
  const int64_t n_out = kThen == Fp8Then::AddTo ? m : m / 2;
  const int64_t i4 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i4 >= rows * n_out / 4) return;
  const int64_t r = i4 * 4 / n_out, j = i4 * 4 % n_out;
  auto y = [&](int64_t col, float a) {
    return to_float(from_float<bf16>(fp8_scaled(a, xs[r], ws[col], bias, col)));
  };
  float a[4];
  load_acc4(acc + r * m + j, a);
  bf16* o = out + r * n_out + j;
  if constexpr (kThen == Fp8Then::AddTo) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[e] = from_float<bf16>(to_float(o[e]) + y(j + e, a[e]));
  } else {
    float b[4];
    load_acc4(acc + r * m + n_out + j, b);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float g = y(j + e, a[e]), u = y(n_out + j + e, b[e]);
      o[e] = from_float<bf16>((kThen == Fp8Then::Geglu ? gelu_tanh(g) : silu(g)) * u);
    }
  }
}

// Four consecutive outputs per thread (m % 4 == 0).
template <typename OutT, typename AccT>
__global__ void fp8_scale_kernel(const AccT* acc, const float* xs, const float* ws, const bf16* bias, int64_t rows,
                                 int64_t m, OutT* out) {
  pdl_begin();
  const int64_t i4 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i4 >= rows * m / 4) return;
  const int64_t r = i4 * 4 / m, j = i4 * 4 % m;
  float av[4];
  load_acc4(acc + i4 * 4, av);
#pragma unroll
  for (int e = 0; e < 4; ++e)
    out[i4 * 4 + e] = from_float<OutT>(fp8_scaled(av[e], xs[r], ws[j + e], bias, j + e));
}

// Eight consecutive outputs per thread (m % 8 == 0), in place.
__global__ void fp8_row_scale_kernel(void* out, bool out_f32, const float* xs, const bf16* bias, int64_t rows,
                                     int64_t m) {
  pdl_begin();
  const int64_t i8 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i8 >= rows * m / 8) return;
  const int64_t r = i8 * 8 / m, j = i8 * 8 % m;
  const float s = xs[r];
  float b[8] = {};
  if (bias) unpack8(reinterpret_cast<const uint4*>(bias + j)[0], b);
  if (out_f32) {
    float4* o = reinterpret_cast<float4*>(out) + 2 * i8;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float4 v = o[h];
      o[h] = make_float4(v.x * s + b[4 * h], v.y * s + b[4 * h + 1], v.z * s + b[4 * h + 2], v.w * s + b[4 * h + 3]);
    }
    return;
  }
  uint4* o = reinterpret_cast<uint4*>(out) + i8;
  float v[8];
  unpack8(*o, v);
#pragma unroll
  for (int e = 0; e < 8; ++e) v[e] = v[e] * s + b[e];
  *o = pack8(v);
}

unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

// A caller's broken precondition, as tf::Error (nvcc cannot compile fmt, so no TF_ASSERT here).
void require(bool ok, const char* what, int line) {
  if (!ok) throw_cuda_error(cudaErrorInvalidValue, what, __FILE__, line);
}

// ---- tensor-core kernel: the plan of a launch ---------------------------------------------------

int sm_count() {
  static std::atomic<int> n{0};
  if (n.load(std::memory_order_relaxed) == 0) {
    int device = 0, v = 0;
    TF_CUDA_CHECK(cudaGetDevice(&device));
    TF_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device));
    n.store(v, std::memory_order_relaxed);
  }
  return n.load(std::memory_order_relaxed);
}

// Token tiles (8 tokens each) per block row.
int token_tiles(int64_t rows) { return rows <= 8 ? 1 : rows <= 16 ? 2 : rows <= 32 ? 4 : 8; }

bool tiled(QuantMmaTile t) { return t == QuantMmaTile::T64 || t == QuantMmaTile::T128; }
// Output features per block (Swiglu: half the weight rows it reads).
int block_features(QuantMmaTile t) {
  switch (t) {
    case QuantMmaTile::F16K16:
    case QuantMmaTile::F16K8:
    case QuantMmaTile::F16K4: return 16;
    case QuantMmaTile::F32K8: return 32;
    case QuantMmaTile::F64K4:
    case QuantMmaTile::T64: return 64;
    case QuantMmaTile::T128: return 128;
    case QuantMmaTile::Auto: break;
  }
  return 0;
}

bool fused(const GemvFusion& f) { return f.norm_w || f.epilogue != GemvEpilogue::Store; }

// Whether quant_mma.cuh instantiates `tile` for this call.
bool tile_has_kernel(QuantMmaTile tile, int64_t rows, const GemvFusion& f) {
  if (tile == QuantMmaTile::Auto) return false;
  if (tiled(tile)) return rows > 8 && !fused(f);
  if (rows > 16 || (rows > 8 && fused(f))) return false;
  if (rows > 8 && tile == QuantMmaTile::F64K4) return false;  // at most 4 accumulator tiles per warp
  return f.epilogue != GemvEpilogue::RopeKv || block_features(tile) == 16;
}

int64_t blocks_of(QuantMmaTile t, const GemmArgs& g, const GemvFusion& f) {
  const int64_t m_out = f.epilogue == GemvEpilogue::Swiglu ? g.m / 2 : g.m;
  const int64_t fo = block_features(t) / (f.epilogue == GemvEpilogue::Swiglu ? 2 : 1);
  const int64_t tb = 8 * token_tiles(g.rows);
  return (m_out + fo - 1) / fo * ((g.rows + tb - 1) / tb);
}

// The tile by shape, as bench_quant_gemm measured on the H200 (Llama-3-8B projections): up to
// 16 rows the decode kernel, with 32 features per tile on wide matrices at up to 8 rows (28672
// rows: the most weight bytes per activation byte), 16 warps along k on long rows (k = 14336)
// and narrow matrices (1024 rows: too few tiles to fill the GPU otherwise), else 16 features
// and 8 warps; more rows the tiled kernel, 128 features per block on wide matrices, else 64
// (and split-K, launch_quant_mma).
QuantMmaTile auto_tile(const GemmArgs& g, const GemvFusion& f) {
  const int64_t m_out = f.epilogue == GemvEpilogue::Swiglu ? g.m / 2 : g.m;
  if (g.rows > 16 && !fused(f)) return g.m >= 16384 ? QuantMmaTile::T128 : QuantMmaTile::T64;
  const bool rope = f.epilogue == GemvEpilogue::RopeKv;  // 16-feature tiles only
  if (!rope && (f.epilogue == GemvEpilogue::Swiglu || (m_out >= 16384 && g.rows <= 8))) return QuantMmaTile::F32K8;
  return g.k >= 8192 || m_out <= 2048 ? QuantMmaTile::F16K16 : QuantMmaTile::F16K8;
}

// Split-K of the tiled kernel: enough blocks for three per multiprocessor, each with at least
// 8 k-blocks.
int auto_splits(QuantMmaTile t, const GemmArgs& g) {
  const int64_t kb = g.k / (g.wq.dtype == DType::W4 ? 128 : 64), blocks = blocks_of(t, g, {});
  const int64_t want = (3 * sm_count() + blocks - 1) / blocks;
  return int(std::max<int64_t>(1, std::min<int64_t>({want, kb / 8, 16})));
}
size_t counter_bytes(int64_t blocks) { return (size_t(blocks) * 4 + 255) / 256 * 256; }
size_t split_bytes(const GemmArgs& g, int64_t blocks, int splits) {
  return counter_bytes(blocks) + size_t(splits) * size_t(g.rows) * size_t(g.m) * 4;
}

}  // namespace

const char* quant_mma_tile_name(QuantMmaTile tile) {
  switch (tile) {
    case QuantMmaTile::Auto: return "auto";
    case QuantMmaTile::F16K16: return "f16k16";
    case QuantMmaTile::F16K8: return "f16k8";
    case QuantMmaTile::F16K4: return "f16k4";
    case QuantMmaTile::F32K8: return "f32k8";
    case QuantMmaTile::F64K4: return "f64k4";
    case QuantMmaTile::T64: return "t64";
    case QuantMmaTile::T128: return "t128";
  }
  return "?";
}

bool quant_mma_supported(const GemmArgs& g, const GemvFusion& f, QuantMmaTile tile) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (g.accumulate || g.rows < 1 || !aligned(g.x) || !aligned(g.wq.q) || !g.wq.scales) return false;
  switch (g.wq.dtype) {
    case DType::W4:
      if (g.k % 128 != 0 || !g.wq.zeros || g.wq.group_size < 32 || (g.wq.group_size & (g.wq.group_size - 1)) != 0 ||
          g.k % g.wq.group_size != 0)
        return false;
      break;
    case DType::W8:
    case DType::FP8:
      if (g.k % 64 != 0) return false;
      break;
    default: return false;
  }
  // fused: the GEMV's rules (gemv_supported); RopeKv's blocks own 8 pairs of a head (rope_row)
  if (fused(f) && !gemv_supported(g, f)) return false;
  if (f.epilogue == GemvEpilogue::RopeKv && f.rope.head_dim % 16 != 0) return false;
  return tile_has_kernel(tile == QuantMmaTile::Auto ? auto_tile(g, f) : tile, g.rows, f);
}

size_t quant_mma_workspace_bytes(const GemmArgs& g, QuantMmaTile tile) {
  const QuantMmaTile t = tile == QuantMmaTile::Auto ? auto_tile(g, {}) : tile;
  if (!tiled(t)) return 0;
  return split_bytes(g, blocks_of(t, g, {}), auto_splits(t, g));
}

void launch_quant_mma(const GemmArgs& g, cudaStream_t stream, const GemvFusion& f, const QuantMmaOptions& opt) {
  if (g.rows == 0 || g.m == 0) return;
  qmma::Plan p{.tile = opt.tile == QuantMmaTile::Auto ? auto_tile(g, f) : opt.tile, .nt = token_tiles(g.rows),
               .splits = 1, .split = {}};
  require(tile_has_kernel(p.tile, g.rows, f), "launch_quant_mma: the tile has no kernel for these rows and fusions",
          __LINE__);
  if (tiled(p.tile)) {
    const int64_t blocks = blocks_of(p.tile, g, f);
    const int splits = auto_splits(p.tile, g);
    if (splits > 1 && opt.workspace && opt.workspace_bytes >= split_bytes(g, blocks, splits)) {
      p.splits = splits;
      p.split.counters = static_cast<uint32_t*>(opt.workspace);
      p.split.partials = reinterpret_cast<float*>(static_cast<uint8_t*>(opt.workspace) + counter_bytes(blocks));
    }
  }
  switch (g.wq.dtype) {
    case DType::W4: qmma::launch_w4(g, f, p, stream); break;
    case DType::W8: qmma::launch_w8(g, f, p, stream); break;
    default: qmma::launch_fp8(g, f, p, stream); break;
  }
  TF_CUDA_CHECK_LAUNCH("quant_mma_kernel");
}

void launch_dequantize(const QuantWeightArgs& w, int64_t m, int64_t k, bf16* out, cudaStream_t stream) {
  if (m == 0 || k == 0) return;
  constexpr int kThreads = 256;
  switch (w.dtype) {
    case DType::W4: dequantize_w4_kernel<<<blocks_for(m * k / 32, kThreads), kThreads, 0, stream>>>(w, m, k, out); break;
    case DType::W8:
      dequantize_w8_kernel<DType::W8><<<blocks_for(m * k / 8, kThreads), kThreads, 0, stream>>>(w, m, k, out);
      break;
    default:
      dequantize_w8_kernel<DType::FP8><<<blocks_for(m * k / 8, kThreads), kThreads, 0, stream>>>(w, m, k, out);
      break;
  }
  TF_CUDA_CHECK_LAUNCH("dequantize_kernel");
}

void launch_quantize_rows_fp8(const bf16* x, int64_t rows, int64_t k, uint8_t* q, float* scale, cudaStream_t stream) {
  if (rows == 0) return;
  require(k % 8 == 0, "launch_quantize_rows_fp8: k not a multiple of 8", __LINE__);
  launch_pdl(quantize_rows_fp8_kernel, dim3(unsigned(rows)), dim3(kRowThreads), 0, stream, x, k, q, scale);
  TF_CUDA_CHECK_LAUNCH("quantize_rows_fp8_kernel");
}

bool launch_rms_norm_quantize_rows_fp8(const bf16* x, const bf16* w, float eps, int64_t rows, int64_t k, uint8_t* q,
                                       float* scale, cudaStream_t stream) {
  const uintptr_t addresses = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w);
  if (k % 8 != 0 || k > kFp8NormMaxK || addresses % 16 != 0) return false;
  if (rows == 0) return true;
  launch_pdl(rms_norm_quantize_fp8_kernel, dim3(unsigned(rows)), dim3(kFp8NormThreads), 0, stream, x, w, eps, k, q,
             scale);
  TF_CUDA_CHECK_LAUNCH("rms_norm_quantize_fp8_kernel");
  return true;
}

namespace {

template <typename AccT>
void launch_scale_then(Fp8Then then, const AccT* acc, const float* x_scale, const float* w_scale, const bf16* bias,
                       int64_t rows, int64_t m, bf16* out, cudaStream_t stream) {
  const int64_t n_out = then == Fp8Then::AddTo ? m : m / 2;
  const dim3 grid(blocks_for(rows * n_out / 4, 256)), block(256);
  switch (then) {
    case Fp8Then::AddTo:
      launch_pdl(fp8_scale_then_kernel<Fp8Then::AddTo, AccT>, grid, block, 0, stream, acc, x_scale, w_scale, bias,
                 rows, m, out);
      break;
    case Fp8Then::Swiglu:
      launch_pdl(fp8_scale_then_kernel<Fp8Then::Swiglu, AccT>, grid, block, 0, stream, acc, x_scale, w_scale, bias,
                 rows, m, out);
      break;
    case Fp8Then::Geglu:
      launch_pdl(fp8_scale_then_kernel<Fp8Then::Geglu, AccT>, grid, block, 0, stream, acc, x_scale, w_scale, bias,
                 rows, m, out);
      break;
  }
}

}  // namespace

void launch_fp8_scale_then(Fp8Then then, const void* acc, bool acc_f32, const float* x_scale, const float* w_scale,
                           const bf16* bias, int64_t rows, int64_t m, bf16* out, cudaStream_t stream) {
  if (rows == 0 || m == 0) return;
  require(m % 16 == 0, "launch_fp8_scale_then: m not a multiple of 16", __LINE__);
  if (acc_f32)
    launch_scale_then(then, static_cast<const float*>(acc), x_scale, w_scale, bias, rows, m, out, stream);
  else
    launch_scale_then(then, static_cast<const bf16*>(acc), x_scale, w_scale, bias, rows, m, out, stream);
  TF_CUDA_CHECK_LAUNCH("fp8_scale_then_kernel");
}

void launch_fp8_scale_epilogue(const void* acc, bool acc_f32, const float* x_scale, const float* w_scale,
                               const bf16* bias, int64_t rows, int64_t m, void* out, bool out_f32,
                               cudaStream_t stream) {
  if (rows == 0 || m == 0) return;
  require(m % 4 == 0, "launch_fp8_scale_epilogue: m not a multiple of 4", __LINE__);
  require(acc_f32 || !out_f32, "launch_fp8_scale_epilogue: F32 output from BF16 sums", __LINE__);
  const dim3 grid(blocks_for(rows * m / 4, 256)), block(256);
  if (out_f32)
    launch_pdl(fp8_scale_kernel<float, float>, grid, block, 0, stream, static_cast<const float*>(acc), x_scale,
               w_scale, bias, rows, m, static_cast<float*>(out));
  else if (acc_f32)
    launch_pdl(fp8_scale_kernel<bf16, float>, grid, block, 0, stream, static_cast<const float*>(acc), x_scale,
               w_scale, bias, rows, m, static_cast<bf16*>(out));
  else
    launch_pdl(fp8_scale_kernel<bf16, bf16>, grid, block, 0, stream, static_cast<const bf16*>(acc), x_scale, w_scale,
               bias, rows, m, static_cast<bf16*>(out));
  TF_CUDA_CHECK_LAUNCH("fp8_scale_kernel");
}

void launch_fp8_row_scale(void* out, bool out_f32, const float* x_scale, const bf16* bias, int64_t rows, int64_t m,
                          cudaStream_t stream) {
  if (rows == 0 || m == 0) return;
  require(m % 8 == 0, "launch_fp8_row_scale: m not a multiple of 8", __LINE__);
  launch_pdl(fp8_row_scale_kernel, dim3(blocks_for(rows * m / 8, 256)), dim3(256), 0, stream, out, out_f32, x_scale,
             bias, rows, m);
  TF_CUDA_CHECK_LAUNCH("fp8_row_scale_kernel");
}

}  // namespace tf::cuda

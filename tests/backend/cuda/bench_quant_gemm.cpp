// Micro-benchmark of the quantized matmul kernels, each alone, on the Llama-3-8B projection
// shapes (m x k: q/o 4096 x 4096, k/v 1024 x 4096, gate+up 28672 x 4096, down 4096 x 14336)
// at rows 1..256, so one device call measures where each kernel wins:
//   bf16 cublas | bf16 gemv                                   (the 16-bit baseline)
//   <fmt> gemv        launch_gemv: what a decode step runs (rows <= 8)
//   <fmt> simt        the CUDA-core GEMV kernel alone (rows <= 8)
//   <fmt> half2[x2][ p]  w4, w8: the half2 GEMV (gemv_half2.cuh; rows <= 4), one [two] features
//                     a warp[, persistent blocks]; `split2` its k-split kernel (one row, 2 chunks
//                     a lane), `ring8[ bN]` that kernel with an 8-row shared-memory ring[, at
//                     most N blocks an SM]
//   <fmt> mma         the tensor-core kernel with its automatic tile; `mma <tile>` each tile
//   <fmt> dequant+cublas, and `dequant only` (its GB/s: codes read + BF16 written)
//   fp8 w8a8 (<scaling>[, fast])  per-token FP8 activations + cuBLASLt's FP8 GEMM
// for <fmt> = w8, w4 (group 128), fp8. Then, per shape, the scalings cuBLASLt offers for FP8
// (the heuristic's status for each) and their times; then prefill (--prefill-rows, 4096) with
// BF16 cuBLAS, FP8 W8A8 and dequantize-then-cuBLAS beside the FP8 peak of a plain cuBLASLt FP8
// GEMM (8192^3, unscaled, fast accumulation).
//
// Each variant: a warm-up, then the mean of --reps launches between CUDA events. Weights
// rotate among enough copies to span 256 MB, so every launch reads them from memory, not from
// the 60 MB L2 (a model's layers never hit in L2 either). Printed: us, GB/s (weight + scale
// bytes, activations in, output out, over the time) beside the device's copy bandwidth, and
// TFLOP/s (2 rows m k over the time). Weights are random codes (FP8 without NaN),
// activations 1.0, so only the time means anything. Prints nothing but numbers; asserts
// nothing.
//
//   build-dev/tests/backend/cuda/bench_quant_gemm [--reps 20] [--rows 1,2,4,...]
//       [--shapes q/o,k/v,gate+up,down] [--prefill-rows 4096] [--json]
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm.cuh"
#include "backend/cuda/gemm_lt.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/gemv_half2.cuh"
#include "backend/cuda/quant_gemm.cuh"
#include "core/split.h"

namespace tf::cuda {
namespace {

struct Shape {
  const char* name;
  int64_t m, k;
};
const Shape kShapes[] = {{"q/o", 4096, 4096}, {"k/v", 1024, 4096}, {"gate+up", 28672, 4096}, {"down", 4096, 14336}};
constexpr size_t kRotateBytes = size_t(256) << 20;
constexpr size_t kWs = 32u << 20;  // cuBLAS / cuBLASLt workspace

uint64_t g_state = 0x9e3779b97f4a7c15ull;
uint64_t next_random() {
  g_state ^= g_state << 13;
  g_state ^= g_state >> 7;
  g_state ^= g_state << 17;
  return g_state;
}

void* device_alloc(size_t bytes) {
  void* d = nullptr;
  TF_CUDA_CHECK(cudaMalloc(&d, bytes));
  return d;
}
void* device_random(size_t bytes, uint8_t mask = 0xff) {
  std::vector<uint8_t> h(bytes);
  for (size_t i = 0; i < bytes; ++i) h[i] = uint8_t(next_random()) & mask;
  void* d = device_alloc(bytes);
  TF_CUDA_CHECK(cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice));
  return d;
}
template <typename T>
void* device_fill(size_t n, T v) {
  std::vector<T> h(n, v);
  void* d = device_alloc(n * sizeof(T));
  TF_CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
// `copies` consecutive copies of `bytes` bytes made by `make`.
std::vector<void*> rotated(int copies, size_t bytes, const std::function<void*()>& make) {
  std::vector<void*> v{make()};
  for (int c = 1; c < copies; ++c) {
    v.push_back(device_alloc(bytes));
    TF_CUDA_CHECK(cudaMemcpy(v.back(), v[0], bytes, cudaMemcpyDeviceToDevice));
  }
  return v;
}

// One weight matrix in every format, each in enough copies to defeat the L2.
struct Weights {
  std::vector<void*> bf16;
  std::vector<QuantWeightArgs> w8, w4, fp8;
  size_t bytes_bf16 = 0, bytes_w8 = 0, bytes_w4 = 0, bytes_fp8 = 0;  // codes + scales + zeros
  std::vector<void*> owned;
};
int copies_for(size_t bytes) { return int(std::clamp<size_t>((kRotateBytes + bytes - 1) / bytes, 1, 256)); }

Weights make_weights(int64_t m, int64_t k) {
  Weights w;
  const size_t n = size_t(m * k), groups = size_t(m * (k / 128));
  w.bytes_bf16 = 2 * n;
  w.bf16 = rotated(copies_for(w.bytes_bf16), w.bytes_bf16, [&] { return device_fill<uint16_t>(n, 0x3c00); });
  w.owned = w.bf16;
  auto codes = [&](size_t bytes, uint8_t mask, int copies) {
    std::vector<void*> v = rotated(copies, bytes, [&] { return device_random(bytes, mask); });
    w.owned.insert(w.owned.end(), v.begin(), v.end());
    return v;
  };
  auto keep = [&](void* p) {
    w.owned.push_back(p);
    return p;
  };
  void* row_scales = keep(device_fill<float>(size_t(m), 1e-3f));
  void* group_scales = keep(device_fill<uint16_t>(groups, 0x1400));
  auto* zeros = static_cast<uint8_t*>(keep(device_fill<uint8_t>(groups, 8)));
  w.bytes_w8 = n + 4 * size_t(m);
  for (void* q : codes(n, 0xff, copies_for(w.bytes_w8)))
    w.w8.push_back({.dtype = DType::W8, .q = static_cast<uint8_t*>(q), .scales = row_scales});
  w.bytes_w4 = n / 2 + 3 * groups;
  for (void* q : codes(n / 2, 0xff, copies_for(w.bytes_w4)))
    w.w4.push_back({.dtype = DType::W4, .q = static_cast<uint8_t*>(q), .scales = group_scales, .zeros = zeros,
                    .group_size = 128});
  w.bytes_fp8 = n + 4 * size_t(m);
  for (void* q : codes(n, 0x77, copies_for(w.bytes_fp8)))  // no NaN codes
    w.fp8.push_back({.dtype = DType::FP8, .q = static_cast<uint8_t*>(q), .scales = row_scales});
  return w;
}

double time_us(cudaStream_t s, int reps, const std::function<void(int)>& launch) {
  cudaEvent_t e[2];
  for (auto& ev : e) TF_CUDA_CHECK(cudaEventCreate(&ev));
  launch(0);
  TF_CUDA_CHECK(cudaEventRecord(e[0], s));
  for (int i = 0; i < reps; ++i) launch(i + 1);
  TF_CUDA_CHECK(cudaEventRecord(e[1], s));
  TF_CUDA_CHECK(cudaEventSynchronize(e[1]));
  float ms = 0;
  TF_CUDA_CHECK(cudaEventElapsedTime(&ms, e[0], e[1]));
  for (auto& ev : e) TF_CUDA_CHECK(cudaEventDestroy(ev));
  return 1e3 * double(ms) / reps;
}

double copy_bandwidth(cudaStream_t s) {
  const size_t bytes = size_t(1) << 30;
  void* a = device_alloc(bytes);
  void* b = device_alloc(bytes);
  const double us = time_us(s, 5, [&](int) { TF_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s)); });
  cudaFree(a);
  cudaFree(b);
  return 2.0 * double(bytes) / (us * 1e3);
}

// --shapes: names of kShapes, comma-separated.
std::vector<Shape> parse_shapes(const std::string& s) {
  std::vector<Shape> v;
  for (const std::string& name : split_list(s)) {
    const Shape* sh = std::find_if(std::begin(kShapes), std::end(kShapes), [&](const Shape& x) { return name == x.name; });
    if (sh == std::end(kShapes)) throw std::runtime_error("--shapes: unknown shape '" + name + "' (q/o, k/v, gate+up, down)");
    v.push_back(*sh);
  }
  return v;
}

struct Bench {
  cudaStream_t s = nullptr;
  cublasHandle_t blas = nullptr;
  void* ws = nullptr;       // cuBLAS and cuBLASLt workspace
  void* mma_ws = nullptr;   // the tensor-core kernel's split-K workspace
  size_t mma_ws_bytes = 0;
  LtGemm lt;
  int reps = 20;
  bool json = false;
  double bw = 0;

  // us of `launch`, printed with GB/s over `bytes` and TFLOP/s of a rows x k x m product.
  void report(const Shape& sh, int64_t rows, const std::string& variant, double bytes,
              const std::function<void(int)>& launch) {
    const double us = time_us(s, reps, launch);
    const double gbs = bytes / (us * 1e3), tflops = 2.0 * double(rows * sh.m * sh.k) / (us * 1e6);
    if (json)
      std::printf("{\"shape\": \"%s\", \"m\": %lld, \"k\": %lld, \"rows\": %lld, \"variant\": \"%s\", \"us\": %.2f, "
                  "\"gb_s\": %.1f, \"tflop_s\": %.2f, \"copy_gb_s\": %.0f}\n",
                  sh.name, (long long)sh.m, (long long)sh.k, (long long)rows, variant.c_str(), us, gbs, tflops, bw);
    else
      std::printf("%-8s %6lld %6lld %5lld  %-22s %10.2f %9.1f %8.2f\n", sh.name, (long long)sh.m, (long long)sh.k,
                  (long long)rows, variant.c_str(), us, gbs, tflops);
    std::fflush(stdout);
  }
};

// Buffers of one shape at up to max_rows rows.
struct Buffers {
  void *x, *out, *w16, *xq, *xs, *acc;
  Buffers(const Shape& sh, int64_t max_rows) {
    x = device_fill<uint16_t>(size_t(max_rows * sh.k), 0x3f80);  // 1.0
    out = device_alloc(size_t(max_rows * sh.m) * 4);
    w16 = device_alloc(size_t(sh.m * sh.k) * 2);
    xq = device_alloc(size_t(max_rows * sh.k));
    xs = device_alloc(size_t(max_rows) * 4);
    acc = device_alloc(size_t(max_rows * sh.m) * 4);
  }
  ~Buffers() {
    for (void* p : {x, out, w16, xq, xs, acc}) cudaFree(p);
  }
};

// The FP8 W8A8 path (activation quantization + GEMM) at scaling `sc`.
void report_w8a8(Bench& b, const Shape& sh, int64_t rows, const Weights& w, const Buffers& buf, Fp8Scaling sc,
                 bool fast) {
  Fp8GemmArgs a{.xq = static_cast<uint8_t*>(buf.xq), .x_scale = static_cast<float*>(buf.xs), .w_scale = nullptr,
                .out = buf.out, .rows = rows, .k = sh.k, .m = sh.m, .scaling = sc, .fast_accum = fast};
  a.wq = w.fp8[0].q;
  a.w_scale = static_cast<const float*>(w.fp8[0].scales);
  if (!LtGemm::fp8_supported(a) || !b.lt.fp8_available(a, kWs)) return;
  const std::string name = std::string("fp8 w8a8 ") + fp8_scaling_name(b.lt.fp8_scaling(a, kWs)) + (fast ? ", fast" : "");
  const auto* x = static_cast<const __nv_bfloat16*>(buf.x);
  // With fast accumulation every algorithm of the heuristic's list and their split-K copies
  // (the engine times them all and keeps the fastest: CudaBackend::fp8_choice); otherwise the
  // heuristic's first.
  const int n_algos = fast && sc != Fp8Scaling::Auto ? b.lt.fp8_algorithms(a, kWs) : 1;
  for (int algo = 0; algo < n_algos; ++algo) {
    a.algo = n_algos > 1 ? algo : -1;
    b.report(sh, rows,
             n_algos > 1 ? name + " #" + std::to_string(algo) + " (" + b.lt.fp8_algorithm_name(a, kWs) + ")" : name,
             double(w.bytes_fp8) + double(rows * sh.k) * 2 + double(rows * sh.m) * 2, [&](int i) {
               Fp8GemmArgs ai = a;
               ai.wq = w.fp8[size_t(i) % w.fp8.size()].q;
               launch_quantize_rows_fp8(x, rows, sh.k, static_cast<uint8_t*>(buf.xq), static_cast<float*>(buf.xs),
                                        b.s);
               b.lt.run_fp8(ai, b.ws, kWs, buf.acc, b.s);
             });
  }
}

void run_shape(Bench& b, const Shape& sh, const std::vector<int64_t>& rows_list) {
  Weights w = make_weights(sh.m, sh.k);
  const int64_t max_rows = *std::max_element(rows_list.begin(), rows_list.end());
  Buffers buf(sh, max_rows);
  for (int64_t rows : rows_list) {
    const GemmArgs base{.x = static_cast<const __nv_bfloat16*>(buf.x), .out = buf.out, .rows = rows, .k = sh.k,
                        .m = sh.m};
    const double io = double(rows * sh.k) * 2 + double(rows * sh.m) * 2;
    auto g16 = [&](int i) {
      GemmArgs g = base;
      g.w = static_cast<const __nv_bfloat16*>(w.bf16[size_t(i) % w.bf16.size()]);
      return g;
    };
    b.report(sh, rows, "bf16 cublas", double(w.bytes_bf16) + io, [&](int i) { launch_gemm(b.blas, g16(i), b.s); });
    if (gemv_supported(g16(0)))
      b.report(sh, rows, "bf16 gemv", double(w.bytes_bf16) + io, [&](int i) { launch_gemv(g16(i), b.s); });
    const struct {
      const char* name;
      const std::vector<QuantWeightArgs>& wq;
      size_t bytes;
    } formats[] = {{"w8", w.w8, w.bytes_w8}, {"w4", w.w4, w.bytes_w4}, {"fp8", w.fp8, w.bytes_fp8}};
    for (const auto& f : formats) {
      const std::string n = f.name;
      const double bytes = double(f.bytes) + io;
      auto gq = [&](int i) {
        GemmArgs g = base;
        g.wq = f.wq[size_t(i) % f.wq.size()];
        return g;
      };
      if (gemv_supported(gq(0))) {
        b.report(sh, rows, n + " gemv", bytes, [&](int i) { launch_gemv(gq(i), b.s); });
        b.report(sh, rows, n + " simt", bytes, [&](int i) { launch_gemv_simt(gq(i), b.s); });
      }
      for (const Half2Options& o : kHalf2AllOptions)
        if (gemv_half2_supported(gq(0), {}, o))
          b.report(sh, rows,
                   n + (o.imma          ? std::string(" imma")
                        : o.stages > 0  ? " ring" + std::to_string(o.stages) +
                                            (o.split > 1 ? "x" + std::to_string(o.split) : "") +
                                            (o.blocks_per_sm ? " b" + std::to_string(o.blocks_per_sm) : "")
                        : o.split > 0 ? " split" + std::to_string(o.split)
                                      : " half2" + std::string(o.features_per_warp == 2 ? "x2" : "") +
                                            (o.persistent ? " p" : "")),
                   bytes,
                   [&](int i) { launch_gemv_half2(gq(i), b.s, {}, o); });
      const QuantMmaOptions ws{.workspace = b.mma_ws, .workspace_bytes = b.mma_ws_bytes};
      if (quant_mma_supported(gq(0))) {
        b.report(sh, rows, n + " mma", bytes, [&](int i) { launch_quant_mma(gq(i), b.s, {}, ws); });
        for (QuantMmaTile t : kQuantMmaTiles) {
          if (!quant_mma_supported(gq(0), {}, t)) continue;
          QuantMmaOptions o = ws;
          o.tile = t;
          b.report(sh, rows, n + " mma " + quant_mma_tile_name(t), bytes,
                   [&](int i) { launch_quant_mma(gq(i), b.s, {}, o); });
        }
      }
      if (f.wq[0].dtype == DType::FP8)
        for (bool fast : {false, true}) report_w8a8(b, sh, rows, w, buf, Fp8Scaling::Auto, fast);
      b.report(sh, rows, n + " dequant+cublas", bytes, [&](int i) {
        launch_dequantize(f.wq[size_t(i) % f.wq.size()], sh.m, sh.k, static_cast<__nv_bfloat16*>(buf.w16), b.s);
        GemmArgs p = base;
        p.w = static_cast<const __nv_bfloat16*>(buf.w16);
        launch_gemm(b.blas, p, b.s);
      });
      if (rows == rows_list.front())  // the dequantization alone: codes read, BF16 written
        b.report(sh, rows, n + " dequant only", double(f.bytes) + double(sh.m * sh.k) * 2, [&](int i) {
          launch_dequantize(f.wq[size_t(i) % f.wq.size()], sh.m, sh.k, static_cast<__nv_bfloat16*>(buf.w16), b.s);
        });
    }
  }
  for (void* p : w.owned) cudaFree(p);
}

// The FP8 scalings cuBLASLt offers (the heuristic's status for each), and each one's time.
void run_fp8_modes(Bench& b, const Shape& sh, const std::vector<int64_t>& rows_list) {
  Weights w = make_weights(sh.m, sh.k);
  const int64_t max_rows = *std::max_element(rows_list.begin(), rows_list.end());
  Buffers buf(sh, max_rows);
  for (int64_t rows : rows_list) {
    Fp8GemmArgs a{.xq = static_cast<uint8_t*>(buf.xq), .x_scale = static_cast<float*>(buf.xs), .wq = w.fp8[0].q,
                  .w_scale = static_cast<const float*>(w.fp8[0].scales), .out = buf.out, .rows = rows, .k = sh.k,
                  .m = sh.m};
    std::printf("# fp8 scalings %s rows=%lld: %s\n", sh.name, (long long)rows, b.lt.fp8_probe(a, kWs).c_str());
    for (Fp8Scaling sc : {Fp8Scaling::OuterVectors, Fp8Scaling::AlphaVector, Fp8Scaling::Epilogue})
      for (bool fast : {false, true}) report_w8a8(b, sh, rows, w, buf, sc, fast);
  }
  for (void* p : w.owned) cudaFree(p);
}

// Prefill: BF16 cuBLAS, FP8 W8A8 and dequantize-then-cuBLAS at `rows` tokens.
void run_prefill(Bench& b, const Shape& sh, int64_t rows) {
  Weights w = make_weights(sh.m, sh.k);
  Buffers buf(sh, rows);
  const GemmArgs base{.x = static_cast<const __nv_bfloat16*>(buf.x), .out = buf.out, .rows = rows, .k = sh.k, .m = sh.m};
  const double io = double(rows * sh.k) * 2 + double(rows * sh.m) * 2;
  b.report(sh, rows, "bf16 cublas", double(w.bytes_bf16) + io, [&](int i) {
    GemmArgs g = base;
    g.w = static_cast<const __nv_bfloat16*>(w.bf16[size_t(i) % w.bf16.size()]);
    launch_gemm(b.blas, g, b.s);
  });
  for (bool fast : {false, true}) report_w8a8(b, sh, rows, w, buf, Fp8Scaling::Auto, fast);
  for (const auto& fmt : {std::tuple{"w4", &w.w4, w.bytes_w4}, std::tuple{"w8", &w.w8, w.bytes_w8}}) {
    const std::vector<QuantWeightArgs>* wq = std::get<1>(fmt);  // not a structured binding: clang 14 cannot capture one
    b.report(sh, rows, std::string(std::get<0>(fmt)) + " dequant+cublas", double(std::get<2>(fmt)) + io, [&](int i) {
      launch_dequantize((*wq)[size_t(i) % wq->size()], sh.m, sh.k, static_cast<__nv_bfloat16*>(buf.w16), b.s);
      GemmArgs p = base;
      p.w = static_cast<const __nv_bfloat16*>(buf.w16);
      launch_gemm(b.blas, p, b.s);
    });
  }
  for (void* p : w.owned) cudaFree(p);
}

// A plain cuBLASLt FP8 GEMM (unscaled, F32 out, fast accumulation) on n x n x n: the peak the
// prefill TFLOP/s are compared with.
void run_fp8_peak(Bench& b, int64_t n) {
  void* a = device_random(size_t(n * n), 0x77);
  void* x = device_random(size_t(n * n), 0x77);
  void* out = device_alloc(size_t(n * n) * 4);
  const Shape sh{"fp8 peak", n, n};
  const Fp8GemmArgs args{.xq = static_cast<uint8_t*>(x), .wq = static_cast<uint8_t*>(a), .out = out, .out_f32 = true,
                         .rows = n, .k = n, .m = n, .scaling = Fp8Scaling::Unscaled, .fast_accum = true};
  if (b.lt.fp8_available(args, kWs))
    b.report(sh, n, "fp8 gemm unscaled", 2.0 * double(n * n) + 4.0 * double(n * n),
             [&](int) { b.lt.run_fp8(args, b.ws, kWs, nullptr, b.s); });
  for (void* p : {a, x, out}) cudaFree(p);
}

int run(int argc, char** argv) {
  Bench b;
  std::vector<int64_t> rows_list = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  int64_t prefill_rows = 4096;
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) b.reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--rows") && i + 1 < argc) rows_list = parse_int_list(argv[++i], "--rows", 1);
    else if (!std::strcmp(argv[i], "--prefill-rows") && i + 1 < argc) prefill_rows = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--shapes") && i + 1 < argc) shapes = parse_shapes(argv[++i]);
    else if (!std::strcmp(argv[i], "--json")) b.json = true;
    else {
      std::printf("usage: %s [--reps N] [--rows 1,2,4,...] [--shapes q/o,k/v,gate+up,down] [--prefill-rows N (0: none)] "
                  "[--json]\n",
                  argv[0]);
      return !std::strcmp(argv[i], "--help") ? 0 : 1;
    }
  }
  TF_CUDA_CHECK(cudaStreamCreate(&b.s));
  if (cublasCreate(&b.blas) != CUBLAS_STATUS_SUCCESS) return 1;
  cublasSetStream(b.blas, b.s);
  b.ws = device_alloc(kWs);
  cublasSetWorkspace(b.blas, b.ws, kWs);
  for (const Shape& sh : shapes)
    for (int64_t rows : rows_list)
      for (DType d : {DType::W4, DType::W8})
        for (QuantMmaTile t : {QuantMmaTile::T64, QuantMmaTile::T128})
          b.mma_ws_bytes = std::max(
              b.mma_ws_bytes, quant_mma_workspace_bytes(GemmArgs{.rows = rows, .k = sh.k, .m = sh.m, .wq = {.dtype = d}}, t));
  b.mma_ws = device_alloc(std::max<size_t>(b.mma_ws_bytes, 256));
  TF_CUDA_CHECK(cudaMemset(b.mma_ws, 0, std::max<size_t>(b.mma_ws_bytes, 256)));
  b.bw = copy_bandwidth(b.s);
  std::printf("device copy bandwidth %.0f GB/s (read + write, 1 GiB)\n", b.bw);
  if (!b.json)
    std::printf("%-8s %6s %6s %5s  %-22s %10s %9s %8s\n", "shape", "m", "k", "rows", "variant", "us", "GB/s", "TFLOP/s");
  for (const Shape& sh : shapes) run_shape(b, sh, rows_list);
  for (const Shape& sh : shapes) run_fp8_modes(b, sh, {16, 64, 256});
  if (prefill_rows > 0) {
    run_fp8_peak(b, 8192);
    for (const Shape& sh : shapes) run_prefill(b, sh, prefill_rows);
  }
  cublasDestroy(b.blas);
  cudaFree(b.ws);
  cudaFree(b.mma_ws);
  cudaStreamDestroy(b.s);
  return 0;
}

}  // namespace
}  // namespace tf::cuda

int main(int argc, char** argv) {
  try {
    return tf::cuda::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_quant_gemm: %s\n", e.what());
    return 1;
  }
}

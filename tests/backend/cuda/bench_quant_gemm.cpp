// Micro-benchmark of the quantized matmul kernels, each alone, on the Llama-3-8B projection
// shapes (m x k: q/o 4096 x 4096, k/v 1024 x 4096, gate+up 28672 x 4096, down 4096 x 14336)
// at rows 1..256, so one device call measures where each kernel wins:
//   bf16 cublas | bf16 gemv                                  (the 16-bit baseline)
//   w8 gemv | w8 mma | w8 dequant+cublas                     (W8A16)
//   w4 gemv | w4 mma | w4 dequant+cublas                     (W4A16, group 128)
//   fp8 gemv | fp8 w8a8 (per-token quantization + cuBLASLt) | fp8 dequant+cublas
// Each variant: a warm-up, then the mean of --reps launches between CUDA events. Printed: us,
// GB/s (weight + scale bytes, activations in, output out, over the time) beside the device's
// copy bandwidth, and TFLOP/s (2 rows m k over the time). Weights are random codes (FP8
// without NaN), so only the time means anything. Prints nothing but numbers; asserts nothing.
//
//   build-dev/tests/backend/cuda/bench_quant_gemm [--reps 20] [--rows 1,2,4,...] [--json]
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm.cuh"
#include "backend/cuda/gemm_lt.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/quant_gemm.cuh"

namespace tf::cuda {
namespace {

struct Shape {
  const char* name;
  int64_t m, k;
};
const Shape kShapes[] = {{"q/o", 4096, 4096}, {"k/v", 1024, 4096}, {"gate+up", 28672, 4096}, {"down", 4096, 14336}};

uint64_t g_state = 0x9e3779b97f4a7c15ull;
uint64_t next_random() {
  g_state ^= g_state << 13;
  g_state ^= g_state >> 7;
  g_state ^= g_state << 17;
  return g_state;
}

void* device_random(size_t bytes, uint8_t mask = 0xff) {
  std::vector<uint8_t> h(bytes);
  for (size_t i = 0; i < bytes; ++i) h[i] = uint8_t(next_random()) & mask;
  void* d = nullptr;
  TF_CUDA_CHECK(cudaMalloc(&d, bytes));
  TF_CUDA_CHECK(cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice));
  return d;
}
template <typename T>
void* device_fill(size_t n, T v) {
  std::vector<T> h(n, v);
  void* d = nullptr;
  TF_CUDA_CHECK(cudaMalloc(&d, n * sizeof(T)));
  TF_CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// A weight of each format for one shape, on the device.
struct Weights {
  void* bf16 = nullptr;
  QuantWeightArgs w8, w4, fp8;
  size_t bytes_bf16 = 0, bytes_w8 = 0, bytes_w4 = 0, bytes_fp8 = 0;  // codes + scales + zeros
};
Weights make_weights(int64_t m, int64_t k) {
  Weights w;
  const size_t n = size_t(m * k);
  w.bf16 = device_fill<uint16_t>(n, 0x3c00);  // 0.0078: the value is irrelevant to the time
  w.bytes_bf16 = 2 * n;
  w.w8 = QuantWeightArgs{.dtype = DType::W8, .q = static_cast<uint8_t*>(device_random(n)),
                         .scales = device_fill<float>(size_t(m), 1e-3f)};
  w.bytes_w8 = n + 4 * size_t(m);
  const int32_t g = 128;
  w.w4 = QuantWeightArgs{.dtype = DType::W4, .q = static_cast<uint8_t*>(device_random(n / 2)),
                         .scales = device_fill<uint16_t>(size_t(m * (k / g)), 0x1400),
                         .zeros = static_cast<uint8_t*>(device_fill<uint8_t>(size_t(m * (k / g)), 8)), .group_size = g};
  w.bytes_w4 = n / 2 + 3 * size_t(m * (k / g));
  w.fp8 = QuantWeightArgs{.dtype = DType::FP8, .q = static_cast<uint8_t*>(device_random(n, 0x77)),
                          .scales = device_fill<float>(size_t(m), 1e-3f)};
  w.bytes_fp8 = n + 4 * size_t(m);
  return w;
}
void free_weights(Weights& w) {
  for (const void* p : {static_cast<const void*>(w.bf16), static_cast<const void*>(w.w8.q), w.w8.scales,
                        static_cast<const void*>(w.w4.q), w.w4.scales, static_cast<const void*>(w.w4.zeros),
                        static_cast<const void*>(w.fp8.q), w.fp8.scales})
    cudaFree(const_cast<void*>(p));
}

double time_us(cudaStream_t s, int reps, const std::function<void()>& launch) {
  cudaEvent_t e[2];
  for (auto& ev : e) TF_CUDA_CHECK(cudaEventCreate(&ev));
  launch();
  TF_CUDA_CHECK(cudaEventRecord(e[0], s));
  for (int i = 0; i < reps; ++i) launch();
  TF_CUDA_CHECK(cudaEventRecord(e[1], s));
  TF_CUDA_CHECK(cudaEventSynchronize(e[1]));
  float ms = 0;
  TF_CUDA_CHECK(cudaEventElapsedTime(&ms, e[0], e[1]));
  for (auto& ev : e) TF_CUDA_CHECK(cudaEventDestroy(ev));
  return 1e3 * double(ms) / reps;
}

double copy_bandwidth(cudaStream_t s) {
  const size_t bytes = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  TF_CUDA_CHECK(cudaMalloc(&a, bytes));
  TF_CUDA_CHECK(cudaMalloc(&b, bytes));
  const double us = time_us(s, 5, [&] { TF_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s)); });
  cudaFree(a);
  cudaFree(b);
  return 2.0 * double(bytes) / (us * 1e3);
}

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> v;
  for (const char* p = s; *p;) {
    v.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
    if (*p == ',') ++p;
  }
  return v;
}

int run(int argc, char** argv) {
  int reps = 20;
  bool json = false;
  std::vector<int64_t> rows_list = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--rows") && i + 1 < argc) rows_list = parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--json")) json = true;
    else {
      std::printf("usage: %s [--reps N] [--rows 1,2,4,...] [--json]\n", argv[0]);
      return !std::strcmp(argv[i], "--help") ? 0 : 1;
    }
  }
  cudaStream_t s = nullptr;
  TF_CUDA_CHECK(cudaStreamCreate(&s));
  cublasHandle_t blas = nullptr;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) return 1;
  cublasSetStream(blas, s);
  constexpr size_t kWs = 32u << 20;
  void* ws = nullptr;
  TF_CUDA_CHECK(cudaMalloc(&ws, kWs));
  cublasSetWorkspace(blas, ws, kWs);
  LtGemm lt;
  const double bw = copy_bandwidth(s);
  std::printf("device copy bandwidth %.0f GB/s (read + write, 1 GiB)\n", bw);
  if (!json)
    std::printf("%-8s %6s %6s %5s  %-20s %10s %9s %8s\n", "shape", "m", "k", "rows", "variant", "us", "GB/s", "TFLOP/s");
  const int64_t max_rows = *std::max_element(rows_list.begin(), rows_list.end());
  for (const Shape& sh : kShapes) {
    Weights w = make_weights(sh.m, sh.k);
    void* x = device_fill<uint16_t>(size_t(max_rows * sh.k), 0x3f80);  // 1.0
    void* out = nullptr;
    TF_CUDA_CHECK(cudaMalloc(&out, size_t(max_rows * sh.m) * 4));
    void* w16 = nullptr;
    TF_CUDA_CHECK(cudaMalloc(&w16, size_t(sh.m * sh.k) * 2));
    void *xq = nullptr, *xs = nullptr, *acc = nullptr;
    TF_CUDA_CHECK(cudaMalloc(&xq, size_t(max_rows * sh.k)));
    TF_CUDA_CHECK(cudaMalloc(&xs, size_t(max_rows) * 4));
    TF_CUDA_CHECK(cudaMalloc(&acc, size_t(max_rows * sh.m) * 4));
    for (int64_t rows : rows_list) {
      const GemmArgs base{.x = static_cast<const __nv_bfloat16*>(x), .out = out, .rows = rows, .k = sh.k, .m = sh.m};
      auto report = [&](const char* variant, size_t weight_bytes, const std::function<void()>& launch) {
        const double us = time_us(s, reps, launch);
        const double bytes = double(weight_bytes) + double(rows * sh.k) * 2 + double(rows * sh.m) * 2;
        const double gbs = bytes / (us * 1e3), tflops = 2.0 * double(rows * sh.m * sh.k) / (us * 1e6);
        if (json)
          std::printf("{\"shape\": \"%s\", \"m\": %lld, \"k\": %lld, \"rows\": %lld, \"variant\": \"%s\", \"us\": %.2f, "
                      "\"gb_s\": %.1f, \"tflop_s\": %.2f, \"copy_gb_s\": %.0f}\n",
                      sh.name, (long long)sh.m, (long long)sh.k, (long long)rows, variant, us, gbs, tflops, bw);
        else
          std::printf("%-8s %6lld %6lld %5lld  %-20s %10.2f %9.1f %8.2f\n", sh.name, (long long)sh.m, (long long)sh.k,
                      (long long)rows, variant, us, gbs, tflops);
        std::fflush(stdout);
      };
      GemmArgs g16 = base;
      g16.w = static_cast<const __nv_bfloat16*>(w.bf16);
      report("bf16 cublas", w.bytes_bf16, [&] { launch_gemm(blas, g16, s); });
      if (gemv_supported(g16)) report("bf16 gemv", w.bytes_bf16, [&] { launch_gemv(g16, s); });
      const struct {
        const char* name;
        const QuantWeightArgs& wq;
        size_t bytes;
      } formats[] = {{"w8", w.w8, w.bytes_w8}, {"w4", w.w4, w.bytes_w4}, {"fp8", w.fp8, w.bytes_fp8}};
      for (const auto& f : formats) {
        GemmArgs g = base;
        g.wq = f.wq;
        const std::string n = f.name;
        if (gemv_supported(g)) report((n + " gemv").c_str(), f.bytes, [&] { launch_gemv(g, s); });
        if (quant_mma_supported(g)) report((n + " mma").c_str(), f.bytes, [&] { launch_quant_mma(g, s); });
        if (f.wq.dtype == DType::FP8) {
          const Fp8GemmArgs a{.xq = static_cast<uint8_t*>(xq), .x_scale = static_cast<float*>(xs), .wq = f.wq.q,
                              .w_scale = static_cast<const float*>(f.wq.scales), .out = out, .rows = rows, .k = sh.k,
                              .m = sh.m};
          if (LtGemm::fp8_supported(a)) {
            const bool outer = lt.fp8_outer_scales(a, kWs);
            report(outer ? "fp8 w8a8 (outer)" : "fp8 w8a8 (+scale)", f.bytes, [&] {
              launch_quantize_rows_fp8(g.x, rows, sh.k, static_cast<uint8_t*>(xq), static_cast<float*>(xs), s);
              lt.run_fp8(a, ws, kWs, static_cast<float*>(acc), s);
            });
          }
        }
        report((n + " dequant+cublas").c_str(), f.bytes, [&] {
          launch_dequantize(f.wq, sh.m, sh.k, static_cast<__nv_bfloat16*>(w16), s);
          GemmArgs p = base;
          p.w = static_cast<const __nv_bfloat16*>(w16);
          launch_gemm(blas, p, s);
        });
      }
    }
    for (void* p : {x, out, w16, xq, xs, acc}) cudaFree(p);
    free_weights(w);
  }
  cublasDestroy(blas);
  cudaFree(ws);
  cudaStreamDestroy(s);
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

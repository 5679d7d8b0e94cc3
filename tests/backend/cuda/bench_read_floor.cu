// The read floor of a decode step's weights: how long a kernel that only reads (no arithmetic,
// perfectly coalesced 16-byte loads, the best of a few grid shapes) takes over the regions the
// batch-1 GEMVs of a Llama-3-8B-shaped step read, so a GEMV's time can be set beside the time
// its bytes need on this GPU, and the cost of one kernel per projection beside one stream:
//   one launch   every layer's regions read by a single kernel (the floor of a fused step)
//   a kernel     each projection's region alone, 32 launches back to back in a CUDA graph
//                (different layers, so nothing is in L2), time a launch
//   step         the 4 x 32 launches in layer order in one graph (one kernel per projection)
// Regions: q|k|v (6144 x 4096), o (4096 x 4096), gate|up (28672 x 4096), down (4096 x 14336)
// with the bytes of --format: int4 (g128: codes, F16 scales, U8 zero points), int8 (codes, F32
// row scales), bf16. Loads are ld.global.nc.L1::no_allocate.v4 as the GEMVs' streams.
// Prints numbers, asserts nothing.
//
//   build-cuda/tests/backend/cuda/bench_read_floor [--format int4|int8|bf16] [--layers 32]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "graph_timing.h"

namespace tf {
namespace {


using cuda::load_stream;  // the GEMVs' streaming load (ld.global.nc.L1::no_allocate.v4)

// Grid-stride read of n words, U loads in flight a thread; the XOR keeps the loads alive.
template <int U>
__global__ void read_kernel(const uint4* __restrict__ p, size_t n, unsigned* sink) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + (U - 1) * stride < n; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = load_stream(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = load_stream(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

struct Shape {
  int threads, blocks_per_sm, unroll;
};
struct Region {
  const uint4* p;
  size_t words;
};

void launch(const Shape& s, int sms, const Region& r, unsigned* sink, cudaStream_t st) {
  const unsigned grid = unsigned(sms * s.blocks_per_sm);
  if (s.unroll == 2)
    read_kernel<2><<<grid, s.threads, 0, st>>>(r.p, r.words, sink);
  else
    read_kernel<4><<<grid, s.threads, 0, st>>>(r.p, r.words, sink);
}

// us per replay of a graph of the launches (a warm-up replay first).
double time_graph(const std::vector<Region>& regions, const Shape& s, int sms, unsigned* sink, int reps) {
  return graph_replay_us(
      [&](cudaStream_t st) {
        for (const Region& r : regions) launch(s, sms, r, sink, st);
      },
      reps);
}

size_t region_bytes(const std::string& format, size_t m, size_t k) {
  if (format == "int4") return m * k / 2 + m * (k / 128) * 3;
  if (format == "int8") return m * k + m * 4;
  return m * k * 2;
}

}  // namespace

int run(int argc, char** argv) {
  std::string format = "int4";
  int layers = 32;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--format" && i + 1 < argc) {
      format = argv[++i];
    } else if (a == "--layers" && i + 1 < argc) {
      layers = std::atoi(argv[++i]);
    } else {
      std::printf("usage: %s [--format int4|int8|bf16] [--layers N]\n", argv[0]);
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if ((format != "int4" && format != "int8" && format != "bf16") || layers < 1) {
    std::fprintf(stderr, "bench_read_floor: --format must be int4, int8 or bf16 and --layers at least 1\n");
    return 2;
  }
  int sms = 0;
  TF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  TF_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const char* names[4] = {"q|k|v", "o", "gate|up", "down"};
  const size_t mk[4][2] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
  size_t bytes[4], total = 0;
  for (int j = 0; j < 4; ++j) {
    bytes[j] = (region_bytes(format, mk[j][0], mk[j][1]) + 255) / 256 * 256;
    total += bytes[j] * size_t(layers);
  }
  std::printf("%s, %d SMs, L2 %d MB; %s regions of %d layers: %.1f MB\n", prop.name, sms, prop.l2CacheSize >> 20,
              format.c_str(), layers, double(total) / 1e6);
  char* buf = nullptr;
  unsigned* sink = nullptr;
  TF_CUDA_CHECK(cudaMalloc(&buf, total));
  TF_CUDA_CHECK(cudaMemset(buf, 1, total));
  TF_CUDA_CHECK(cudaMalloc(&sink, sizeof(unsigned)));
  std::vector<Region> step, per[4];
  size_t off = 0;
  for (int l = 0; l < layers; ++l)
    for (int j = 0; j < 4; ++j) {
      const Region r{reinterpret_cast<const uint4*>(buf + off), bytes[j] / 16};
      step.push_back(r);
      per[j].push_back(r);
      off += bytes[j];
    }
  const std::vector<Region> all{{reinterpret_cast<const uint4*>(buf), total / 16}};
  double best_all = 1e30, best_step = 1e30, best_one[4] = {1e30, 1e30, 1e30, 1e30};
  std::printf("%-22s %12s %10s %10s %10s %10s %12s\n", "grid (threads x blocks/SM, loads)", "one launch", names[0],
              names[1], names[2], names[3], "step");
  for (int threads : {256, 512, 1024})
    for (int bps : {1, 2, 4})
      for (int unroll : {2, 4}) {
        if (threads * bps > 2048) continue;
        const Shape s{threads, bps, unroll};
        const double t_all = time_graph(all, s, sms, sink, 5);
        double t_one[4];
        for (int j = 0; j < 4; ++j) t_one[j] = time_graph(per[j], s, sms, sink, 5) / layers;
        const double t_step = time_graph(step, s, sms, sink, 5);
        std::printf("%4d x %d, %d%13s %9.1f us %7.2f us %7.2f us %7.2f us %7.2f us %9.1f us\n", threads, bps, unroll, "",
                    t_all, t_one[0], t_one[1], t_one[2], t_one[3], t_step);
        best_all = std::min(best_all, t_all);
        best_step = std::min(best_step, t_step);
        for (int j = 0; j < 4; ++j) best_one[j] = std::min(best_one[j], t_one[j]);
      }
  std::printf("best one launch: %.1f us (%.0f GB/s)\n", best_all, double(total) / best_all / 1e3);
  for (int j = 0; j < 4; ++j)
    std::printf("best %-8s %7.2f us a kernel (%.1f MB, %.0f GB/s)\n", names[j], best_one[j], double(bytes[j]) / 1e6,
                double(bytes[j]) / best_one[j] / 1e3);
  std::printf("best step: %.1f us (%.0f GB/s), %.2f us a layer; one launch saves %.1f us a step\n", best_step,
              double(total) / best_step / 1e3, best_step / layers, best_step - best_all);
  TF_CUDA_CHECK(cudaFree(buf));
  TF_CUDA_CHECK(cudaFree(sink));
  return 0;
}

}  // namespace tf

int main(int argc, char** argv) {
  try {
    return tf::run(argc, argv);
  } catch (const std::exception& e) {  // a CUDA failure (TF_CUDA_CHECK), naming the call
    std::fprintf(stderr, "bench_read_floor: %s\n", e.what());
    return 1;
  }
}

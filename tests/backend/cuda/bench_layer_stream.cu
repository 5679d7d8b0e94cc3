// What the dependencies between the projections of a batch-1 W4 decode step cost, and whether
// one persistent kernel with grid-wide barriers, or rows handed out at run time, wins any of it
// back (docs/PERF.md, 2026-12-06). The 4 projections of each of --layers Llama-3-8B-shaped
// layers (q|k|v 6144 x 4096, o 4096 x 4096, gate|up 28672 x 4096, down 4096 x 14336; W4 g128
// with F16 scales and U8 zero points, the engine's layout) run as a chain: each projection's
// input is the previous one's output (its first k values), RMS-normalized, as the step's data
// flow is (attention, RoPE, the residual and SwiGLU left out: they read almost nothing). The
// kernels (layer_stream_kernels.cuh) share the engine's shared-memory ring GEMV. Modes:
//   launches             one kernel per projection, 4 x layers launches in a CUDA graph
//   launches-pdl         the same with programmatic dependent launch (each kernel issues its
//                        first rows before it waits for the previous one)
//   persistent           one kernel for the whole chain; a grid-wide barrier between projections
//   persistent-prefetch  the same, with each warp's first rows of the next projection issued
//                        into its ring before the barrier (weights do not depend on the chain)
//   persistent-ring      the same with one ring a warp across projections, kept full through
//                        the barriers (ring_kernel)
//   ...-dyn S            launches-pdl, persistent and persistent-prefetch (and no-chain) with a
//                        share S of the rows fixed per group and the rest handed out at run time
//                        in units of 8 (--shares, default 0)
//   no-chain             one kernel, every projection reads a fixed input, no barrier: the same
//                        arithmetic with no dependency at all
// Kernel shapes (--config; all by default): 0 rings of 8 rows a warp, 2 chunks a lane for down
// (7 warps a group), 1 chunk for the others; 1 rings of 8, 1 chunk a lane everywhere (14 warps
// a group for down); 2 rings of 16, 1 chunk; 3 and 4 as 1, but persistent-ring's ring holds 24
// or 16 rows and is filled before each barrier (8 in flight otherwise); 5 as 1 with the chain
// kernel held to 64 registers (it spills), so that a block of the next launch fits beside one
// of this (PDL can then start it early). Grid: one 512-thread block an SM (every block
// resident, which the barrier needs). bench_layer_stream_w8 is the same with 256-thread blocks:
// config 0 has rings of 8 rows (2 chunks a lane for down) and two blocks fit an SM, so under PDL
// the next launch's blocks start beside this one's and issue their first rows while it runs;
// config 1 pads 0's shared memory so that one block fits (the control). --check compares every
// projection's output with a host reference computed from the input the GPU read (exits 1
// beyond 2% of the projection's largest output); --trace prints where each mode's time goes,
// from per-block timestamps (print_trace). Prints times, asserts nothing about them.
//
//   build-cuda/tests/backend/cuda/bench_layer_stream [--layers 32] [--reps 20] [--check] [--trace]
//       [--config 0..5] [--shares 0,0.5,...]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "core/dtype.h"
#include "quant/quantized_weight.h"
#include "graph_timing.h"
#include "layer_stream_kernels.cuh"

namespace tf {
namespace {

using namespace layer_stream;

struct Mode {
  const char* name;
  bool launches, pdl;
  unsigned flags;
  bool chain, ring;  // ring: ring_kernel
};

using Kernel = void (*)(const Proj*, int, int, unsigned*, unsigned);

// A kernel shape: rows in a warp's ring, the most chunks a lane, the down projection's.
struct Config {
  const char* name;
  Kernel kernel, ring;
  int stages, max_c, down_c;
  size_t min_smem = 0;  // padding: more shared memory than the ring needs keeps a second block off an SM
  size_t smem() const {
    return std::max(min_smem, kSumFloats * sizeof(float) +
                                  size_t(kWarps) * stages * (max_c == 1 ? kStageBytes<1> : kStageBytes<2>));
  }
};

double time_mode(const Mode& md, Kernel kernel, const Proj* d_projs, int n_projs, unsigned* bar, size_t smem, int sms,
                 int reps) {
  return graph_replay_us(
      [&](cudaStream_t st) {
        if (md.launches) {
          for (int i = 0; i < n_projs; ++i)
            cuda::launch_with(md.pdl, dim3(1, 1, 1), kernel, dim3(sms), dim3(kWarps * 32), smem, st, d_projs, i, 1, bar,
                              md.flags);
        } else {
          cuda::launch_with(false, dim3(1, 1, 1), kernel, dim3(sms), dim3(kWarps * 32), smem, st, d_projs, 0, n_projs,
                            bar, md.flags);
        }
      },
      reps, 2);
}

// Every projection's output against the host's product of its weights with the input the GPU
// read (normalized in float): the largest error over the projection's largest output.
double check_chain(const std::vector<Proj>& projs) {
  double worst = 0.0;
  for (const Proj& p : projs) {
    QuantizedWeight w = QuantizedWeight::zeros_like(DType::W4, p.m, p.k, 128);
    std::vector<uint16_t> x(p.k), y(p.m);
    TF_CUDA_CHECK(cudaMemcpy(w.data.data(), p.q, w.data.size(), cudaMemcpyDeviceToHost));
    TF_CUDA_CHECK(cudaMemcpy(w.scales.data(), p.s, w.scales.size(), cudaMemcpyDeviceToHost));
    TF_CUDA_CHECK(cudaMemcpy(w.zeros.data(), p.z, w.zeros.size(), cudaMemcpyDeviceToHost));
    TF_CUDA_CHECK(cudaMemcpy(x.data(), p.x, size_t(p.k) * 2, cudaMemcpyDeviceToHost));
    TF_CUDA_CHECK(cudaMemcpy(y.data(), p.y, size_t(p.m) * 2, cudaMemcpyDeviceToHost));
    std::vector<double> xn(p.k);
    double ss = 0.0;
    for (int j = 0; j < p.k; ++j) ss += double(bf16_to_f32(x[j])) * bf16_to_f32(x[j]);
    const double inv = 1.0 / std::sqrt(ss / p.k + 1e-6);
    for (int j = 0; j < p.k; ++j) xn[j] = bf16_to_f32(x[j]) * inv;
    const TensorView wv = w.view();
    std::vector<float> row(p.k);
    double max_ref = 0.0, max_err = 0.0;
    for (int r = 0; r < p.m; ++r) {
      dequantize_row(wv, r, row.data());
      double acc = 0.0;
      for (int j = 0; j < p.k; ++j) acc += double(row[j]) * xn[j];
      max_ref = std::max(max_ref, std::fabs(acc));
      max_err = std::max(max_err, std::fabs(acc - double(bf16_to_f32(y[r]))));
    }
    worst = std::max(worst, max_err / std::max(max_ref, 1e-30));
  }
  return worst;
}

// --trace: where a replay's time goes, from the stamps of every block (microseconds, the
// mean over layers for each projection): rows = a block's rows (start to done), skew = the
// last block's rows done minus the first's, gap = the previous projection's last output
// written to this projection's first block starting.
void print_trace(const char* mode, const std::vector<unsigned long long>& t, int n_projs, int blocks) {
  const char* names[4] = {"q|k|v", "o", "gate|up", "down"};
  double rows[4] = {}, skew[4] = {}, gap[4] = {};
  int n[4] = {};
  auto at = [&](int i, int b, int k) { return double(t[(size_t(i) * blocks + b) * 4 + k]); };
  double t_first = 1e300, t_last = 0, gaps = 0, skews = 0;
  for (int i = 0; i < n_projs; ++i) {
    double r = 0, d_min = 1e300, d_max = 0, s_min = 1e300;
    for (int b = 0; b < blocks; ++b) {
      r += at(i, b, 1) - at(i, b, 0);
      d_min = std::min(d_min, at(i, b, 1));
      d_max = std::max(d_max, at(i, b, 1));
      s_min = std::min(s_min, at(i, b, 0));
      t_first = std::min(t_first, at(i, b, 0));
      t_last = std::max(t_last, at(i, b, 2));
    }
    const int j = i % 4;
    rows[j] += r / blocks / 1e3;
    skew[j] += (d_max - d_min) / 1e3;
    skews += (d_max - d_min) / 1e3;
    if (i > 0) {
      double w_max = 0;
      for (int b = 0; b < blocks; ++b) w_max = std::max(w_max, at(i - 1, b, 2));
      gap[j] += (s_min - w_max) / 1e3;
      gaps += (s_min - w_max) / 1e3;
    }
    ++n[j];
  }
  std::printf("trace %-28s first start to last output %.1f us; gaps %.1f us, skews %.1f us in all\n", mode,
              (t_last - t_first) / 1e3, gaps, skews);
  for (int j = 0; j < 4; ++j)
    std::printf("      %-8s rows %6.2f us a block, skew %5.2f us, gap before %5.2f us\n", names[j], rows[j] / n[j],
                skew[j] / n[j], gap[j] / n[j]);
  // Is a slow block a slow SM? Per SM, the mean and spread over layers of its rows' time, for
  // each projection; the spread of the SMs' means against the mean spread within an SM.
  for (int j = 0; j < 4; ++j) {
    std::vector<double> sum(1024, 0.0), sq(1024, 0.0);
    std::vector<int> cnt(1024, 0);
    double within = 0, dur_spread = 0;
    int n_p = 0;
    for (int i = j; i < n_projs; i += 4, ++n_p) {
      double lo = 1e300, hi = 0;
      for (int b = 0; b < blocks; ++b) {
        const double d = (at(i, b, 1) - at(i, b, 0)) / 1e3;
        const int sm = int(at(i, b, 3)) & 1023;
        sum[sm] += d;
        sq[sm] += d * d;
        ++cnt[sm];
        lo = std::min(lo, d);
        hi = std::max(hi, d);
      }
      dur_spread += hi - lo;
    }
    std::vector<double> means;
    for (int sm = 0; sm < 1024; ++sm)
      if (cnt[sm] > 1) {
        const double m = sum[sm] / cnt[sm];
        means.push_back(m);
        within += std::sqrt(std::max(0.0, sq[sm] / cnt[sm] - m * m));
      }
    if (means.empty()) continue;
    std::sort(means.begin(), means.end());
    const size_t q = means.size();
    std::printf("      %-8s per-SM mean rows time: min %.2f p10 %.2f median %.2f p90 %.2f max %.2f us; spread within an "
                "SM %.2f us; fastest to slowest block %.2f us\n",
                names[j], means[0], means[q / 10], means[q / 2], means[q * 9 / 10], means[q - 1], within / double(q),
                dur_spread / std::max(n_p, 1));
  }
}

}  // namespace

int run(int argc, char** argv) {
  int layers = 32, reps = 20, only = -1;
  std::vector<float> shares{0.0f};
  bool check = false, trace = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--layers" && i + 1 < argc) {
      layers = std::atoi(argv[++i]);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--check") {
      check = true;
    } else if (a == "--config" && i + 1 < argc) {
      only = std::atoi(argv[++i]);
    } else if (a == "--shares" && i + 1 < argc) {
      shares.clear();
      for (const char* c = argv[++i]; *c;) {
        char* e = nullptr;
        shares.push_back(std::strtof(c, &e));
        c = *e == ',' ? e + 1 : e;
        if (e == c && *c) break;
      }
    } else if (a == "--trace") {
      trace = true;
    } else {
      std::printf("usage: %s [--layers N] [--reps N] [--check] [--trace] [--config 0..5] [--shares 0,0.75,...]\n", argv[0]);
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (layers < 1 || reps < 1) {
    std::fprintf(stderr, "bench_layer_stream: --layers and --reps must be at least 1\n");
    return 2;
  }
  int sms = 0;
  TF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  TF_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int shapes[4][3] = {{6144, 4096, 1}, {4096, 4096, 1}, {28672, 4096, 1}, {4096, 14336, 2}};
  for (const auto& sh : shapes) {  // every group's rows must fit its sums
    const int per_block = (sh[0] + sms - 1) / sms, groups = kWarps / (sh[1] / (1024 * sh[2]));
    if ((per_block + groups - 1) / groups > kSumRows) {
      std::fprintf(stderr, "bench_layer_stream: %d SMs leave more than %d rows a group\n", sms, kSumRows);
      return 2;
    }
  }
  size_t bytes = 0;
  std::vector<Proj> projs, fixed;
  std::vector<void*> allocs;
  auto alloc = [&](size_t n) {
    void* p = nullptr;
    TF_CUDA_CHECK(cudaMalloc(&p, n));
    allocs.push_back(p);
    return p;
  };
  auto* x0 = static_cast<bf16*>(alloc(28672 * 2));
  auto* xf = static_cast<bf16*>(alloc(28672 * 2));  // no-chain's fixed input
  {
    std::vector<uint16_t> h(28672);
    for (size_t i = 0; i < h.size(); ++i) {
      h[i] = f32_to_bf16(std::sin(0.37f * float(i)) + 0.25f * std::cos(1.3f * float(i)));
    }
    TF_CUDA_CHECK(cudaMemcpy(x0, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    TF_CUDA_CHECK(cudaMemcpy(xf, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  }
  const bf16* prev = x0;
  unsigned seed = 1;
  for (int l = 0; l < layers; ++l)
    for (const auto& sh : shapes) {
      Proj p{};
      p.m = sh[0];
      p.k = sh[1];
      p.c = sh[2];
      const size_t nq = size_t(p.m) * p.k / 2, ng = size_t(p.m) * (p.k / 128);
      p.q = static_cast<unsigned char*>(alloc(nq));
      p.s = static_cast<__half*>(alloc(ng * 2));
      p.z = static_cast<uint8_t*>(alloc(ng));
      fill_kernel<<<1024, 256>>>(const_cast<unsigned char*>(p.q), nq, const_cast<__half*>(p.s),
                                 const_cast<uint8_t*>(p.z), ng, seed++ * 0x9e3779b9u);
      TF_CUDA_CHECK(cudaGetLastError());
      p.x = prev;
      p.y = static_cast<bf16*>(alloc(size_t(p.m) * 2));
      prev = p.y;
      bytes += nq + ng * 3;
      projs.push_back(p);
      p.x = xf;
      fixed.push_back(p);
    }
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  auto* d_chain = static_cast<Proj*>(alloc(projs.size() * sizeof(Proj)));
  auto* d_fixed = static_cast<Proj*>(alloc(fixed.size() * sizeof(Proj)));
  auto* bar = static_cast<unsigned*>(alloc((2 + projs.size()) * sizeof(unsigned)));  // barrier, done, a counter each
  TF_CUDA_CHECK(cudaMemset(bar, 0, (2 + projs.size()) * sizeof(unsigned)));
  std::printf("%s, %d SMs; %d layers of W4 g128 projections: %.1f MB\n", prop.name, sms, layers, double(bytes) / 1e6);
#if TF_LS_WARPS == 8
  // 8 warps a block: down takes 2 chunks a lane (a 14-warp group does not fit).
  const Config configs[] = {
      {"8 warps, ring 8, down 2 chunks a lane, 2 blocks fit an SM", chain_kernel<8, 2, 2>, ring_kernel<8, 2, 8>, 8, 2,
       2},
      {"8 warps, ring 8, down 2 chunks a lane, one block an SM (shared memory padded)", chain_kernel<8, 2, 2>,
       ring_kernel<8, 2, 8>, 8, 2, 2, 120 * 1024}};
#else
  const Config configs[] = {
      {"ring 8, down 2 chunks a lane", chain_kernel<8, 2>, ring_kernel<8, 2, 8>, 8, 2, 2},
      {"ring 8, 1 chunk a lane", chain_kernel<8, 1>, ring_kernel<8, 1, 8>, 8, 1, 1},
      {"ring 16, 1 chunk a lane", chain_kernel<16, 1>, ring_kernel<16, 1, 16>, 16, 1, 1},
      {"ring 8 (persistent-ring: 24), 1 chunk a lane", chain_kernel<8, 1>, ring_kernel<8, 1, 24>, 24, 1, 1},
      {"ring 8 (persistent-ring: 16), 1 chunk a lane", chain_kernel<8, 1>, ring_kernel<8, 1, 16>, 16, 1, 1},
      {"ring 8, 1 chunk a lane, 64 registers (2 blocks fit an SM)", chain_kernel<8, 1, 2>, ring_kernel<8, 1, 8>, 8, 1,
       1}};
#endif
  const Mode modes[] = {{"launches", true, false, 0, true, false},
                        {"launches-pdl", true, true, 0, true, false},
                        {"persistent", false, false, kBarrier, true, false},
                        {"persistent-prefetch", false, false, kBarrier | kPrefetch, true, false},
                        {"persistent-ring", false, false, 0, true, true},
                        {"launches-pdl-dyn", true, true, kDynamic, true, false},
                        {"persistent-dyn", false, false, kBarrier | kDynamic, true, false},
                        {"persistent-prefetch-dyn", false, false, kBarrier | kPrefetch | kDynamic, true, false},
                        {"no-chain-dyn", false, false, kDynamic, false, false},
                        {"no-chain", false, false, 0, false, false}};
  int status = 0;
  for (int ci = 0; ci < int(std::size(configs)); ++ci) {
    if (only >= 0 && ci != only) continue;
    const Config& cf = configs[ci];
    for (std::vector<Proj>* v : {&projs, &fixed})
      for (Proj& p : *v)
        if (p.k == 14336) p.c = cf.down_c;
    TF_CUDA_CHECK(cudaMemcpy(d_chain, projs.data(), projs.size() * sizeof(Proj), cudaMemcpyHostToDevice));
    TF_CUDA_CHECK(cudaMemcpy(d_fixed, fixed.data(), fixed.size() * sizeof(Proj), cudaMemcpyHostToDevice));
    const size_t smem = cf.smem();
    for (Kernel k : {cf.kernel, cf.ring})
      TF_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    int per_sm = 0;
    TF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, cf.kernel, kWarps * 32, smem));
    if (per_sm < 1) {
      std::fprintf(stderr, "bench_layer_stream: %s does not fit an SM (%zu bytes of shared memory)\n", cf.name, smem);
      return 1;
    }
    std::printf("== %s: %zu KB of shared memory a block, %d blocks fit an SM\n", cf.name, smem / 1024, per_sm);
    // Every mode, the kDynamic ones once for each share of fixed rows.
    auto each = [&](auto&& fn) {
      for (const Mode& md : modes)
        for (const float share : (md.flags & kDynamic) ? shares : std::vector<float>{0.0f}) {
          TF_CUDA_CHECK(cudaMemcpyToSymbol(g_share, &share, sizeof(share)));
          char name[64];
          if (md.flags & kDynamic)
            std::snprintf(name, sizeof(name), "%s %.2f", md.name, double(share));
          else
            std::snprintf(name, sizeof(name), "%s", md.name);
          fn(md, name);
        }
    };
    const int n = int(projs.size());
    for (int round = 0; round < 2; ++round)
      each([&](const Mode& md, const char* name) {
        const double us = time_mode(md, md.ring ? cf.ring : cf.kernel, md.chain ? d_chain : d_fixed, n, bar, smem, sms,
                                    reps);
        std::printf("round %d  %-28s %9.1f us a step  %7.0f GB/s  %6.2f us a layer\n", round + 1, name, us,
                    double(bytes) / us / 1e3, us / layers);
        if (check && round == 0 && md.chain) {
          const double err = check_chain(projs);
          std::printf("         check: largest error %.2e of the largest output\n", err);
          if (!(err < 2e-2)) status = 1;
          for (const Proj& p : projs) TF_CUDA_CHECK(cudaMemset(p.y, 0, size_t(p.m) * 2));
        }
      });
    if (trace) {
      const size_t n_stamps = projs.size() * size_t(sms) * 4;
      auto* d_trace = static_cast<unsigned long long*>(alloc(n_stamps * sizeof(unsigned long long)));
      std::vector<unsigned long long> h(n_stamps);
      each([&](const Mode& md, const char* name) {
        TF_CUDA_CHECK(cudaMemcpyToSymbol(g_trace, &d_trace, sizeof(d_trace)));
        time_mode(md, md.ring ? cf.ring : cf.kernel, md.chain ? d_chain : d_fixed, n, bar, smem, sms, 1);
        unsigned long long* none = nullptr;
        TF_CUDA_CHECK(cudaMemcpyToSymbol(g_trace, &none, sizeof(none)));
        TF_CUDA_CHECK(cudaMemcpy(h.data(), d_trace, n_stamps * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
        print_trace(name, h, n, sms);
      });
    }
  }
  for (void* p : allocs) TF_CUDA_CHECK(cudaFree(p));
  return status;
}

}  // namespace tf

int main(int argc, char** argv) {
  try {
    return tf::run(argc, argv);
  } catch (const std::exception& e) {  // a CUDA failure (TF_CUDA_CHECK), naming the call
    std::fprintf(stderr, "bench_layer_stream: %s\n", e.what());
    return 1;
  }
}

// Matmul throughput of the CPU backend on a model's shapes, for every weight format its
// kernels take (F32/BF16/F16 and the quantized W8, W4, Q8_0, Q4_0, Q4_K), without loading
// a model: one token's matmuls through every layer and the LM head, with random weights in
// the format (weights of all layers allocated, so decode streams them from memory as a
// model's forward does). Not a test: it prints numbers and asserts nothing.
//
//   n = 1   (decode): tokens/s = 1 / time, achieved weight GB/s, and its share of the copy
//           bandwidth (the batch-1 roofline: weight bytes / copy bandwidth per token);
//   n > 1   (prefill): n tokens through every layer's matmuls, the LM head on one row (as
//           prefill computes logits of the last token only); tokens/s and GFLOP/s.
// Each figure is the best of --reps runs (wall time), which on a machine shared with other
// work is the one closest to the machine's capability; the median is printed beside it,
// and "cpu tok/s" counts the process's CPU time instead of wall time (the run's tokens per
// CPU-second times the thread count: what the threads achieve while they are scheduled).
// A matrix whose k the format's blocks do not divide (Q4_K's 256 in tiny-main's d_ff of
// 576) is kept in BF16 and its bytes counted as such, as llama.cpp's quantizer falls back.
//
// usage: bench_cpu_matmul [--shape tiny|1b|D,FF,H,KVH,HD,V,L] [--dtypes bf16,f16,...]
//                         [--tokens 1,64] [-t THREADS] [--reps N] [--no-membw]
// TF_CPU_ISA picks the kernels' ISA level as for twofold.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/isa.h"
#include "bench/membw.h"
#include "core/host_threads.h"

namespace tf {
namespace {

struct Shape {
  int64_t d_model, d_ff, n_heads, n_kv_heads, head_dim, n_vocab, n_layers;
};

// One weight matrix [m, k] in a format, with its scale/zero arrays.
struct Weight {
  std::vector<uint8_t> data, scales, zeros;
  TensorView view;
};

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

uint64_t g_rng = 0x9e3779b97f4a7c15ull;
uint64_t next_u64() {  // xorshift64*: fast enough to fill gigabytes
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 0x2545f4914f6cdd1dull;
}
void fill_random(std::vector<uint8_t>& v) {
  size_t i = 0;
  for (; i + 8 <= v.size(); i += 8) {
    const uint64_t r = next_u64();
    std::memcpy(v.data() + i, &r, 8);
  }
  for (; i < v.size(); ++i) v[i] = uint8_t(next_u64());
}
// A small positive F16 at p (scales of random weights: finite, no denormals).
void put_scale(uint8_t* p) {
  const uint16_t h = f32_to_f16(0.001f + 0.01f * float(next_u64() % 1000) / 1000.0f);
  std::memcpy(p, &h, 2);
}

Weight make_weight(DType dtype, int64_t m, int64_t k) {
  if (k % dtype_block_elems(dtype) != 0 || (dtype == DType::W4 && k % 32 != 0)) dtype = DType::BF16;
  Weight w;
  w.data.resize(dtype_row_bytes(dtype, k) * size_t(m));
  fill_random(w.data);
  w.view = make_view(w.data.data(), dtype, {m, k});
  switch (dtype) {
    case DType::F32:
    case DType::BF16:
    case DType::F16: {  // random values of a sane size (no NaN, inf or denormal)
      for (int64_t i = 0; i < m * k; ++i)
        store_f32(w.data.data(), dtype, i, float(int64_t(next_u64() % 2001) - 1000) * 1e-4f);
      break;
    }
    case DType::W8: {
      for (auto& b : w.data)
        if (b == 0x80) b = 0x81;  // -128 is not a W8 value
      w.scales.resize(size_t(m) * 4);
      for (int64_t i = 0; i < m; ++i) {
        const float s = 0.01f;
        std::memcpy(w.scales.data() + 4 * i, &s, 4);
      }
      break;
    }
    case DType::W4: {
      const int32_t kGroup = k % 128 == 0 ? 128 : k % 64 == 0 ? 64 : 32;  // 128 where it divides k
      w.view.group_size = kGroup;
      w.scales.resize(size_t(m * (k / kGroup)) * 2);
      w.zeros.resize(size_t(m * (k / kGroup)));
      for (size_t g = 0; g < w.zeros.size(); ++g) {
        put_scale(w.scales.data() + 2 * g);
        w.zeros[g] = 8;
      }
      break;
    }
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_K: {  // the block scales (and Q4_K's dmin) at the start of each block
      const int64_t elems = dtype_block_elems(dtype), bytes = int64_t(dtype_row_bytes(dtype, elems));
      for (int64_t b = 0; b < m * (k / elems); ++b) {
        put_scale(w.data.data() + b * bytes);
        if (dtype == DType::Q4_K) put_scale(w.data.data() + b * bytes + 2);
      }
      break;
    }
    default: std::fprintf(stderr, "no random weights for %s\n", std::string(dtype_name(dtype)).c_str()); std::exit(1);
  }
  w.view.scales = w.scales.empty() ? nullptr : w.scales.data();
  w.view.zeros = w.zeros.empty() ? nullptr : w.zeros.data();
  return w;
}

struct Model {
  std::vector<Weight> layers;  // per layer: qkv, o, gate_up, down
  Weight head;
  int64_t bytes = 0;
  double flops_per_token = 0;  // 2 per weight of the layers (prefill; the head on one row)
};

Model make_model(const Shape& s, DType dtype) {
  Model m;
  const int64_t q = s.n_heads * s.head_dim, kv = s.n_kv_heads * s.head_dim;
  for (int64_t il = 0; il < s.n_layers; ++il) {
    m.layers.push_back(make_weight(dtype, q + 2 * kv, s.d_model));
    m.layers.push_back(make_weight(dtype, s.d_model, q));
    m.layers.push_back(make_weight(dtype, 2 * s.d_ff, s.d_model));
    m.layers.push_back(make_weight(dtype, s.d_model, s.d_ff));
  }
  m.head = make_weight(dtype, s.n_vocab, s.d_model);
  for (const Weight& w : m.layers) {
    m.bytes += int64_t(w.data.size() + w.scales.size() + w.zeros.size());
    m.flops_per_token += 2.0 * double(w.view.numel());
  }
  m.bytes += int64_t(m.head.data.size() + m.head.scales.size());
  return m;
}

// One pass: n tokens through every layer's four matmuls, the head on min(n, 1) row.
void forward(CpuBackend& be, const Model& m, int64_t n, std::vector<float>& x, std::vector<float>& y) {
  const auto run = [&](const Weight& w, int64_t rows) {
    const TensorView xv = make_view(x.data(), DType::F32, {rows, w.view.shape[1]});
    const TensorView yv = make_view(y.data(), DType::F32, {rows, w.view.shape[0]});
    if (dtype_is_quantized(w.view.dtype)) {
      if (!be.matmul_quant_fast(xv, w.view, {}, yv)) {
        std::fprintf(stderr, "no integer kernel for %s\n", std::string(dtype_name(w.view.dtype)).c_str());
        std::exit(1);
      }
    } else {
      be.matmul(xv, w.view, {}, yv);
    }
  };
  for (const Weight& w : m.layers) run(w, n);
  run(m.head, 1);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) v.push_back(item);
  return v;
}

bool parse_dtype(std::string name, DType* out) {
  for (char& c : name) c = char(std::toupper(c));
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::W8, DType::W4, DType::Q8_0, DType::Q4_0, DType::Q4_K})
    if (dtype_name(t) == name) return *out = t, true;
  return false;
}

int run(int argc, char** argv) {
  Shape shape{256, 576, 4, 2, 64, 8192, 6};  // tiny-main
  std::string dtypes = "bf16,f16,w8,w4,q8_0,q4_0,q4_k", tokens = "1,64";
  int threads = 0, reps = 20;
  bool membw = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(1);
      }
      return argv[++i];
    };
    if (a == "--shape") {
      const std::string v = value();
      if (v == "tiny") shape = {256, 576, 4, 2, 64, 8192, 6};
      else if (v == "1b") shape = {2048, 8192, 32, 8, 64, 8192, 16};
      else if (std::sscanf(v.c_str(), "%ld,%ld,%ld,%ld,%ld,%ld,%ld", &shape.d_model, &shape.d_ff, &shape.n_heads,
                           &shape.n_kv_heads, &shape.head_dim, &shape.n_vocab, &shape.n_layers) != 7) {
        std::fprintf(stderr, "--shape: tiny, 1b or D,FF,H,KVH,HD,V,L\n");
        return 1;
      }
    } else if (a == "--dtypes") dtypes = value();
    else if (a == "--tokens") tokens = value();
    else if (a == "-t" || a == "--threads") threads = std::stoi(value());
    else if (a == "--reps") reps = std::max(1, std::stoi(value()));
    else if (a == "--no-membw") membw = false;
    else {
      std::fprintf(stderr, "usage: %s [--shape tiny|1b|D,FF,H,KVH,HD,V,L] [--dtypes bf16,f16,f32,w8,w4,q8_0,q4_0,q4_k] "
                   "[--tokens 1,64] [-t THREADS] [--reps N] [--no-membw]\n", argv[0]);
      return a == "-h" || a == "--help" ? 0 : 1;
    }
  }
  set_default_host_threads(threads);
  std::printf("shape: d_model %ld, d_ff %ld, heads %ld/%ld x %ld, vocab %ld, layers %ld; threads %d; ISA %s\n",
              shape.d_model, shape.d_ff, shape.n_heads, shape.n_kv_heads, shape.head_dim, shape.n_vocab,
              shape.n_layers, host_threads(), cpu::isa_report().c_str());
  double copy_gb_s = 0;
  if (membw) {
    copy_gb_s = bench::measure_copy_bandwidth().copy_gb_s;
    std::printf("copy bandwidth %.1f GB/s\n", copy_gb_s);
  }
  std::printf("%-6s %7s %10s %12s %10s %12s %10s %9s %12s\n", "dtype", "tokens", "MB", "tokens/s", "median",
              "cpu tok/s", "GB/s", "roofline", "GFLOP/s");
  CpuBackend be;
  for (const std::string& name : split(dtypes)) {
    DType dtype;
    if (!parse_dtype(name, &dtype)) {
      std::fprintf(stderr, "--dtypes: unknown %s\n", name.c_str());
      return 1;
    }
    const Model model = make_model(shape, dtype);
    for (const std::string& tok : split(tokens)) {
      const int64_t n = std::stol(tok);
      const int64_t width = std::max({shape.d_model, shape.d_ff * 2, shape.n_vocab,
                                      (shape.n_heads + 2 * shape.n_kv_heads) * shape.head_dim});
      std::vector<float> x(size_t(n * width)), y(size_t(n * width));
      for (size_t i = 0; i < x.size(); ++i) x[i] = float(int64_t(next_u64() % 2001) - 1000) * 1e-3f;
      forward(be, model, n, x, y);  // warm-up
      std::vector<double> times;
      const double cpu0 = cpu_seconds();
      for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        forward(be, model, n, x, y);
        times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      const double cpu_per_rep = (cpu_seconds() - cpu0) / double(reps) / double(host_threads());
      std::sort(times.begin(), times.end());
      const double best = times.front(), median = times[times.size() / 2];
      const double gb_s = double(model.bytes) / best / 1e9;
      if (n == 1)
        std::printf("%-6s %7ld %10.1f %12.1f %10.1f %12.1f %10.1f %8.0f%% %12s\n", name.c_str(), n,
                    double(model.bytes) / 1e6, 1.0 / best, 1.0 / median, 1.0 / cpu_per_rep, gb_s,
                    copy_gb_s > 0 ? 100.0 * gb_s / copy_gb_s : 0.0, "");
      else
        std::printf("%-6s %7ld %10.1f %12.1f %10.1f %12.1f %10s %9s %12.1f\n", name.c_str(), n,
                    double(model.bytes) / 1e6, double(n) / best, double(n) / median, double(n) / cpu_per_rep, "", "",
                    model.flops_per_token * double(n) / best / 1e9);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace tf

int main(int argc, char** argv) {
  try {
    return tf::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cpu_matmul: %s\n", e.what());
    return 1;
  }
}

// A Llama forward on the CPU backend in every weight format its kernels take (F32/BF16/F16
// and the quantized W8, W4, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K), without loading a model: random weights of a
// shape (all layers allocated, so decode streams them from memory as a model does), and the
// backend ops a Llama layer runs (model/arch/llama.cpp), in the same order: rms_norm,
// matmul(qkv), rope_kv_write, attention, matmul(o), add, rms_norm, matmul(gate_up),
// swiglu, matmul(down), add; then the final norm and the LM head on the last row. Quantized
// matrices are uploaded (CpuBackend::upload repacks the 4-bit ones, as for the engine) and go
// to CpuBackend::matmul_quant_fast. This is what llama-bench's pp/tg measure:
//
//   pp P   one prefill step of P tokens (tokens/s, GFLOP/s of the weights' 2 flops each);
//   tg G   G decode steps of one token after it (tokens/s, the GB/s of weight bytes read per
//          step, and that as a share of the copy bandwidth, the batch-1 roofline, and of the
//          read-only bandwidth, bench/membw.h).
//
// Not the engine: no tokenizer, scheduler or sampler (their per-token cost is in
// `twofold bench`'s "decode step" line). Not a test: it prints numbers, asserts nothing.
// Each figure is the best of --reps runs (wall time): on a machine shared with other work,
// the run closest to the machine's capability; the median is printed beside it, and "per
// cpu-s" divides the tokens by the process's CPU time per thread instead (what the threads
// achieve while they hold a core; on a busy machine the wall clock also counts the waits). A matrix
// whose k the format's blocks do not divide (the K types' 256 in tiny-main's d_ff of 576) is kept
// in BF16 and its bytes counted as such, as llama.cpp's quantizer falls back.
//
// usage: bench_cpu_forward [--shape tiny|1b|D,FF,H,KVH,HD,V,L] [--dtypes bf16,f16,...]
//                          [-p PROMPT] [-n GEN] [-t THREADS] [--reps N] [--no-membw] [--json]
//                          [--int8-activations] [--bf16-activations] [--no-huge-pages]
// --int8-activations: the integer kernels' 8-bit activations instead of the default 16 bits.
// --bf16-activations: BF16-weight prefill GEMMs with BF16 activations on AMX tiles, where present.
// --no-huge-pages: weights without a repacked copy read where the bench made them (4 KiB pages),
// not from the backend's copy on huge pages (BackendOptions::huge_pages).
// TF_CPU_ISA picks the kernels' ISA level as for twofold.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/isa.h"
#include "bench/membw.h"
#include "core/batch.h"
#include "core/host_threads.h"
#include "core/split.h"

namespace tf {
namespace {

struct Shape {
  int64_t d_model, d_ff, n_heads, n_kv_heads, head_dim, n_vocab, n_layers;
};

// One weight matrix [m, k] in a format, with its scale/zero arrays.
struct Weight {
  std::vector<uint8_t> data, scales, zeros;
  TensorView view;
  int64_t bytes() const { return int64_t(data.size() + scales.size() + zeros.size()); }
};

uint64_t g_rng = 0x9e3779b97f4a7c15ull;
uint64_t next_u64() {  // xorshift64*: fast enough to fill gigabytes
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 0x2545f4914f6cdd1dull;
}
float next_f32() { return float(int64_t(next_u64() % 2001) - 1000) * 1e-3f; }  // [-1, 1]
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
    case DType::F16:  // values of a sane size: weights of a trained layer are ~0.02
      for (int64_t i = 0; i < m * k; ++i) store_f32(w.data.data(), dtype, i, next_f32() * 0.05f);
      break;
    case DType::W8: {
      for (auto& b : w.data)
        if (b == 0x80) b = 0x81;  // -128 is not a W8 value
      w.scales.resize(size_t(m) * 4);
      for (int64_t i = 0; i < m; ++i) {
        const float sc = 4e-4f;
        std::memcpy(w.scales.data() + 4 * i, &sc, 4);
      }
      break;
    }
    case DType::W4: {
      const int32_t group = k % 128 == 0 ? 128 : k % 64 == 0 ? 64 : 32;  // 128 where it divides k
      w.view.group_size = group;
      w.scales.resize(size_t(m * (k / group)) * 2);
      w.zeros.resize(size_t(m * (k / group)));
      for (size_t g = 0; g < w.zeros.size(); ++g) {
        put_scale(w.scales.data() + 2 * g);
        w.zeros[g] = 8;
      }
      break;
    }
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: {  // the block scales (and Q4_K's / Q5_K's dmin) at their places in each block
      const int64_t elems = dtype_block_elems(dtype), bytes = int64_t(dtype_row_bytes(dtype, elems));
      for (int64_t b = 0; b < m * (k / elems); ++b) {
        put_scale(w.data.data() + b * bytes + (dtype == DType::Q6_K ? 208 : 0));
        if (dtype == DType::Q4_K || dtype == DType::Q5_K) put_scale(w.data.data() + b * bytes + 2);
      }
      break;
    }
    default: std::fprintf(stderr, "no random weights for %s\n", std::string(dtype_name(dtype)).c_str()); std::exit(1);
  }
  w.view.scales = w.scales.empty() ? nullptr : w.scales.data();
  w.view.zeros = w.zeros.empty() ? nullptr : w.zeros.data();
  return w;
}

struct Layer {
  Weight qkv, o, gate_up, down;
};

struct Model {
  Shape shape;
  std::vector<Layer> layers;
  Weight head;
  std::vector<float> norm;      // [d_model] of ones: every RMSNorm's weight
  std::vector<float> inv_freq;  // [head_dim / 2]
  int64_t weight_bytes = 0;     // read by one decode step: every layer's matrices and the head
  double flops_per_token = 0;   // 2 per weight of the layers (prefill; the head runs on one row)
};

Model make_model(const Shape& s, DType dtype) {
  Model m{.shape = s};
  const int64_t q = s.n_heads * s.head_dim, kv = s.n_kv_heads * s.head_dim;
  for (int64_t il = 0; il < s.n_layers; ++il)
    m.layers.push_back(Layer{.qkv = make_weight(dtype, q + 2 * kv, s.d_model), .o = make_weight(dtype, s.d_model, q),
                             .gate_up = make_weight(dtype, 2 * s.d_ff, s.d_model),
                             .down = make_weight(dtype, s.d_model, s.d_ff)});
  m.head = make_weight(dtype, s.n_vocab, s.d_model);
  for (const Layer& l : m.layers)
    for (const Weight* w : {&l.qkv, &l.o, &l.gate_up, &l.down}) {
      m.weight_bytes += w->bytes();
      m.flops_per_token += 2.0 * double(w->view.numel());
    }
  m.weight_bytes += m.head.bytes();
  m.norm.assign(size_t(s.d_model), 1.0f);
  for (int64_t i = 0; i < s.head_dim / 2; ++i)
    m.inv_freq.push_back(float(1.0 / std::pow(500000.0, double(2 * i) / double(s.head_dim))));
  return m;
}

// Activations for up to `cap` tokens.
struct Acts {
  std::vector<float> embed;  // [cap, d_model]: what x starts from at each forward (random "embeddings")
  std::vector<float> x, h, qkv, attn, delta, gate_up, act, logits;
  explicit Acts(const Shape& s, int64_t cap)
      : x(size_t(cap * s.d_model)), h(x.size()), qkv(size_t(cap * (s.n_heads + 2 * s.n_kv_heads) * s.head_dim)),
        attn(size_t(cap * s.n_heads * s.head_dim)), delta(x.size()), gate_up(size_t(cap * 2 * s.d_ff)),
        act(size_t(cap * s.d_ff)), logits(size_t(s.n_vocab)) {
    embed.resize(x.size());
    for (float& v : embed) v = next_f32();
  }
};

TensorView view2(std::vector<float>& v, int64_t rows, int64_t cols) {
  return make_view(v.data(), DType::F32, {rows, cols});
}

void matmul(CpuBackend& be, const TensorView& x, const Weight& w, const TensorView& out) {
  if (!dtype_is_quantized(w.view.dtype)) return be.matmul(x, w.view, {}, out);
  if (!be.matmul_quant_fast(x, w.view, {}, out)) {
    std::fprintf(stderr, "no integer kernel for %s\n", std::string(dtype_name(w.view.dtype)).c_str());
    std::exit(1);
  }
}

// One forward of the batch set on `be` (n tokens): the ops of model/arch/llama.cpp.
void forward(CpuBackend& be, Model& m, Acts& a, int64_t n) {
  const Shape& s = m.shape;
  const AttentionParams attn{.n_heads = s.n_heads, .n_kv_heads = s.n_kv_heads, .head_dim = s.head_dim,
                             .scale = 1.0f / std::sqrt(float(s.head_dim))};
  const TensorView norm = make_view(m.norm.data(), DType::F32, {s.d_model});
  const TensorView inv_freq = make_view(m.inv_freq.data(), DType::F32, {s.head_dim / 2});
  const TensorView x = view2(a.x, n, s.d_model), h = view2(a.h, n, s.d_model), delta = view2(a.delta, n, s.d_model);
  const TensorView qkv = view2(a.qkv, n, (s.n_heads + 2 * s.n_kv_heads) * s.head_dim);
  const TensorView att = view2(a.attn, n, s.n_heads * s.head_dim);
  const TensorView gate_up = view2(a.gate_up, n, 2 * s.d_ff), act = view2(a.act, n, s.d_ff);
  std::copy_n(a.embed.begin(), n * s.d_model, a.x.begin());  // the embedding lookup
  for (size_t il = 0; il < m.layers.size(); ++il) {
    const Layer& l = m.layers[il];
    be.rms_norm(x, norm, 1e-5f, h);
    matmul(be, h, l.qkv, qkv);
    be.rope_kv_write(int(il), qkv, QkRope{.inv_freq = inv_freq}, attn);
    be.attention(int(il), qkv, attn, att);
    matmul(be, att, l.o, delta);
    be.add(x, delta);
    be.rms_norm(x, norm, 1e-5f, h);
    matmul(be, h, l.gate_up, gate_up);
    be.swiglu(gate_up, act);
    matmul(be, act, l.down, delta);
    be.add(x, delta);
  }
  const TensorView last = make_view(a.x.data() + (n - 1) * s.d_model, DType::F32, {1, s.d_model});
  be.rms_norm(last, norm, 1e-5f, view2(a.h, 1, s.d_model));
  matmul(be, view2(a.h, 1, s.d_model), m.head, view2(a.logits, 1, s.n_vocab));
}

// Sets a batch of tokens [pos, pos + n) of the one sequence on the backend.
void set_batch(CpuBackend& be, const std::vector<int32_t>& blocks, int32_t block_size, int32_t pos, int32_t n) {
  BatchBuilder b(block_size, int32_t(blocks.size()));
  const std::vector<int32_t> ids(size_t(n), 0);
  b.add(SeqChunk{.ids = ids.data(), .n_ids = n, .start_pos = pos, .blocks = blocks.data(),
                 .n_blocks = int32_t(blocks.size())});
  be.set_batch(b.take());
}

bool parse_dtype(std::string name, DType* out) {
  for (char& c : name) c = char(std::toupper(c));
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::W8, DType::W4, DType::Q8_0, DType::Q4_0, DType::Q4_K,
                  DType::Q5_K, DType::Q6_K})
    if (dtype_name(t) == name) return *out = t, true;
  return false;
}

// CPU time of the whole process (all threads).
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Stats {
  double best = 0, median = 0;  // of tokens/s: the highest and the middle one
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v.back(), v[v.size() / 2]};
}

int run(int argc, char** argv) {
  Shape shape{256, 576, 4, 2, 64, 8192, 6};  // tiny-main
  std::string dtypes = "bf16,f16,w8,w4,q8_0,q4_0", shape_name = "tiny";
  int threads = 0, reps = 5;
  int32_t prompt = 128, gen = 128;
  bool membw = true, json = false, int8_acts = false, bf16_acts = false, huge_pages = true;
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
      shape_name = value();
      if (shape_name == "tiny") shape = {256, 576, 4, 2, 64, 8192, 6};
      else if (shape_name == "1b") shape = {2048, 8192, 32, 8, 64, 8192, 16};
      else if (std::sscanf(shape_name.c_str(), "%ld,%ld,%ld,%ld,%ld,%ld,%ld", &shape.d_model, &shape.d_ff,
                           &shape.n_heads, &shape.n_kv_heads, &shape.head_dim, &shape.n_vocab, &shape.n_layers) != 7) {
        std::fprintf(stderr, "--shape: tiny, 1b or D,FF,H,KVH,HD,V,L\n");
        return 1;
      }
    } else if (a == "--dtypes") dtypes = value();
    else if (a == "-p" || a == "--prompt") prompt = std::max(1, std::stoi(value()));
    else if (a == "-n" || a == "--gen") gen = std::max(1, std::stoi(value()));
    else if (a == "-t" || a == "--threads") threads = std::stoi(value());
    else if (a == "--reps") reps = std::max(1, std::stoi(value()));
    else if (a == "--no-membw") membw = false;
    else if (a == "--json") json = true;
    else if (a == "--int8-activations") int8_acts = true;
    else if (a == "--bf16-activations") bf16_acts = true;
    else if (a == "--no-huge-pages") huge_pages = false;
    else {
      std::fprintf(stderr, "usage: %s [--shape tiny|1b|D,FF,H,KVH,HD,V,L] [--dtypes bf16,f16,f32,w8,w4,q8_0,q4_0,q4_k,q5_k,q6_k] "
                   "[-p PROMPT] [-n GEN] [-t THREADS] [--reps N] [--no-membw] [--json] [--int8-activations] "
                   "[--bf16-activations] [--no-huge-pages]\n", argv[0]);
      return a == "-h" || a == "--help" ? 0 : 1;
    }
  }
  set_default_host_threads(threads);
  double copy_gb_s = 0, read_gb_s = 0;
  if (membw) {
    const bench::MemBwResult bw = bench::measure_copy_bandwidth();
    copy_gb_s = bw.copy_gb_s;
    read_gb_s = bw.read_gb_s;
  }
  if (!json) {
    std::printf("shape %s: d_model %ld, d_ff %ld, heads %ld/%ld x %ld, vocab %ld, layers %ld; pp%d tg%d; %d threads; "
                "kernels %s\n", shape_name.c_str(), shape.d_model, shape.d_ff, shape.n_heads, shape.n_kv_heads,
                shape.head_dim, shape.n_vocab, shape.n_layers, prompt, gen, host_threads(), cpu::isa_report().c_str());
    if (membw) std::printf("copy bandwidth %.1f GB/s, read-only %.1f GB/s\n", copy_gb_s, read_gb_s);
    std::printf("%-6s %10s %12s %10s %10s %9s %12s %10s %10s %9s %9s %8s\n", "dtype", "MB", "pp tok/s", "median",
                "per cpu-s", "GFLOP/s", "tg tok/s", "median", "per cpu-s", "GB/s", "roofline", "of read");
  }
  constexpr int32_t kBlockSize = 16;
  const int32_t ctx = prompt + gen;
  std::vector<int32_t> blocks;
  for (int32_t b = 0; b < (ctx + kBlockSize - 1) / kBlockSize; ++b) blocks.push_back(b);
  for (const std::string& name : split_list(dtypes)) {
    DType dtype;
    if (!parse_dtype(name, &dtype)) {
      std::fprintf(stderr, "--dtypes: unknown %s\n", name.c_str());
      return 1;
    }
    Model model = make_model(shape, dtype);
    CpuBackend be;
    BackendOptions opts;
    opts.int8_activations = int8_acts;
    opts.bf16_activations = bf16_acts;
    opts.huge_pages = huge_pages;
    be.set_options(opts);
    // Through upload, as the engine's loader does: the backend keeps its repacked copy of
    // 4-bit weights (quant_pack.h) beside the canonical bytes, and its kernels read that.
    for (Layer& l : model.layers)
      for (Weight* w : {&l.qkv, &l.o, &l.gate_up, &l.down}) w->view = be.upload(w->view, w->view.dtype);
    model.head.view = be.upload(model.head.view, model.head.view.dtype);
    be.init_kv_cache(KvCacheSpec{.n_layers = shape.n_layers, .n_blocks = int64_t(blocks.size()),
                                 .block_size = kBlockSize, .n_kv_heads = shape.n_kv_heads,
                                 .head_dim = shape.head_dim, .dtype = DType::BF16});
    Acts acts(shape, prompt);
    std::vector<double> pp, tg;
    double cpu_pp = 0, cpu_tg = 0;  // process CPU seconds of the timed runs
    for (int r = 0; r <= reps; ++r) {  // run 0 warms up
      set_batch(be, blocks, kBlockSize, 0, prompt);
      const double c0 = cpu_seconds();
      auto t0 = std::chrono::steady_clock::now();
      forward(be, model, acts, prompt);
      const double t_pp = seconds_since(t0), c1 = cpu_seconds();
      t0 = std::chrono::steady_clock::now();
      for (int32_t g = 0; g < gen; ++g) {
        set_batch(be, blocks, kBlockSize, prompt + g, 1);
        forward(be, model, acts, 1);
      }
      const double t_tg = seconds_since(t0), c2 = cpu_seconds();
      if (r > 0) {
        pp.push_back(double(prompt) / t_pp);
        tg.push_back(double(gen) / t_tg);
        cpu_pp += c1 - c0;
        cpu_tg += c2 - c1;
      }
    }
    // Tokens per CPU-second of each thread: what the threads do while they run (on a busy
    // machine, wall time also counts the time they wait for a core).
    const double pp_cpu = double(prompt) * reps / (cpu_pp / host_threads());
    const double tg_cpu = double(gen) * reps / (cpu_tg / host_threads());
    const Stats ps = stats(pp), ts = stats(tg);
    const double pp_best = ps.best, tg_best = ts.best, pp_median = ps.median, tg_median = ts.median;
    const double gb_s = tg_best * double(model.weight_bytes) / 1e9;
    const double gflops = pp_best * model.flops_per_token / 1e9;
    if (json) {
      std::printf("{\"engine\": \"twofold-forward\", \"shape\": \"%s\", \"dtype\": \"%s\", \"threads\": %d, "
                  "\"isa\": \"%s\", \"weight_bytes\": %ld, \"pp\": %d, \"tg\": %d, \"pp_tok_s\": [%s], "
                  "\"tg_tok_s\": [%s], \"pp_tok_per_cpu_s\": %.2f, \"tg_tok_per_cpu_s\": %.2f, \"copy_gb_s\": %.2f, "
                  "\"read_gb_s\": %.2f}\n",
                  shape_name.c_str(), name.c_str(), host_threads(), std::string(cpu::isa_name(cpu::active_isa())).c_str(),
                  model.weight_bytes, prompt, gen,
                  [&] { std::string v; for (double x : pp) v += (v.empty() ? "" : ", ") + std::to_string(x); return v; }().c_str(),
                  [&] { std::string v; for (double x : tg) v += (v.empty() ? "" : ", ") + std::to_string(x); return v; }().c_str(),
                  pp_cpu, tg_cpu, copy_gb_s, read_gb_s);
    } else {
      std::printf("%-6s %10.1f %12.1f %10.1f %10.1f %9.1f %12.1f %10.1f %10.1f %9.1f %8.0f%% %7.0f%%\n", name.c_str(),
                  double(model.weight_bytes) / 1e6, pp_best, pp_median, pp_cpu, gflops, tg_best, tg_median, tg_cpu,
                  gb_s, copy_gb_s > 0 ? 100.0 * gb_s / copy_gb_s : 0.0, read_gb_s > 0 ? 100.0 * gb_s / read_gb_s : 0.0);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace tf

int main(int argc, char** argv) {
  try {
    return tf::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cpu_forward: %s\n", e.what());
    return 1;
  }
}

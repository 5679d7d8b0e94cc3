// Micro-benchmark of the paged decode attention alone, on the Llama-3-8B attention shape (32
// query heads, 8 kv heads, head_dim 128, 16-token blocks): every sequence decodes one token
// over `ctx` keys, its blocks scattered through the pool as a running engine leaves them. For
// each KV pool dtype, batch size, context and split setting it prints the mean microseconds
// of one attention call and the K/V bytes (codes and row scales) read per second of it.
// Layers rotate through enough pools to span 256 MB, so the keys come from memory, not L2.
// The pools hold random values (8-bit codes without NaN), so only the time means anything.
// Calls are launched back to back (no CUDA Graph), so each time carries the gap between two
// launches. Prints numbers; asserts nothing.
//
//   build-dev/tests/backend/cuda/bench_decode_attention [--seqs 64,256] [--ctx 192,1024]
//       [--dtypes bf16,fp8] [--splits 0,2] [--reps 50]
// --splits 0 is the backend's own split count (BackendOptions::decode_splits).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "core/batch.h"
#include "core/split.h"

namespace tf {
namespace {

constexpr int64_t kHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlock = 16;
constexpr size_t kSpanBytes = size_t(256) << 20;

struct Args {
  std::vector<int64_t> seqs{64, 256}, ctx{192, 1024}, splits{0, 2};
  std::vector<std::string> dtypes{"bf16", "fp8"};
  int reps = 50;
};

DType kv_dtype(const std::string& name) {
  if (name == "bf16") return DType::BF16;
  if (name == "fp8") return DType::FP8;
  if (name == "int8") return DType::I8;
  std::fprintf(stderr, "unknown --dtypes entry '%s' (bf16, fp8, int8)\n", name.c_str());
  std::exit(1);
}

// Random pool contents: BF16 values in [-1, 1), 8-bit codes with a clear top exponent bit
// (no E4M3 NaN), row scales 1/64.
void fill_pools(cuda::CudaBackend& be, int64_t n_layers, DType dtype, std::mt19937& rng) {
  for (int il = 0; il < int(n_layers); ++il)
    for (int kv = 0; kv < 2; ++kv) {
      const TensorView& pool = kv ? be.v_cache(il) : be.k_cache(il);
      std::vector<uint8_t> bytes(pool.nbytes());
      if (dtype == DType::BF16) {
        for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
          const float f = float(rng() % 2048) / 1024.0f - 1.0f;
          uint32_t u;
          std::memcpy(&u, &f, 4);
          bytes[i] = uint8_t(u >> 16);
          bytes[i + 1] = uint8_t(u >> 24);
        }
      } else {
        for (uint8_t& b : bytes) b = uint8_t(rng()) & 0xbf;
      }
      be.copy_from_host(bytes.data(), pool);
      if (dtype != DType::BF16) {
        const TensorView& sc = kv ? be.v_scale(il) : be.k_scale(il);
        const std::vector<float> s(size_t(sc.numel()), 1.0f / 64.0f);
        be.copy_from_host(s.data(), sc);
      }
    }
}

void run_case(const Args& args, const std::string& dname, int n_seqs, int ctx, int splits) {
  const DType dtype = kv_dtype(dname);
  const int64_t elem = dtype == DType::BF16 ? 2 : 1;
  const int64_t row_scale = dtype == DType::BF16 ? 0 : 4;  // bytes of a row's scale
  const int32_t blocks_per_seq = int32_t((ctx + kBlock - 1) / kBlock);
  const int64_t n_blocks = int64_t(n_seqs) * blocks_per_seq + 1;
  const int64_t layer_bytes = n_blocks * kBlock * kKvHeads * 2 * (kHeadDim * elem + row_scale);
  const int64_t n_layers = std::max<int64_t>(2, int64_t(kSpanBytes) / layer_bytes + 1);

  BackendOptions opt;
  opt.decode_splits = splits;
  std::unique_ptr<Backend> owner = make_backend(BackendKind::Cuda, opt);
  auto& be = dynamic_cast<cuda::CudaBackend&>(*owner);
  be.init_kv_cache(KvCacheSpec{.n_layers = n_layers, .n_blocks = n_blocks, .block_size = kBlock,
                               .n_kv_heads = kKvHeads, .head_dim = kHeadDim, .dtype = dtype});
  std::mt19937 rng(uint32_t(n_seqs * 7919 + ctx));
  fill_pools(be, n_layers, dtype, rng);

  // Each sequence's blocks drawn from a shuffled pool, as blocks freed and reused leave them.
  std::vector<int32_t> perm(size_t(n_blocks - 1));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  BatchBuilder builder(int32_t(kBlock), blocks_per_seq);
  const int32_t id = 1;
  for (int s = 0; s < n_seqs; ++s)
    builder.add(SeqChunk{.ids = &id, .n_ids = 1, .start_pos = ctx - 1,
                         .blocks = perm.data() + size_t(s) * size_t(blocks_per_seq), .n_blocks = blocks_per_seq});
  const Batch batch = builder.take();
  be.set_batch(batch);

  const int64_t row = (kHeads + 2 * kKvHeads) * kHeadDim;
  TensorView qkv = be.alloc(DType::BF16, {n_seqs, row});
  TensorView out = be.alloc(DType::BF16, {n_seqs, kHeads * kHeadDim});
  {
    std::vector<uint16_t> q(size_t(n_seqs * row));
    for (uint16_t& x : q) x = uint16_t(0x3c00 + rng() % 256);  // BF16 in [2^-7, 2^-6)
    be.copy_from_host(q.data(), qkv);
  }
  const AttentionParams p{.n_heads = kHeads, .n_kv_heads = kKvHeads, .head_dim = kHeadDim,
                          .scale = float(1.0 / std::sqrt(double(kHeadDim)))};
  for (int il = 0; il < int(n_layers); ++il) be.attention(il, qkv, p, out);
  be.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < args.reps; ++r)
    for (int il = 0; il < int(n_layers); ++il) be.attention(il, qkv, p, out);
  be.synchronize();
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
                    double(args.reps * n_layers);
  const double bytes = double(n_seqs) * ctx * kKvHeads * 2 * double(kHeadDim * elem + row_scale);
  std::printf("%-5s seqs %4d ctx %5d splits %-4s %9.2f us  %7.1f GB/s  (%lld layers)\n", dname.c_str(), n_seqs,
              ctx, splits ? std::to_string(splits).c_str() : "auto", us, bytes / us * 1e-3, (long long)n_layers);
  std::fflush(stdout);
  be.release(qkv);
  be.release(out);
}

int run(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seqs") && i + 1 < argc) a.seqs = parse_int_list(argv[++i], "--seqs", 1);
    else if (!std::strcmp(argv[i], "--ctx") && i + 1 < argc) a.ctx = parse_int_list(argv[++i], "--ctx", 1);
    else if (!std::strcmp(argv[i], "--splits") && i + 1 < argc) a.splits = parse_int_list(argv[++i], "--splits", 0);
    else if (!std::strcmp(argv[i], "--dtypes") && i + 1 < argc) a.dtypes = split_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) a.reps = std::atoi(argv[++i]);
    else {
      std::printf("usage: %s [--seqs 64,256] [--ctx 192,1024] [--dtypes bf16,fp8,int8] [--splits 0,2] [--reps 50]\n",
                  argv[0]);
      return !std::strcmp(argv[i], "--help") ? 0 : 1;
    }
  }
  for (const std::string& d : a.dtypes)
    for (int64_t s : a.seqs)
      for (int64_t c : a.ctx)
        for (int64_t sp : a.splits) run_case(a, d, int(s), int(c), int(sp));
  return 0;
}

}  // namespace
}  // namespace tf

int main(int argc, char** argv) {
  try {
    return tf::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_decode_attention: %s\n", e.what());
    return 1;
  }
}

// Timing harness for paged attention on the CPU backend (not a test: no assertions, not run by
// ctest, built only on request: `cmake --build BUILD --target bench_attention`).
//
// Shapes are Llama-3-8B's attention (32 query heads, 8 KV heads, head_dim 128) with
// block_size 16 and, for comparison, the tiny test model's (4/2/64). Each case fills the
// sequences' cache with rope_kv_write over random K/V, then times attention() alone: the
// best of `reps` runs of wall time, and of process CPU time (all threads summed), which is
// the steadier number on a machine shared with other jobs. Reported units: milliseconds; for
// decode the achieved GB/s of K/V bytes read, and the achieved GFLOP/s of the 4 * head_dim
// flops per (query head, visible key) pair (q.k and p.v), both per wall time.
//
//   usage: bench_attention [reps=5] [case name substring]
//   environment: OMP_NUM_THREADS; TF_BENCH_DTYPES=F32,BF16,F16,I8 (default all but I8)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/batch.h"
#include "op_test_util.h"

namespace tf {
namespace {

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

struct BenchCase {
  const char* name;
  int64_t n_heads, n_kv_heads, head_dim;
  int32_t n_seqs;       // sequences in the timed batch
  int32_t n_cached;     // tokens of each sequence already in the cache
  int32_t n_new;        // tokens of each sequence in the timed batch
};

double run(const BenchCase& c, DType kv_dtype, int reps) {
  constexpr int32_t kBlockSize = 16;
  const int32_t ctx = c.n_cached + c.n_new;
  const int32_t per_seq = (ctx + kBlockSize - 1) / kBlockSize;
  auto be = make_backend(BackendKind::Cpu);
  be->init_kv_cache(KvCacheSpec{.n_layers = 1,
                                .n_blocks = int64_t(per_seq) * c.n_seqs,
                                .block_size = kBlockSize,
                                .n_kv_heads = c.n_kv_heads,
                                .head_dim = c.head_dim,
                                .dtype = kv_dtype});
  const AttentionParams p{.n_heads = c.n_heads,
                          .n_kv_heads = c.n_kv_heads,
                          .head_dim = c.head_dim,
                          .scale = 1.0f / std::sqrt(float(c.head_dim))};
  const int64_t row = (c.n_heads + 2 * c.n_kv_heads) * c.head_dim;
  std::vector<float> inv_freq_host(size_t(c.head_dim / 2));
  for (size_t i = 0; i < inv_freq_host.size(); ++i)
    inv_freq_host[i] = float(std::pow(10000.0, -2.0 * double(i) / double(c.head_dim)));
  TensorView inv_freq = test::to_device(*be, inv_freq_host, 1, c.head_dim / 2);
  inv_freq = make_view(inv_freq.data, DType::F32, {c.head_dim / 2});
  test::Rng rng(7);

  std::vector<std::vector<int32_t>> blocks(size_t(c.n_seqs));
  for (int32_t s = 0; s < c.n_seqs; ++s)
    for (int32_t b = 0; b < per_seq; ++b) blocks[size_t(s)].push_back(s * per_seq + b);
  auto make_batch = [&](int32_t start, int32_t n, int32_t only_seq) {
    BatchBuilder builder(kBlockSize, per_seq);
    std::vector<int32_t> ids(size_t(n), 1);
    for (int32_t s = 0; s < c.n_seqs; ++s) {
      if (only_seq >= 0 && s != only_seq) continue;
      builder.add(SeqChunk{.ids = ids.data(), .n_ids = n, .start_pos = start,
                           .blocks = blocks[size_t(s)].data(), .n_blocks = per_seq});
    }
    return builder.take();
  };

  // fill every sequence's cache (the cached prefix and this step's tokens) one sequence at a time
  for (int32_t s = 0; s < c.n_seqs; ++s) {
    be->set_batch(make_batch(0, ctx, s));
    const TensorView qkv = test::to_device(*be, test::randn(rng, int64_t(ctx) * row), ctx, row);
    be->rope_kv_write(0, qkv, QkRope{.inv_freq = inv_freq}, p);
    be->release(qkv);
  }
  // the timed step: n_new tokens per sequence after n_cached (its K/V are already written)
  const Batch batch = make_batch(c.n_cached, c.n_new, -1);
  be->set_batch(batch);
  const int64_t n = batch.n_tokens();
  const TensorView qkv = test::to_device(*be, test::randn(rng, n * row), n, row);
  const TensorView out = be->alloc(DType::F32, {n, c.n_heads * c.head_dim});
  double best = 1e30, best_cpu = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    be->attention(0, qkv, p, out);
    const auto t1 = std::chrono::steady_clock::now();
    best_cpu = std::min(best_cpu, cpu_seconds() - c0);
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }

  // visible (query head, key) pairs and the K/V bytes a pass reads at least once
  double pairs = 0;
  for (int32_t i = 0; i < c.n_new; ++i) pairs += double(c.n_cached + i + 1);
  pairs *= double(c.n_seqs) * double(c.n_heads);
  const double elem = kv_dtype == DType::F32 ? 4 : kv_dtype == DType::I8 ? 1 : 2;
  const double row_bytes = double(c.head_dim) * elem + (kv_dtype == DType::I8 ? 4 : 0);
  const double kv_bytes = 2.0 * double(c.n_seqs) * ctx * double(c.n_kv_heads) * row_bytes;
  std::printf("%-34s %-4s wall %9.3f ms  cpu %9.3f ms  %7.2f GB/s of K/V  %7.2f GFLOP/s\n", c.name,
              std::string(dtype_name(kv_dtype)).c_str(), best * 1e3, best_cpu * 1e3,
              kv_bytes / best * 1e-9, pairs * 4.0 * double(c.head_dim) / best * 1e-9);
  return best;
}

// Whether `name` is one of the comma-separated entries of `list`.
bool listed(const std::string& list, std::string_view name) {
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t end = std::min(list.find(',', begin), list.size());
    if (list.compare(begin, end - begin, name) == 0) return true;
    begin = end + 1;
  }
  return false;
}

}  // namespace
}  // namespace tf

int main(int argc, char** argv) {
  using namespace tf;
  const int reps = argc > 1 ? std::atoi(argv[1]) : 5;
  std::printf("threads %d, best of %d\n", omp_get_max_threads(), reps);
  const BenchCase cases[] = {
      {"decode 8B-heads 16 seqs x 1024", 32, 8, 128, 16, 1023, 1},
      {"decode 8B-heads 1 seq x 4096", 32, 8, 128, 1, 4095, 1},
      {"prefill 8B-heads 1 seq x 1024", 32, 8, 128, 1, 0, 1024},
      {"chunk 8B-heads 256 after 1792", 32, 8, 128, 1, 1792, 256},
      {"decode tiny-heads 16 seqs x 512", 4, 2, 64, 16, 511, 1},
      {"prefill tiny-heads 1 seq x 512", 4, 2, 64, 1, 0, 512},
  };
  const char* only = std::getenv("TF_BENCH_DTYPES");  // e.g. "F32,I8"
  const std::string filter = argc > 2 ? argv[2] : "";
  for (const BenchCase& c : cases) {
    if (std::string(c.name).find(filter) == std::string::npos) continue;
    for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::I8}) {
      if (only ? !listed(only, dtype_name(dt)) : dt == DType::I8) continue;
      run(c, dt, reps);
    }
  }
  return 0;
}

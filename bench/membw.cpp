#include "bench/membw.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/huge_pages.h"

namespace tf::bench {

namespace {

// The read-only pass: sums the buffer as 64-bit integers (vectorizes without reassociating
// floats), each thread its two halves side by side with a software prefetch kAhead words ahead
// of both: the pattern the decode kernels read weights in (kernels/matmul.cpp). kLine words a
// step. The read rate depends on the code the compiler makes of it (on a 2-core VM one stream
// without prefetch read 31 GB/s, these 33-39), so the bench keeps the best of a few.
template <int64_t kLine, int64_t kAhead>
double read_pass(const void* buf, int64_t bytes, uint64_t* total) {
  const int64_t words = bytes / int64_t(sizeof(uint64_t));
  const uint64_t* w = static_cast<const uint64_t*>(buf);
  const int nt = omp_get_max_threads();
  const int64_t chunk = words / nt / (2 * kLine) * (2 * kLine), half = chunk / 2;
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t sum = 0;
#pragma omp parallel num_threads(nt) reduction(+ : sum)
  {
    const uint64_t* p = w + omp_get_thread_num() * chunk;
    const uint64_t* q = p + half;
    uint64_t s0[kLine] = {}, s1[kLine] = {};
    for (int64_t i = 0; i < half; i += kLine) {
      for (int64_t l = 0; l < kLine; l += 8) {  // a 64-byte line
        __builtin_prefetch(p + i + kAhead + l);
        __builtin_prefetch(q + i + kAhead + l);
      }
      for (int64_t j = 0; j < kLine; ++j) {
        s0[j] += p[i + j];
        s1[j] += q[i + j];
      }
    }
    for (int64_t j = 0; j < kLine; ++j) sum += s0[j] + s1[j];
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  *total += sum;
  return double(chunk * nt) * double(sizeof(uint64_t)) / s / 1e9;
}

}  // namespace

MemBwResult measure_copy_bandwidth(int64_t bytes, int repeats) {
  const int64_t n = bytes / int64_t(sizeof(float));
  // On huge pages, as the CPU backend keeps the weights it streams (core/huge_pages.h): 4 KiB
  // pages cost this copy about a sixth of its bandwidth on a 2-core VM.
  HugePageBuffer abuf(size_t(n) * sizeof(float)), bbuf(size_t(n) * sizeof(float));
  float* a = reinterpret_cast<float*>(abuf.data());
  float* b = reinterpret_cast<float*>(bbuf.data());
  // First touch from the threads that will copy, so pages are spread as they will be used.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    a[size_t(i)] = float(i & 1023);
    b[size_t(i)] = 0;
  }
  MemBwResult r;
  r.bytes = bytes;
  r.threads = omp_get_max_threads();
  for (int rep = 0; rep < repeats; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel
    {
      const int nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t chunk = (n + nt - 1) / nt, begin = t * chunk, end = std::min(n, begin + chunk);
      if (begin < end) std::memcpy(b + begin, a + begin, size_t(end - begin) * sizeof(float));
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.copy_gb_s = std::max(r.copy_gb_s, 2.0 * double(bytes) / s / 1e9);
  }
  uint64_t total = 0;
  for (int rep = 0; rep < repeats; ++rep) {
    r.read_gb_s = std::max({r.read_gb_s, read_pass<16, 64>(a, bytes, &total), read_pass<32, 128>(a, bytes, &total),
                            read_pass<16, 128>(a, bytes, &total)});
  }
  volatile float sink = b[size_t(n / 2)];  // keep the copy observable
  volatile uint64_t read_sink = total;
  (void)sink;
  (void)read_sink;
  return r;
}

}  // namespace tf::bench

#include "bench/membw.h"

#include <omp.h>

#include <chrono>
#include <cstring>

#include "core/huge_pages.h"

namespace tf::bench {

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
  // The read-only pass sums the buffer as 64-bit integers (vectorizes without reassociating
  // floats); the sum is kept observable.
  const int64_t words = bytes / int64_t(sizeof(uint64_t));
  const uint64_t* w = reinterpret_cast<const uint64_t*>(a);
  uint64_t total = 0;
  for (int rep = 0; rep < repeats; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : sum)
    for (int64_t i = 0; i < words; ++i) sum += w[size_t(i)];
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.read_gb_s = std::max(r.read_gb_s, double(bytes) / s / 1e9);
    total += sum;
  }
  volatile float sink = b[size_t(n / 2)];  // keep the copy observable
  volatile uint64_t read_sink = total;
  (void)sink;
  (void)read_sink;
  return r;
}

}  // namespace tf::bench

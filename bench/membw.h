// Memory bandwidth by a copy test (the denominator of the decode roofline), and by a read-only
// pass over the same buffer (what a decode step, which only reads weights, can reach: on a
// 2-core VM 36-38 GB/s read-only against 48-49 GB/s of read + write in the copy, both on huge pages).
#pragma once

#include <cstdint>

namespace tf::bench {

struct MemBwResult {
  double copy_gb_s = 0;   // (bytes read + bytes written) / time, best of the repeats
  double read_gb_s = 0;   // bytes read / time of a pass that only reads (a sum), best of the repeats and read patterns
  int64_t bytes = 0;      // size of each buffer
  int threads = 0;
};

// Copies a buffer of `bytes` (much larger than the last-level cache; both on huge pages) with all threads,
// `repeats` times, and keeps the best; then reads it as often.
MemBwResult measure_copy_bandwidth(int64_t bytes = int64_t(1) << 30, int repeats = 5);

}  // namespace tf::bench

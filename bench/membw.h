// Memory bandwidth by a copy test: the denominator of the decode roofline.
#pragma once

#include <cstdint>

namespace tf::bench {

struct MemBwResult {
  double copy_gb_s = 0;   // (bytes read + bytes written) / time, best of the repeats
  int64_t bytes = 0;      // size of each buffer
  int threads = 0;
};

// Copies a buffer of `bytes` (much larger than the last-level cache) with all threads,
// `repeats` times, and keeps the best.
MemBwResult measure_copy_bandwidth(int64_t bytes = int64_t(1) << 30, int repeats = 5);

}  // namespace tf::bench

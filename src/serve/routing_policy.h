// Which data-parallel replica takes a request: the least loaded (running + waiting +
// being submitted), unless the replica that last served the same prompt prefix is within
// `slack` requests of that, where the prefix's KV blocks may still be cached. Pure
// arithmetic, unit-tested without engines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace tf::serve {

struct RouteInput {
  std::span<const int64_t> loads;  // per replica
  int affinity = -1;               // replica that last saw this prompt's first KV block, or -1
  int64_t slack = 2;               // affinity wins while its load <= least + slack
  size_t rotate = 0;               // ties among the least loaded go to the first at or after this
};

inline int choose_replica(const RouteInput& in) {
  const size_t n = in.loads.size();
  size_t best = in.rotate % n;
  for (size_t k = 1; k < n; ++k) {
    const size_t i = (in.rotate + k) % n;
    if (in.loads[i] < in.loads[best]) best = i;
  }
  if (in.affinity >= 0 && size_t(in.affinity) < n && in.loads[size_t(in.affinity)] <= in.loads[best] + in.slack)
    return in.affinity;
  return int(best);
}

}  // namespace tf::serve

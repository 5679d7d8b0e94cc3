// Sampling with temperature, top-k, top-p and min-p where the logits live, so that only token
// ids travel to the host.
//
// One block of kThreads threads per row. With w_i = exp((l_i - max) / T) (the best token has
// w = 1), every truncation is a threshold on w, and the kept set is {i : w_i >= tau} with
// tau = max(tau_k, tau_p, min_p):
//   - tau_k: the k-th largest w (top-k);
//   - tau_p: the largest tau whose kept mass, within the top-k set, still reaches
//     top_p * (mass of the top-k set) (top-p: the shortest most-likely prefix);
//   - min_p: p_i >= min_p * p_max is w_i >= min_p.
// Both thresholds are found by bisection on the bit pattern of w (positive floats order like
// their bits), 30 block-wide passes each over the row (w is written over the logits first,
// so the passes read floats from L2). Then the draw: target = u * kept mass, and the token is
// the smallest id whose cumulative kept mass (in id order) exceeds it - chunks of ids per
// thread, a block scan of the chunk masses, a walk inside the crossing chunk.
//
// This is the host Sampler's definition (sample/sampler.h) with two differences, both at
// measure-zero events: tokens tied exactly at the top-k threshold are all kept (the host keeps
// the lower ids), and masses are summed in FP32 in another order, so a token sitting exactly
// on the top-p boundary or a uniform landing within ~1e-6 of a CDF step may resolve
// differently. The same uniform (drawn on the host from the request's seeded RNG) gives the
// same token on every run.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sample.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 1024;

// Kept mass and count over w >= tau, restricted to w >= floor.
__device__ void mass_above(const float* w, int64_t n, float tau, float* scratch, float* mass, float* count) {
  float m = 0.0f, c = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float x = w[i];
    if (x >= tau) {
      m += x;
      c += 1.0f;
    }
  }
  *mass = block_sum(m, scratch);
  *count = block_sum(c, scratch);
}

__global__ void __launch_bounds__(kThreads) sample_kernel(float* logits, int64_t n, const SampleRowArgs* args,
                                                          int32_t* ids) {
  __shared__ float scratch[32];
  __shared__ float chunk_mass[kThreads];
  __shared__ int32_t found;
  const SampleRowArgs p = args[blockIdx.x];
  float* w = logits + int64_t(blockIdx.x) * n;

  // max logit
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) mx = fmaxf(mx, w[i]);
  mx = block_max(mx, scratch);
  if (p.temperature <= 0.0f) {  // greedy: the lowest id holding the max
    if (threadIdx.x == 0) found = INT32_MAX;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += kThreads)
      if (w[i] == mx) atomicMin(&found, int32_t(i));
    __syncthreads();
    if (threadIdx.x == 0) ids[blockIdx.x] = found == INT32_MAX ? 0 : found;
    return;
  }
  for (int64_t i = threadIdx.x; i < n; i += kThreads) w[i] = expf((w[i] - mx) / p.temperature);
  __syncthreads();

  // tau_k: the largest tau with at least k weights >= tau
  float tau = 0.0f, mass_k = 0.0f, cnt = 0.0f;
  if (p.top_k > 0 && p.top_k < n) {
    uint32_t lo = 0, hi = __float_as_uint(1.0f);  // count(w >= lo) >= k always holds
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo + 1) / 2;
      mass_above(w, n, __uint_as_float(mid), scratch, &mass_k, &cnt);
      if (cnt >= float(p.top_k)) lo = mid; else hi = mid - 1;
    }
    tau = __uint_as_float(lo);
  }
  mass_above(w, n, tau, scratch, &mass_k, &cnt);
  // tau_p: the largest tau >= tau_k whose mass reaches top_p * mass_k
  if (p.top_p < 1.0f) {
    const float target = p.top_p * mass_k;
    uint32_t lo = __float_as_uint(tau), hi = __float_as_uint(1.0f);
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo + 1) / 2;
      float m, c;
      mass_above(w, n, __uint_as_float(mid), scratch, &m, &c);
      if (m >= target) lo = mid; else hi = mid - 1;
    }
    tau = __uint_as_float(lo);
  }
  tau = fmaxf(tau, p.min_p);

  // the draw: chunk masses, an exclusive scan (thread 0, 1024 entries), the crossing chunk
  const int64_t chunk = (n + kThreads - 1) / kThreads, lo_i = threadIdx.x * chunk, hi_i = min(n, lo_i + chunk);
  float m = 0.0f;
  for (int64_t i = lo_i; i < hi_i; ++i) m += w[i] >= tau ? w[i] : 0.0f;
  chunk_mass[threadIdx.x] = m;
  if (threadIdx.x == 0) found = INT32_MAX;
  __syncthreads();
  if (threadIdx.x == 0) {
    float acc = 0.0f;
    for (int t = 0; t < kThreads; ++t) {
      const float c = chunk_mass[t];
      chunk_mass[t] = acc;
      acc += c;
    }
    scratch[0] = acc;
  }
  __syncthreads();
  const float target = p.u * scratch[0];
  float acc = chunk_mass[threadIdx.x];
  if (target >= acc && hi_i > lo_i) {
    for (int64_t i = lo_i; i < hi_i; ++i) {
      if (w[i] < tau) continue;
      acc += w[i];
      if (target < acc) {
        // Rounding may let two neighbouring chunks both see the crossing: the lower id wins,
        // so the result never depends on timing.
        atomicMin(&found, int32_t(i));
        break;
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t id = found == INT32_MAX ? -1 : found;
    if (id < 0) {  // rounding put the target past the end: the last kept token
      for (int64_t i = n - 1; i >= 0; --i)
        if (w[i] >= tau) {
          id = int32_t(i);
          break;
        }
    }
    ids[blockIdx.x] = id < 0 ? 0 : id;
  }
}

}  // namespace

void launch_sample_rows(float* logits, int64_t rows, int64_t n_vocab, const SampleRowArgs* args, int32_t* ids,
                        cudaStream_t stream) {
  if (rows == 0) return;
  sample_kernel<<<unsigned(rows), kThreads, 0, stream>>>(logits, n_vocab, args, ids);
  TF_CUDA_CHECK_LAUNCH("sample_kernel");
}

}  // namespace tf::cuda

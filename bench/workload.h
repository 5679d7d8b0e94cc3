// A synthetic serving workload with long-tailed lengths, run two ways through one engine:
// continuous batching (every request queued at once; the engine refills a finished slot at
// the next step) and static batching (groups of `max_batch` requests, each group padded to
// its longest prompt and longest output and started only when the previous one finished, as
// a plain engine serves a padded batch). Only real tokens count towards throughput.
#pragma once

#include <cstdint>
#include <vector>

#include "twofold/engine.h"

namespace tf::bench {

struct WorkloadParams {
  int32_t n_requests = 64;
  int32_t max_batch = 32;          // static: group size; continuous: the engine's max_seqs
  double prompt_median = 256;      // log-normal lengths: median and sigma of the log
  double output_median = 128;
  double sigma = 0.6;
  int32_t max_len = 2048;          // prompt and output lengths are clamped to [8, max_len]
  uint64_t seed = 7;
};

struct WorkloadRequest {
  int32_t prompt_len = 0, output_len = 0;
};

struct WorkloadResult {
  double seconds = 0;
  int64_t useful_tokens = 0;      // real output tokens (padding excluded)
  double tokens_per_s = 0;
  double itl_p50_s = 0, itl_p99_s = 0;   // time between a request's consecutive tokens
  double ttft_p50_s = 0, ttft_p99_s = 0;
  int32_t peak_kv_blocks_used = 0;
};

// The request lengths of a workload (deterministic for a seed).
std::vector<WorkloadRequest> make_workload(const WorkloadParams& p);
// Runs it; `static_batching` selects the padded, grouped schedule. Prompts are random ids
// from `seed`, distinct per request (no prefix-cache hits).
WorkloadResult run_workload(Engine& engine, const std::vector<WorkloadRequest>& reqs, int32_t max_batch,
                            bool static_batching, uint64_t seed);

}  // namespace tf::bench

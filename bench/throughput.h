// Engine throughput: prefill and decode tokens/s for a batch of synthetic requests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "twofold/engine.h"

namespace tf::bench {

struct ThroughputParams {
  int32_t batch = 1;        // concurrent requests
  int32_t prompt_len = 128; // tokens per prompt (random ids, fixed seed)
  int32_t gen_len = 128;    // new tokens per request (EOS ignored)
  uint64_t seed = 1;         // prompts; use a new seed per run, or the prefix cache serves them
  bool sequential = false;  // run the requests one after another instead of concurrently
  // When set: these prompts, request b taking prompt b % size (greedy outputs are then text
  // a model or a proposer can predict), instead of random ids of prompt_len.
  const std::vector<std::vector<int32_t>>* prompts = nullptr;
};

struct ThroughputResult {
  ThroughputParams params;
  double prefill_s = 0;           // until every request has its first token
  double decode_s = 0;            // the rest
  double prefill_tokens_per_s = 0;
  double decode_tokens_per_s = 0; // all requests together
  double ttft_p50_s = 0, ttft_p99_s = 0;
  double itl_p50_s = 0, itl_p99_s = 0;  // per-token latency (time between a request's tokens)
  double total_s = 0;
  double total_tokens_per_s = 0;  // new tokens of all requests / wall time
  int32_t peak_kv_blocks_used = 0;  // paged: blocks actually held at the busiest step
  // Mean per engine step during the decode phase (EngineMetrics): host work before the
  // forward, launching it, waiting for its result, host work after it.
  double step_schedule_ms = 0, step_launch_ms = 0, step_wait_ms = 0, step_output_ms = 0;
  // The decode phase's engine steps, tokens, and speculation counters (EngineMetrics).
  int64_t decode_steps = 0, decode_tokens = 0;
  int64_t overlapped_steps = 0;  // of decode_steps, launched before the previous step's ids were read
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  int64_t spec_quiet_steps = 0;  // adaptive: steps that skipped the per-sequence policy
};

ThroughputResult run_throughput(Engine& engine, const ThroughputParams& p);

}  // namespace tf::bench

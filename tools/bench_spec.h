// `twofold bench --spec ...`: speculative decoding against plain decoding on one engine (the
// modes switch between runs: plain, fixed k, adaptive), over batch sizes, on a prompt set.
#pragma once

#include <string>
#include <vector>

#include "tools/commands.h"

namespace tf::cli {

struct SpecBenchArgs {
  ModelArgs model;
  SpecArgs spec;
  std::vector<int> batches;
  int gen_len = 128;
  int max_batch_tokens = 512;
  int64_t kv_memory_mb = 2048;
  std::string prompts_file;  // JSONL, {"prompt": "..."} per line
  int reps = 3;              // runs of each mode per batch size, interleaved
  bool json = false;
};

int run_spec_bench(const SpecBenchArgs& a);

}  // namespace tf::cli

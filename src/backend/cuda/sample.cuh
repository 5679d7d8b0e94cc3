// Sampling where the logits live: greedy argmax per row, so a decode step copies token ids
// (4 bytes per sequence) to the host instead of rows of n_vocab F32 logits.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tf::cuda {

// ids[r] = argmax_j logits[r * n_vocab + j], ties to the lowest j; NaN never wins (a row of
// NaN gives 0).
void launch_argmax_rows(const float* logits, int64_t rows, int64_t n_vocab, int32_t* ids, cudaStream_t stream);

// One row's sampling parameters (temperature 0: greedy) and its uniform in [0, 1).
struct SampleRowArgs {
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float u = 0.0f;
};

// ids[r] = a token of row r drawn with args[r] (sample_topp.cu). Overwrites the logits with
// unnormalised weights. args: device array [rows].
void launch_sample_rows(float* logits, int64_t rows, int64_t n_vocab, const SampleRowArgs* args, int32_t* ids,
                        cudaStream_t stream);

}  // namespace tf::cuda

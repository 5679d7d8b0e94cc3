// Sampling where the logits live: greedy argmax per row, so a decode step copies token ids
// (4 bytes per sequence) to the host instead of rows of n_vocab F32 logits.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tf::cuda {

// ids[r] = argmax_j logits[r * n_vocab + j], ties to the lowest j; NaN never wins (a row of
// NaN gives 0).
void launch_argmax_rows(const float* logits, int64_t rows, int64_t n_vocab, int32_t* ids, cudaStream_t stream);

}  // namespace tf::cuda

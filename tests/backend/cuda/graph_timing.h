// Timing a CUDA graph's replays, for the device micro-benchmarks (bench_read_floor,
// bench_layer_stream): what `record(stream)` launches is captured once, replayed `warm_ups`
// times, then timed over `reps` replays with events.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"

namespace tf {

// Mean microseconds a replay.
template <typename Record>
double graph_replay_us(Record&& record, int reps, int warm_ups = 1) {
  cudaStream_t st;
  TF_CUDA_CHECK(cudaStreamCreate(&st));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  TF_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  record(st);
  TF_CUDA_CHECK(cudaStreamEndCapture(st, &g));
  TF_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < warm_ups; ++i) TF_CUDA_CHECK(cudaGraphLaunch(ge, st));
  TF_CUDA_CHECK(cudaStreamSynchronize(st));
  cudaEvent_t a, b;
  TF_CUDA_CHECK(cudaEventCreate(&a));
  TF_CUDA_CHECK(cudaEventCreate(&b));
  TF_CUDA_CHECK(cudaEventRecord(a, st));
  for (int i = 0; i < reps; ++i) TF_CUDA_CHECK(cudaGraphLaunch(ge, st));
  TF_CUDA_CHECK(cudaEventRecord(b, st));
  TF_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  TF_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  TF_CUDA_CHECK(cudaEventDestroy(a));
  TF_CUDA_CHECK(cudaEventDestroy(b));
  TF_CUDA_CHECK(cudaGraphExecDestroy(ge));
  TF_CUDA_CHECK(cudaGraphDestroy(g));
  TF_CUDA_CHECK(cudaStreamDestroy(st));
  return double(ms) * 1000.0 / reps;
}

}  // namespace tf

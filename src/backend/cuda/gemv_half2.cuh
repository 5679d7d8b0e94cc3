// The W4 and W8 decode GEMV on packed half2 arithmetic (gemv_half2.cu): 1..kGemvHalf2MaxRows
// input rows, the fusions of gemv.cuh. Among the kernels CudaBackend::launch_quant_gemv times
// per shape and fusion; the tests and bench_quant_gemm launch it directly.
//
// Rounding: each input row is scaled by a power of two (exact) and rounded to F16 (11 bits
// against BF16's 8: exact for every BF16 value in F16's normal range, which the scaling puts
// the row's largest values in); the products code * x are summed in F16 over each 16-byte
// chunk of codes (2^-11 relative per addition), then in FP32 (W4 times the group scale, W8
// times the row scale after the sum); the outputs round as gemv.cuh says.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/gemv.cuh"

namespace tf::cuda {

constexpr int64_t kGemvHalf2MaxRows = 4;

// Launch variants, all timed by the backend: output features per warp (1, or 2 with Store /
// AddTo: SwiGLU and RoPE/KV have their own layout), and persistent blocks (as many as fit on
// the device, each looping over groups of features, so a block stages its input rows once for
// more weight rows; not with RoPE/KV). `split` > 0 takes the k-split kernel instead
// (gemv_split.cu: one input row, held in registers), which ignores the other two: `split` 2
// keeps a ring of weight rows in registers, 2 16-byte chunks a lane; `split` 1 with `stages`
// 8 streams them through a shared-memory ring of 8 rows per warp, in at most `blocks_per_sm`
// blocks an SM (0: as many as fit), so each warp streams more rows. `imma` takes the
// integer tensor-core kernel instead (gemv_imma.cu: W4 in groups of 128, 1..4 input rows),
// which ignores the others.
struct Half2Options {
  int features_per_warp = 1;
  bool persistent = false;
  int split = 0;
  int stages = 0;
  int blocks_per_sm = 0;
  bool imma = false;
};

// Every launch variant, in the order the backend times them and the tests run them: the
// warp-per-feature kernel (features a warp, persistent), the register ring, the shared-memory
// ring (chunks a lane, blocks an SM), the integer tensor-core kernel. Measured on the H200 (docs/PERF.md), each wins some
// shape or fusion.
constexpr Half2Options kHalf2AllOptions[] = {
    {1, false},          {2, false},          {1, true},           {2, true},          {1, false, 2},
    {1, false, 1, 8},    {1, false, 1, 8, 2}, {1, false, 1, 8, 4}, {1, false, 2, 8, 4}, {1, false, 2, 8, 8},
    {1, false, 0, 0, 0, true}};

// True when launch_gemv_half2 runs `g` with `f` and `o`: W4 or W8 weights, rows <=
// kGemvHalf2MaxRows (1 with `split`), gemv_supported(g, f), the staged input rows fit in
// shared memory (160 KB; with `split`: at most 16 warps cover k, and the ring's conditions of
// gemv_split.cu), and `o` as above.
bool gemv_half2_supported(const GemmArgs& g, const GemvFusion& f = {}, const Half2Options& o = {});
void launch_gemv_half2(const GemmArgs& g, cudaStream_t stream, const GemvFusion& f = {}, const Half2Options& o = {});

// The k-split kernel (gemv_split.cu), which the two above route `split` > 0 to.
bool gemv_split_supported(const GemmArgs& g, const GemvFusion& f, int split, int stages);
void launch_gemv_split(const GemmArgs& g, cudaStream_t stream, const GemvFusion& f, int split, int stages,
                       int blocks_per_sm = 0);

// The integer tensor-core kernel (gemv_imma.cu), which the two above route `imma` to.
bool gemv_imma_supported(const GemmArgs& g, const GemvFusion& f);
void launch_gemv_imma(const GemmArgs& g, cudaStream_t stream, const GemvFusion& f);

}  // namespace tf::cuda

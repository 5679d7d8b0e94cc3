#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/elementwise.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 256;

// One block per token row; threads stride over the row, 16 bytes at a time when rows allow.
__global__ void embedding_kernel(const bf16* table, const int32_t* token_ids, int64_t d, bf16* out) {
  pdl_begin();
  const int64_t it = blockIdx.x;
  const bf16* src = table + int64_t(token_ids[it]) * d;
  if (d % 8 == 0) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* o = reinterpret_cast<uint4*>(out + it * d);
    for (int64_t i = threadIdx.x; i < d / 8; i += blockDim.x) o[i] = s[i];
    return;
  }
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) out[it * d + i] = src[i];
}

// One block per token row; each thread dequantizes one byte (two neighbouring elements) at a
// time. Every read is inside the token's row of q, scales and zeros.
__global__ void embedding_w4_kernel(const uint8_t* q, const uint16_t* scales, const uint8_t* zeros, int64_t group,
                                    const int32_t* token_ids, int64_t d, bf16* out) {
  pdl_begin();
  const int64_t it = blockIdx.x, row = token_ids[it], n_groups = d / group;
  const uint8_t* qr = q + row * (d / 2);
  const uint16_t* sr = scales + row * n_groups;
  const uint8_t* zr = zeros + row * n_groups;
  for (int64_t i = threadIdx.x; i < d / 2; i += blockDim.x) {
    const uint8_t byte = qr[i];
    const int64_t g = 2 * i / group;  // 2i and 2i + 1 share a group (group is even)
    const float s = __half2float(__ushort_as_half(sr[g]));
    const int z = zr[g];
    out[it * d + 2 * i] = from_float<bf16>(s * float(int(byte & 15) - z));
    out[it * d + 2 * i + 1] = from_float<bf16>(s * float(int(byte >> 4) - z));
  }
}

// Grid-stride over all rows * d_ff outputs: act(gate) * up with act = silu (kGelu false) or
// gelu_tanh (kGelu true).
template <bool kGelu>
__global__ void gated_kernel(const bf16* gate_up, int64_t rows, int64_t d_ff, bf16* out) {
  pdl_begin();
  const int64_t n = rows * d_ff;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / d_ff, j = i % d_ff;
    const float g = to_float(gate_up[r * 2 * d_ff + j]), u = to_float(gate_up[r * 2 * d_ff + d_ff + j]);
    out[i] = from_float<bf16>((kGelu ? gelu_tanh(g) : silu(g)) * u);
  }
}

// x *= s elementwise, rounded once.
__global__ void scale_kernel(bf16* x, int64_t n, float s) {
  pdl_begin();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = from_float<bf16>(to_float(x[i]) * s);
}

// Unfused SwiGLU (fusion off): silu(gate) rounded to out, then out * up rounded again.
__global__ void silu_kernel(const bf16* gate_up, int64_t rows, int64_t d_ff, bf16* out) {
  const int64_t n = rows * d_ff;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = to_float(gate_up[i / d_ff * 2 * d_ff + i % d_ff]);
    out[i] = from_float<bf16>(silu(g));
  }
}
__global__ void mul_up_kernel(const bf16* gate_up, int64_t rows, int64_t d_ff, bf16* out) {
  const int64_t n = rows * d_ff;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_float<bf16>(to_float(out[i]) * to_float(gate_up[i / d_ff * 2 * d_ff + d_ff + i % d_ff]));
}

// x += y elementwise, rounded once.
__global__ void add_kernel(bf16* x, const bf16* y, int64_t n) {
  pdl_begin();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = from_float<bf16>(to_float(x[i]) + to_float(y[i]));
}

// One block per output row, copying 16-bit units.
__global__ void gather_rows_kernel(const uint16_t* x, const int32_t* rows, int64_t row_units, uint16_t* out) {
  pdl_begin();
  const int64_t i = blockIdx.x;
  const uint16_t* src = x + int64_t(rows[i]) * row_units;
  for (int64_t j = threadIdx.x; j < row_units; j += blockDim.x) out[i * row_units + j] = src[j];
}

int grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return int(blocks < 65536 ? blocks : 65536);
}

}  // namespace

void launch_embedding(const bf16* table, const int32_t* token_ids, int64_t n_tokens, int64_t d, bf16* out,
                      cudaStream_t stream) {
  if (n_tokens == 0) return;
  launch_pdl(embedding_kernel, dim3(unsigned(n_tokens)), dim3(kThreads), 0, stream, table, token_ids, d, out);
  TF_CUDA_CHECK_LAUNCH("embedding_kernel");
}

void launch_embedding_w4(const uint8_t* q, const uint16_t* scales, const uint8_t* zeros, int64_t group,
                         const int32_t* token_ids, int64_t n_tokens, int64_t d, bf16* out, cudaStream_t stream) {
  if (n_tokens == 0) return;
  launch_pdl(embedding_w4_kernel, dim3(unsigned(n_tokens)), dim3(kThreads), 0, stream, q, scales, zeros, group,
             token_ids, d, out);
  TF_CUDA_CHECK_LAUNCH("embedding_w4_kernel");
}

void launch_swiglu(const bf16* gate_up, int64_t rows, int64_t d_ff, bf16* out, cudaStream_t stream) {
  if (rows * d_ff == 0) return;
  launch_pdl(gated_kernel<false>, dim3(grid_for(rows * d_ff)), dim3(kThreads), 0, stream, gate_up, rows, d_ff, out);
  TF_CUDA_CHECK_LAUNCH("gated_kernel (silu)");
}

void launch_geglu(const bf16* gate_up, int64_t rows, int64_t d_ff, bf16* out, cudaStream_t stream) {
  if (rows * d_ff == 0) return;
  launch_pdl(gated_kernel<true>, dim3(grid_for(rows * d_ff)), dim3(kThreads), 0, stream, gate_up, rows, d_ff, out);
  TF_CUDA_CHECK_LAUNCH("gated_kernel (gelu_tanh)");
}

void launch_scale(bf16* x, int64_t n, float s, cudaStream_t stream) {
  if (n == 0) return;
  launch_pdl(scale_kernel, dim3(grid_for(n)), dim3(kThreads), 0, stream, x, n, s);
  TF_CUDA_CHECK_LAUNCH("scale_kernel");
}

void launch_swiglu_unfused(const bf16* gate_up, int64_t rows, int64_t d_ff, bf16* out, cudaStream_t stream) {
  if (rows * d_ff == 0) return;
  silu_kernel<<<grid_for(rows * d_ff), kThreads, 0, stream>>>(gate_up, rows, d_ff, out);
  mul_up_kernel<<<grid_for(rows * d_ff), kThreads, 0, stream>>>(gate_up, rows, d_ff, out);
  TF_CUDA_CHECK_LAUNCH("silu_kernel / mul_up_kernel");
}

void launch_add(bf16* x, const bf16* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch_pdl(add_kernel, dim3(grid_for(n)), dim3(kThreads), 0, stream, x, y, n);
  TF_CUDA_CHECK_LAUNCH("add_kernel");
}

void launch_gather_rows(const void* x, const int32_t* rows, int64_t n_out, int64_t row_bytes, void* out,
                        cudaStream_t stream) {
  if (n_out == 0) return;
  launch_pdl(gather_rows_kernel, dim3(unsigned(n_out)), dim3(kThreads), 0, stream, static_cast<const uint16_t*>(x),
             rows, row_bytes / 2, static_cast<uint16_t*>(out));
  TF_CUDA_CHECK_LAUNCH("gather_rows_kernel");
}

}  // namespace tf::cuda

// Small-batch matmul for decode: memory-bound, so the only goal is to stream the weight
// matrix at full bandwidth.
//
// One warp per output feature j (8 warps per block): lane l reads 16-byte chunks l, l + 32,
// ... of row j of w (8 BF16 each, so a warp reads 512 contiguous bytes per step: coalesced),
// four chunks in flight before any arithmetic, and multiplies them with the same chunks of
// each of the R input rows (x is small and shared by all warps: it stays in L1/L2). FP32
// accumulators, one warp reduction per input row at the end, bias added in FP32, one
// rounding on the store. Weights are read with L1::no_allocate: read once, they would only
// evict x from L1.
//
// Launched with programmatic dependent launch: each warp issues its first four weight loads
// before pdl_begin(), so the weight stream starts while the previous op is still finishing.
//
// Fusions (GemvFusion), each saving one kernel and one round trip of the activations:
//   norm prologue: every block computes the inverse RMS of the R input rows itself (they are
//     a few KB, read from L2) and keeps the normalized rows in shared memory;
//   AddTo epilogue: the warp owning output j adds it into the residual out[:, j] (each
//     element is read and written by that warp alone, so in place is race-free);
//   Swiglu epilogue: warp j streams two weight rows, gate j and up j, and writes
//     silu(gate) * up, so the [rows, 2 d_ff] product never exists;
//   RopeKv epilogue (the QKV projection): a block's 8 warps own the RoPE pairs (i, i + d/2)
//     of 4 consecutive i of one head (warps w and w + 4), so after the reduction the block
//     rotates its pairs (shared memory) and writes q/k/v to the qkv rows and k/v to the
//     paged pool, as the separate rope_kv kernel would (rope_kv.cu, fused variant).
//
// Quantized weights (W8, W4, FP8) run the tensor-core kernel (quant_mma.cuh), which takes the
// same fusions (RopeKv with head_dim a multiple of 16): dequantizing and multiplying on the CUDA cores costs several
// instructions per weight and input row, more than the memory time of a 1-byte or half-byte
// weight. The same kernel as BF16 with another weight format (gemv_quant.cu: a lane's
// 16-byte chunk then holds 16 or 32 weights, dequantized in registers) serves the rest, and
// W8/FP8 at one row (launch_gemv says why).
#include "backend/cuda/gemv_kernel.cuh"
#include "backend/cuda/quant_gemm.cuh"

namespace tf::cuda {

using namespace gemv_detail;

bool gemv_supported(const GemmArgs& g, const GemvFusion& f) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (g.rows < 1 || g.rows > kGemvMaxRows || g.k % 8 != 0 || !aligned(g.x)) return false;
  switch (g.wq.dtype) {
    case DType::BF16:
      if (!aligned(g.w)) return false;
      break;
    case DType::W8:
    case DType::FP8:  // 16 weights per 16-byte chunk
      if (g.k % 16 != 0 || !aligned(g.wq.q) || !g.wq.scales) return false;
      break;
    case DType::W4:  // 32 weights per chunk, all in one group
      if (g.k % 32 != 0 || !aligned(g.wq.q) || !g.wq.scales || !g.wq.zeros || g.wq.group_size <= 0 ||
          g.wq.group_size % 32 != 0 || g.k % g.wq.group_size != 0)
        return false;
      break;
    default: return false;
  }
  if (f.epilogue != GemvEpilogue::Store && g.out_f32) return false;
  if (f.epilogue == GemvEpilogue::Swiglu && g.m % 2 != 0) return false;
  if (f.epilogue == GemvEpilogue::RopeKv) {
    const RopeKvArgs& r = f.rope;
    const bool pool_ok = r.kv_dtype == DType::BF16 || r.kv_dtype == DType::F16 || r.kv_dtype == DType::F32;
    if (!pool_ok || !r.plain_rope() || r.head_dim <= 0 || r.head_dim % 8 != 0 || r.n_heads <= 0 || r.n_kv_heads <= 0 ||
        g.m != (r.n_heads + 2 * r.n_kv_heads) * r.head_dim || r.batch.n_tokens != g.rows)
      return false;
  }
  if (f.norm_w)
    return g.rows <= kGemvNormMaxRows && g.rows * g.k * 2 <= kGemvNormMaxBytes && aligned(f.norm_w) &&
           f.epilogue != GemvEpilogue::AddTo && !g.out_f32;
  return true;
}

// W8 and FP8 at one row stay on the CUDA cores: at one row their dequantization is cheap
// enough that the tensor-core kernel's tiles and reduction cost more than they save (the H200:
// 30 against 37 us on 28672 x 4096, 18.5 against 20 on 4096 x 14336); W4 and more rows take
// the tensor cores.
void launch_gemv(const GemmArgs& g, cudaStream_t stream, const GemvFusion& f) {
  if (g.quantized() && (g.rows > 1 || g.wq.dtype == DType::W4) && quant_mma_supported(g, f)) {
    launch_quant_mma(g, stream, f);
    return;
  }
  launch_gemv_simt(g, stream, f);
}

void launch_gemv_simt(const GemmArgs& g, cudaStream_t stream, const GemvFusion& f) {
  if (g.m == 0) return;
  switch (g.wq.dtype) {
    case DType::W8: launch_gemv_w8(g, f, stream); break;
    case DType::W4: launch_gemv_w4(g, f, stream); break;
    case DType::FP8: launch_gemv_fp8(g, f, stream); break;
    default: launch_format<WeightBf16>(g, f, stream); break;
  }
}

}  // namespace tf::cuda

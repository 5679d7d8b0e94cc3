// The CPU backend's kernels, as one table of function pointers per instruction-set level
// (isa.h). Kernels are single-threaded and work on a slice (weight row blocks, one
// attention item, one row): the backend's ops split the work and hand slices to the
// threads, so nothing here knows about threads, models or requests.
//
// Every .cpp in this folder is compiled once per level into namespace tf::cpu::TF_CPU_ISA_NS
// (src/backend/CMakeLists.txt); table.cpp fills that level's KernelTable and isa.cpp picks
// the table.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/isa.h"
#include "core/batch.h"
#include "core/dtype.h"

namespace tf::cpu {

// ---- float matmul: out[n, m] = x[n, k] @ w[m, k]^T (+ bias) --------------------------------
struct MatmulArgs {
  const float* x = nullptr;     // [n, k]
  const void* w = nullptr;      // [m, k] of w_dtype: F32, BF16 or F16
  DType w_dtype = DType::F32;
  // gemm_blocks only: a quantized weight (W8, W4, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K; k a
  // multiple of 32 and of the blocks) dequantized chunk by chunk; w is then wq->data.
  const TensorView* wq = nullptr;
  const float* bias = nullptr;  // [m] or null
  float* out = nullptr;         // [n, m]
  int64_t n = 0, k = 0, m = 0;
};

// The BF16 GEMM on AMX tiles (kernels/gemm_amx.cpp): tiles of 16 tokens, blocks of 32 weight
// rows, k walked in steps of 32 (so k and m must be multiples of 32 and n at least one tile).
constexpr int64_t kAmxTileTokens = 16, kAmxBlockRows = 32, kAmxKStep = 32;
inline bool amx_gemm_shape(int64_t n, int64_t k, int64_t m) {
  return n >= kAmxTileTokens && k % kAmxKStep == 0 && m % kAmxBlockRows == 0;
}

// ---- quantized matmul (kernels/qmatmul.h has the formats' block math) ------------------------
// Activations quantized for integer dot products: each row of x cut into blocks of 32 and
// rounded to integers Q of a per-block step d, in one of two precisions:
//   8-bit:  d = max|x| / 127,           Q = round(x / d) in -127..127 (llama.cpp's scheme)
//   16-bit: d = max|x| / (127 * 254),   Q = round(x / d) in -32258..32258, held as two int8
//           planes Q = 254 * q + q2 (q, q2 in -127..127): the kernels take two byte dot
//           products per block, dot(w, Q) = 254 * dot(w, q) + dot(w, q2).
// The dot-product instructions sum 4 byte products per int32 lane, 8 lanes per block, and per
// lane the kernels need the block's d (dl) and the sum of the lane's 4 values of Q (xs, for
// the formats' zero points and minimums); per block, d (db) and d * sum(Q) (sb). For W4 the 32
// values of a block are stored evens first, then odds (the order of W4's low and high
// nibbles). 8-bit rounding errs by up to max|x| / 254 per element, which a block holding an
// outlier channel turns into a large error on its other 31 values: SmolLM2-135M's logits move
// by 0.03-0.08 relative L2 that way (llama.cpp's too); 16-bit rounding errs 254 times less.
struct QuantizedActs {
  const int8_t* q = nullptr;   // [n, k]
  const int8_t* q2 = nullptr;  // [n, k] the second plane (16-bit), or null (8-bit)
  const float* dl = nullptr;   // [n, k / 4]
  const float* xs = nullptr;   // [n, k / 4]
  const float* db = nullptr;   // [n, k / 32]
  const float* sb = nullptr;   // [n, k / 32]
  int64_t n = 0, k = 0;
};
// Per-row output of quantize_row: q [k], q2 [k] (null: 8-bit), dl [k / 4], xs [k / 4],
// db [k / 32], sb [k / 32].
struct QuantizedRow {
  int8_t* q;
  int8_t* q2;
  float *dl, *xs, *db, *sb;
};
struct QMatmulArgs {
  QuantizedActs x;
  const TensorView* w = nullptr;  // [m, k] in a quantized dtype (data, scales, zeros)
  const void* packed = nullptr;   // w repacked as U4x4 or U8x4 (backend/cpu/quant_pack.h), or null
  const float* bias = nullptr;    // [m] or null
  float* out = nullptr;           // [n, m]
  int64_t m = 0;
};
// Formats with integer kernels, indexing KernelTable::qmatmul_blocks.
enum class QFormat : uint8_t { W8, W4, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K, kCount };

// ---- attention ---------------------------------------------------------------------------
// One layer's K or V pool: rows [n_blocks * n_kv_heads * block_size, head_dim] of `data`,
// plus one F32 scale per row when the storage is I8 or FP8.
struct KvPool {
  const TensorView* data = nullptr;
  const TensorView* scales = nullptr;
};
// Work item: tokens [t0, t1) of sequence `seq` against KV head `kvh`.
struct AttendItem {
  int32_t seq = 0, t0 = 0, t1 = 0;
  int32_t kvh = 0;
};
struct AttendArgs {
  const Batch* batch = nullptr;
  const int32_t* block_tables = nullptr;  // [n_seqs, max_blocks] of the layer's KV group
  AttentionParams p;
  KvPool k_pool, v_pool;
  const float* qkv = nullptr;  // [n_tokens, (n_heads + 2 * n_kv_heads) * head_dim]
  float* out = nullptr;        // [n_tokens, n_heads * head_dim]
  int64_t block_size = 0, n_kv_heads = 0;
};
// Per-thread scratch of the attention kernel for items of up to max_rows rows (tokens x
// query heads of a group) of head_dim.
struct AttendScratch {
  static constexpr int kTileKeys = 32;  // keys per tile: a K/V tile of 32 x head_dim stays in L1/L2
  int max_rows = 0;
  int64_t head_dim = 0;
  std::vector<float> acc, s, kbuf, vbuf, m, l;
  std::vector<const float*> q, krow, vrow;
  std::vector<float*> out, acc_rows;  // acc_rows[r] = acc + r * head_dim
  std::vector<const float*> p_rows;   // p_rows[r] = s + r * kTileKeys
  std::vector<int32_t> first, last;
  AttendScratch(int max_rows, int64_t head_dim);
};

struct KernelTable {
  Isa isa = Isa::Baseline;

  // Float matmul for few tokens (decode; kernels/matmul.cpp): weight rows in blocks of
  // matmul_block_rows, blocks [b0, b1) for all n tokens, with a per-thread scratch of
  // matmul_scratch_floats(n, k) floats.
  int64_t matmul_block_rows = 0;
  int64_t (*matmul_scratch_floats)(int64_t n, int64_t k) = nullptr;
  void (*matmul_blocks)(const MatmulArgs& a, int64_t b0, int64_t b1, float* scratch) = nullptr;

  // Float GEMM for n >= gemm_tile_tokens (prefill; kernels/gemm.cpp): x transposed once into
  // token tiles, xt [ceil(n / gemm_tile_tokens), k, gemm_tile_tokens] (gemm_pack_x writes
  // tiles [tile0, tile1)), then weight rows in blocks of gemm_block_rows, blocks [b0, b1)
  // for all tokens, with a per-thread scratch of gemm_scratch_floats(n) floats.
  int64_t gemm_tile_tokens = 0;
  int64_t gemm_block_rows = 0;
  int64_t (*gemm_scratch_floats)(int64_t n) = nullptr;
  void (*gemm_pack_x)(const float* x, int64_t n, int64_t k, int64_t tile0, int64_t tile1, float* xt) = nullptr;
  void (*gemm_blocks)(const MatmulArgs& a, const float* xt, int64_t b0, int64_t b1, float* scratch) = nullptr;
  // Whether prefill on 8-bit (W8, Q8_0) / 4-bit (W4, Q4_0, Q4_1, Q4_K) weights with 16-bit
  // activations runs this float GEMM on the weights dequantized chunk by chunk
  // (MatmulArgs::wq) rather than the integer GEMM, whose 16-bit activations take two byte
  // products a block: measured per level (docs/PERF.md, "Issue 17: prefill on dequantized
  // weights below VNNI"): the float GEMM wins for both widths below AVX-512 and for 8-bit
  // weights on AVX-512 without VNNI; VNNI's byte products win for both. (Q5_K and Q6_K
  // prefill takes the float GEMM at every level: CpuBackend::prefill_dequantizes.)
  bool prefill_dequant_8bit = false, prefill_dequant_4bit = false;
  // BF16-weight GEMM on AMX tiles (kernels/gemm_amx.cpp; null below AVX-512 VNNI; callable
  // only where amx_tiles_permitted(), on shapes amx_gemm_shape takes): x rounded to BF16 into
  // tiles of kAmxTileTokens tokens (gemm_amx_pack_x writes tiles [tile0, tile1), k *
  // kAmxTileTokens uint16 each), then blocks [b0, b1) of kAmxBlockRows weight rows against all
  // tokens.
  void (*gemm_amx_pack_x)(const float* x, int64_t n, int64_t k, int64_t tile0, int64_t tile1, uint16_t* xv) = nullptr;
  void (*gemm_amx_blocks)(const MatmulArgs& a, const uint16_t* xv, int64_t b0, int64_t b1) = nullptr;

  // Quantized matmul: activations quantized row by row (x [k], k % 32 == 0), then weight row
  // blocks [b0, b1) of qmatmul_block_rows rows against all tokens; null where a format has
  // no kernel at this level.
  void (*quantize_row)(const float* x, int64_t k, bool w4_order, const QuantizedRow& out) = nullptr;
  int64_t qmatmul_block_rows = 0;
  void (*qmatmul_blocks[size_t(QFormat::kCount)])(const QMatmulArgs& a, int64_t b0, int64_t b1) = {};
  // 4-bit weights repacked as U4x4 (a.packed; activations in element order, also for W4):
  // groups [g0, g1) of 4 rows; null below AVX2.
  void (*qmatmul_u4x4)(const QMatmulArgs& a, int64_t g0, int64_t g1) = nullptr;
  // 8-bit weights repacked as U8x4 (a.packed: Q8_0, W8): groups [g0, g1) of 4 rows; null
  // below AVX2.
  void (*qmatmul_u8x4)(const QMatmulArgs& a, int64_t g0, int64_t g1) = nullptr;

  // Integer GEMM for prefill over the repacked weights (kernels/qgemm_packed.cpp; null below
  // AVX2): the quantized activations copied into tiles of qgemm_tokens tokens
  // (qgemm_pack_acts writes tiles [tile0, tile1), qgemm_tile_bytes each), then strips
  // [s0, s1) of qgemm_rows weight rows against all tokens, each strip unpacked into a
  // per-thread scratch of qgemm_strip_bytes.
  int64_t qgemm_rows = 0, qgemm_tokens = 0;
  int64_t (*qgemm_strip_bytes)(int64_t k) = nullptr;
  int64_t (*qgemm_tile_bytes)(int64_t k, bool wide) = nullptr;
  void (*qgemm_pack_acts)(const QuantizedActs& x, int64_t tile0, int64_t tile1, uint8_t* out) = nullptr;
  void (*qgemm)(const QMatmulArgs& a, const uint8_t* acts, int64_t s0, int64_t s1, uint8_t* scratch) = nullptr;
  // The formats whose repacked copies qgemm reads: not Q5_K and Q6_K (their prefill
  // dequantizes, and their copies serve few-token tiles of any n).
  static constexpr bool qgemm_covers(QFormat f) { return f != QFormat::Q5_K && f != QFormat::Q6_K; }

  // Paged attention of one item (attention.cpp describes the algorithm).
  void (*attend_item)(const AttendArgs& a, const AttendItem& item, AttendScratch& scratch) = nullptr;

  // Rows: out = x / sqrt(mean(x^2) + eps) * w;  out = silu(gate) * up;  dst = widen(src).
  void (*rms_norm_row)(const float* x, const float* w, int64_t d, float eps, float* out) = nullptr;
  void (*swiglu_row)(const float* gate, const float* up, int64_t d, float* out) = nullptr;
  void (*widen_row)(const void* src, DType dtype, int64_t n, float* dst) = nullptr;
};

// The table of active_isa() (looked up once per call: a few nanoseconds).
const KernelTable& kernels();
// The table of one level; it must be in supported_isas().
const KernelTable& kernels_for(Isa isa);

}  // namespace tf::cpu

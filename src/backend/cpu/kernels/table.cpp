// The KernelTable of one ISA level (this file is compiled once per level, see kernels.h).
#include "backend/cpu/kernels/kernels.h"

namespace tf::cpu::TF_CPU_ISA_NS {

int64_t matmul_block_rows();
int64_t matmul_scratch_floats(int64_t n, int64_t k);
void matmul_blocks(const MatmulArgs& a, int64_t b0, int64_t b1, float* scratch);
int64_t gemm_tile_tokens();
int64_t gemm_block_rows();
int64_t gemm_scratch_floats(int64_t n);
void gemm_pack_x(const float* x, int64_t n, int64_t k, int64_t tile0, int64_t tile1, float* xt);
void gemm_blocks(const MatmulArgs& a, const float* xt, int64_t b0, int64_t b1, float* scratch);
void gemm_amx_pack_x(const float* x, int64_t n, int64_t k, int64_t tile0, int64_t tile1, uint16_t* xv);
void gemm_amx_blocks(const MatmulArgs& a, const uint16_t* xv, int64_t b0, int64_t b1);
int64_t qmatmul_block_rows();
void quantize_row(const float* x, int64_t k, bool w4_order, const QuantizedRow& out);
void qmatmul_u4x4(const QMatmulArgs& a, int64_t g0, int64_t g1);
void qmatmul_u8x4(const QMatmulArgs& a, int64_t g0, int64_t g1);
void qmatmul_w8(const QMatmulArgs& a, int64_t b0, int64_t b1);
void qmatmul_w4(const QMatmulArgs& a, int64_t b0, int64_t b1);
void qmatmul_q8_0(const QMatmulArgs& a, int64_t b0, int64_t b1);
void qmatmul_q4_0(const QMatmulArgs& a, int64_t b0, int64_t b1);
void qmatmul_q4_1(const QMatmulArgs& a, int64_t b0, int64_t b1);
void qmatmul_q4_k(const QMatmulArgs& a, int64_t b0, int64_t b1);
void qmatmul_q5_k(const QMatmulArgs& a, int64_t b0, int64_t b1);
void qmatmul_q6_k(const QMatmulArgs& a, int64_t b0, int64_t b1);
int64_t qgemm_rows();
int64_t qgemm_tokens();
int64_t qgemm_strip_bytes(int64_t k);
int64_t qgemm_tile_bytes(int64_t k, bool wide);
void qgemm_pack_acts(const QuantizedActs& x, int64_t tile0, int64_t tile1, uint8_t* out);
void qgemm(const QMatmulArgs& a, const uint8_t* acts, int64_t s0, int64_t s1, uint8_t* scratch);
void attend_item(const AttendArgs& a, const AttendItem& item, AttendScratch& scratch);
void rms_norm_row(const float* x, const float* w, int64_t d, float eps, float* out);
void swiglu_row(const float* gate, const float* up, int64_t d, float* out);
void widen_row(const void* src, DType dtype, int64_t n, float* dst);

namespace {

KernelTable make_table() {
  KernelTable t;
  t.isa = Isa::TF_CPU_ISA_ENUM;
  t.matmul_block_rows = matmul_block_rows();
  t.matmul_scratch_floats = matmul_scratch_floats;
  t.matmul_blocks = matmul_blocks;
  t.gemm_tile_tokens = gemm_tile_tokens();
  t.gemm_block_rows = gemm_block_rows();
  t.gemm_scratch_floats = gemm_scratch_floats;
  t.gemm_pack_x = gemm_pack_x;
  t.gemm_blocks = gemm_blocks;
#if !defined(__AVX512VNNI__)
  t.prefill_dequant_8bit = true;
#endif
#if !defined(__AVX512BW__)
  t.prefill_dequant_4bit = true;
#endif
#if defined(__AVX512VNNI__)
  t.gemm_amx_pack_x = gemm_amx_pack_x;
  t.gemm_amx_blocks = gemm_amx_blocks;
#endif
  t.quantize_row = quantize_row;
  t.qmatmul_block_rows = qmatmul_block_rows();
  t.qmatmul_blocks[size_t(QFormat::W8)] = qmatmul_w8;
  t.qmatmul_blocks[size_t(QFormat::W4)] = qmatmul_w4;
  t.qmatmul_blocks[size_t(QFormat::Q8_0)] = qmatmul_q8_0;
  t.qmatmul_blocks[size_t(QFormat::Q4_0)] = qmatmul_q4_0;
  t.qmatmul_blocks[size_t(QFormat::Q4_1)] = qmatmul_q4_1;
  t.qmatmul_blocks[size_t(QFormat::Q4_K)] = qmatmul_q4_k;
  t.qmatmul_blocks[size_t(QFormat::Q5_K)] = qmatmul_q5_k;
  t.qmatmul_blocks[size_t(QFormat::Q6_K)] = qmatmul_q6_k;
#if defined(__AVX2__)
  t.qmatmul_u4x4 = qmatmul_u4x4;
  t.qmatmul_u8x4 = qmatmul_u8x4;
  t.qgemm_rows = qgemm_rows();
  t.qgemm_tokens = qgemm_tokens();
  t.qgemm_strip_bytes = qgemm_strip_bytes;
  t.qgemm_tile_bytes = qgemm_tile_bytes;
  t.qgemm_pack_acts = qgemm_pack_acts;
  t.qgemm = qgemm;
#endif
  t.attend_item = attend_item;
  t.rms_norm_row = rms_norm_row;
  t.swiglu_row = swiglu_row;
  t.widen_row = widen_row;
  return t;
}

}  // namespace

const KernelTable& table() {
  static const KernelTable t = make_table();
  return t;
}

}  // namespace tf::cpu::TF_CPU_ISA_NS

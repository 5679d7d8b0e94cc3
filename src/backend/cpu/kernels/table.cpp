// The KernelTable of one ISA level (this file is compiled once per level, see kernels.h).
#include "backend/cpu/kernels/kernels.h"

namespace tf::cpu::TF_CPU_ISA_NS {

int64_t matmul_block_rows();
void matmul_blocks(const MatmulArgs& a, int64_t b0, int64_t b1, float* scratch);
void attend_item(const AttendArgs& a, const AttendItem& item, AttendScratch& scratch);
void rms_norm_row(const float* x, const float* w, int64_t d, float eps, float* out);
void swiglu_row(const float* gate, const float* up, int64_t d, float* out);
void widen_row(const void* src, DType dtype, int64_t n, float* dst);

namespace {

KernelTable make_table() {
  KernelTable t;
  t.isa = Isa::TF_CPU_ISA_ENUM;
  t.matmul_block_rows = matmul_block_rows();
  t.matmul_blocks = matmul_blocks;
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

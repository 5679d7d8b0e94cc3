// The fast CPU backend: kernels compiled for several ISA levels with the best one the CPU
// has picked at run time (isa.h, kernels/kernels.h), run by a persistent worker pool
// (core/thread_pool.h) that each op splits its work for once. Weights are read in their
// stored dtype (BF16/F16 widened in registers, so decode reads half the bytes of F32).
#pragma once

#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "backend/cpu/kernels/kernels.h"
#include "backend/host_backend.h"
#include "core/huge_pages.h"
#include "core/thread_pool.h"

namespace tf {

class CpuBackend : public HostBackend {
 public:
  // Resolves the ISA level now, so a bad TF_CPU_ISA fails at startup. Of the options it reads
  // int8_activations (the precision of the integer kernels' activations), bf16_activations
  // (the BF16-weight GEMM on AMX tiles) and huge_pages (upload).
  explicit CpuBackend(const BackendOptions& opt = {});
  void set_options(const BackendOptions& opt) override {
    int8_activations_ = opt.int8_activations;
    bf16_activations_ = opt.bf16_activations;
    huge_pages_ = opt.huge_pages;
  }
  std::string name() const override { return "cpu"; }
  // As HostBackend's, and a Q4_0, Q4_1, W4, Q4_K, Q8_0, W8, Q6_K or Q5_K weight also gets a repacked copy for the
  // integer kernels (quant_pack.h, on huge pages), found again by its data pointer and dropped by
  // release(): memory holding an uploaded weight must not be freed while this backend lives
  // without releasing the view first. With huge_pages, another weight of 2 MiB or more that
  // HostBackend keeps in place, without scale arrays, is returned as a copy on huge pages
  // (BackendOptions::huge_pages).
  TensorView upload(const TensorView& host, DType dtype) override;
  void release(const TensorView& buf) override;
  // Q8_0, Q4_0, Q4_1, Q4_K: the types with integer matmul kernels (matmul_quant_fast).
  bool reads_gguf_block(DType t) const override;
  void embedding(const TensorView& table, const TensorView& out) override;
  void rms_norm(const TensorView& x, const TensorView& w, float eps, const TensorView& out) override;
  void matmul(const TensorView& x, const TensorView& w, const TensorView& bias,
              const TensorView& out) override;
  void rope_kv_write(int layer, const TensorView& qkv, const QkRope& rope, const AttentionParams& p) override;
  void attention(int layer, const TensorView& qkv, const AttentionParams& p,
                 const TensorView& out) override;
  void swiglu(const TensorView& gate_up, const TensorView& out) override;
  void geglu(const TensorView& gate_up, const TensorView& out) override;
  void moe_experts(const TensorView& x, const TensorView& ids, const TensorView& weights, const TensorView& w_gate_up,
                   const TensorView& w_down, const MoeParams& p, const TensorView& out) override;
  void gather_logit_rows(const TensorView& x, const TensorView& out) override;

  // matmul() on a quantized w takes matmul_quant_fast where it covers w, else matmul_dequant.
  //   x [rows, k] F32, w [m, k], bias [m] or empty, out [rows, m] F32
  //
  // out = x @ w^T (+ bias) for a quantized w (W8, W4, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K) on
  // the integer kernels (activations quantized per block of 32 to 16 bits, or 8 with
  // int8_activations; matmul_quant_fast.cpp), or for prefill with 16-bit activations where
  // prefill_dequantizes says so, on the float GEMM over the weights dequantized in chunks.
  // Returns
  // false, touching nothing, for a dtype, shape or ISA level those kernels do not cover.
  bool matmul_quant_fast(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out);
  // Whether matmul_quant_fast runs n tokens of w on the float GEMM over the dequantized
  // weights (F32 activations, exact) rather than the integer kernels.
  bool prefill_dequantizes(const TensorView& w, int64_t n) const;
  // out = x @ dequant(w)^T (+ bias) for w W8, W4 or FP8 with F32 activations, the weights
  // dequantized in slices into scratch (matmul_quant.cpp): the values and products of the
  // reference backend, summed in another order.
  void matmul_dequant(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out);

  // The worker pool, sized to the calling thread's host_threads() (rebuilt when that changes,
  // e.g. on the first op of a tensor-parallel rank thread).
  ThreadPool& pool();

 private:
  // Per-thread scratch of at least n floats for thread t of the pool.
  float* scratch(int t, size_t n);
  // A bias as F32 (converted into a buffer when stored otherwise); null when absent.
  const float* bias_f32(const TensorView& bias);
  // The repacked copy of an uploaded weight of w's shape, or null.
  const void* packed_weight(const TensorView& w) const;
  // The BF16 prefill GEMM on AMX tiles where bf16_activations asks for it and it applies
  // (matmul.cpp); false: not taken.
  bool gemm_amx(const cpu::MatmulArgs& a);
  // The float prefill GEMM (kernels/gemm.cpp) of a.n >= gemm_tile_tokens tokens over weight
  // rows of row_bytes, a.wq's dequantized when set.
  void gemm_float(const cpu::MatmulArgs& a, int64_t row_bytes);

  struct PackedWeight {
    DType dtype = DType::Q4_0;
    int64_t m = 0, k = 0;
    HugePageBuffer bytes;
  };

  std::unique_ptr<ThreadPool> pool_;
  std::vector<std::vector<float>> scratch_;
  std::vector<float> bias_buf_;
  std::vector<float> xt_;       // activations in token tiles (the prefill GEMM)
  std::vector<uint16_t> xv_;    // ... rounded to BF16 in pairs of k (the GEMM on AMX tiles)
  std::vector<std::optional<cpu::AttendScratch>> attend_scratch_;  // per pool thread
  bool int8_activations_ = false;
  bool bf16_activations_ = false;
  bool huge_pages_ = true;
  bool huge_pages_skipped_ = false;  // a copy was left out for memory (reported once)
  std::vector<int8_t> act_q_;   // quantized activations of matmul_quant_fast (both planes when 16-bit)
  std::vector<float> act_ds_;   // their per-lane and per-block scales and sums
  std::vector<uint8_t> act_tiles_;  // the same in token tiles, for the integer GEMM (prefill)
  std::unordered_map<const void*, PackedWeight> packed_;  // by the uploaded view's data pointer
  std::unordered_map<const void*, HugePageBuffer> copies_;  // weights copied onto huge pages, by their data
  // A fresh huge-page buffer of `bytes` with its pages faulted in by the pool's threads (on a
  // VM a huge page's first touch can cost milliseconds: docs/PERF.md, "Huge pages at load").
  HugePageBuffer fresh_huge_buffer(size_t bytes);
};

}  // namespace tf

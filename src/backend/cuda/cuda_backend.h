// The CUDA backend: one GPU, one stream.
//
// Activations are BF16 (act_dtype), every op computes in FP32 and rounds once on the store;
// logits (matmul with an F32 output) are F32. Weights: upload() stores every float tensor as
// BF16, whatever dtype it is asked for (cuBLAS BF16 GEMMs or the decode GEMV, BF16 norm
// weights, bias and embedding table), and quantized ones in their format (below). The KV pool is F32,
// BF16, F16, I8 or FP8 (those two with F32 row scales) in the host backends' layout, [n_blocks, n_kv_heads,
// block_size, head_dim] per layer, plus one padding block at index n_blocks that padded rows
// of recorded decode steps write to.
//
// Attention: set_batch sorts the batch into work lists: sequences with one new token, and the
// rows of chunks too short for the tiled kernel (speculative verifications; "auto" mode), go to
// the GQA-grouped split-K decode kernel (decode_attention.cu), longer chunks to the tiled
// kernel (flash_attention*.cu) or the plain one (attention.cu). Matmuls of up to kGemvMaxRows rows go to the GEMV kernel or cuBLAS,
// whichever was faster when the shape was first seen (timed once, outside any recording).
//
// CUDA Graphs: graph_begin/graph_end record the ops of a forward on first repeat of a key
// and replay them afterwards (BackendOptions::graphs); with BackendOptions::pdl_timed, one
// replayed often is recorded again with PDL for every kernel and the recording whose replays
// were faster kept. A recording bakes in the addresses of every buffer it touches, so
// anything that reallocates (the batch buffer, the attention workspace, the KV pool, the
// model's scratch via graph_reset) drops all recordings.
//
// All work goes to one stream in order. set_batch() copies the batch metadata with one
// cudaMemcpyAsync from a pinned staging buffer into a device buffer that only grows, so a
// forward makes no host round trip; copy_to_host()/copy_from_host() synchronize the stream.
//
// Quantized weights (W8, W4, FP8; quant/formats.h) are uploaded in their own layout with their
// scales and zeros (cuda_quant.cpp), GGUF Q4_0 as W4 with groups of 32 and zero 8 (its exact
// values; an embedding table in that layout is dequantized row by row on lookup); matmul on them takes the quantized decode GEMV for a few
// rows, the tensor-core kernel (W4, W8) or cuBLASLt's FP8 GEMM on per-token quantized
// activations (FP8) beyond, and dequantize-then-cuBLAS for shapes those do not take.
//
// The front half (this class, cuda_backend.cpp) checks shapes and dtypes and dispatches to
// the launchers of the .cu files (back halves), which see pointers and sizes only.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/batch_args.h"
#include "backend/cuda/op_profiler.h"
#include "backend/cuda/pdl_policy.h"

struct cublasContext;

namespace tf::cuda {

class LtGemm;
struct LtAlgo;
struct Fp8GemmArgs;
enum class Fp8Scaling : uint8_t;
enum class Fp8Then : uint8_t;

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const BackendOptions& opt = {});  // on the current device; tf::Error if none
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  Device device() const override { return Device::Cuda; }
  DType act_dtype() const override { return DType::BF16; }

  TensorView alloc(DType dtype, std::initializer_list<int64_t> shape) override;
  void release(const TensorView& buf) override;
  TensorView upload(const TensorView& host, DType dtype) override;
  // GGUF Q4_0 matrices: upload() takes them as W4 with groups of 32 (the same values exactly:
  // repack_q4_0_to_w4), so the W4 kernels run them and embedding() gathers their rows.
  bool reads_gguf_block(DType t) const override { return t == DType::Q4_0; }
  void copy_to_host(const TensorView& src, void* dst) override;
  void copy_from_host(const void* src, const TensorView& dst) override;
  void synchronize() override;

  void init_kv_cache(const KvCacheSpec& spec) override;
  const KvCacheSpec& kv_spec() const override { return kv_spec_; }
  void set_batch(const Batch& batch) override;

  void embedding(const TensorView& table, const TensorView& out) override;
  void rms_norm(const TensorView& x, const TensorView& w, float eps, const TensorView& out) override;
  void add(const TensorView& residual, const TensorView& delta) override;
  void matmul(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out) override;
  void matmul_fused(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out,
                    const MatmulFusion& f) override;
  void rope_kv_write(int layer, const TensorView& qkv, const QkRope& rope, const AttentionParams& p) override;
  void attention(int layer, const TensorView& qkv, const AttentionParams& p, const TensorView& out) override;
  void swiglu(const TensorView& gate_up, const TensorView& out) override;
  void geglu(const TensorView& gate_up, const TensorView& out) override;
  void scale(const TensorView& x, float s) override;
  void moe_route(const TensorView& logits, const MoeParams& p, const TensorView& ids, const TensorView& weights) override;
  void moe_experts(const TensorView& x, const TensorView& ids, const TensorView& weights, const TensorView& w_gate_up,
                   const TensorView& w_down, const MoeParams& p, const TensorView& out) override;
  void gather_logit_rows(const TensorView& x, const TensorView& out) override;
  void argmax_rows(const TensorView& logits, const TensorView& ids) override;
  bool sample_rows(const TensorView& logits, const std::vector<SampleParams>& params, const TensorView& ids) override;

  bool launches_async() const override { return true; }
  void copy_ids_async(const TensorView& ids, int slot) override;
  const int32_t* ids_copied(int slot) override;
  void take_token_ids(const TensorView& ids, std::span<const int32_t> rows) override;

  int32_t pad_kv_block(int32_t group) const override;
  GraphStep graph_begin(uint64_t key) override;
  void graph_end() override;
  void graph_reset() override;
  std::vector<std::string> tuning_report() const override;
  void set_options(const BackendOptions& opt) override;
  double measure_copy_bandwidth(int64_t bytes) override;

  // K or V of one layer as [n_blocks * n_kv_heads * block_size, head_dim] of kv_spec().dtype,
  // on the device (tests read and poison them with copy_to_host / copy_from_host).
  const TensorView& k_cache(int layer) const { return k_cache_[size_t(layer)]; }
  const TensorView& v_cache(int layer) const { return v_cache_[size_t(layer)]; }
  // I8 and FP8 only: the F32 scale of each row of k_cache / v_cache, [n_blocks * n_kv_heads * block_size].
  const TensorView& k_scale(int layer) const { return k_scale_[size_t(layer)]; }
  const TensorView& v_scale(int layer) const { return v_scale_[size_t(layer)]; }
  cudaStream_t stream() const { return stream_; }
  int64_t n_graphs() const;  // recordings held (tests)
  // FP8 W8A8 products that read the codes an epilogue before them wrote (handoff_; tests).
  int64_t fp8_handoffs_taken() const { return fp8_handoffs_taken_; }

 private:
  // What the per-shape timing found (auto mode): cublasGemmEx, the GEMV (custom_us < 0 where
  // it cannot run) and the best cuBLASLt candidate (lt set when it won).
  struct GemvChoice {
    double cublas_us = 0, custom_us = -1, lt_us = -1;
    int lt_tried = 0;
    bool custom = false;
    std::shared_ptr<const LtAlgo> lt;
  };
  // rows, k, m, weight dtype, group size, epilogue, norm, bias, f32 out, split GEMVs allowed
  using QuantGemvKey = std::tuple<int64_t, int64_t, int64_t, int, int32_t, int, bool, bool, bool, bool>;
  struct Recording {
    bool seen = false;
    cudaGraphExec_t exec = nullptr;
    // Replays counted up to its trials (pdl_trial, then gemv_trials), which the count's passing
    // kReplaysBeforeTrial (cuda_graphs.cpp) starts; it stops counting there.
    int replays = 0;
    std::optional<PdlSwitches> pdl;  // the switches exec was recorded with, where a trial's won
    std::vector<std::pair<QuantGemvKey, int>> gemv_kernels;  // its timed quantized GEMV shapes, their kernels
    // The recordings still to make, one a step: a shape and the kernel to launch it with
    // (gemv_trial_kernels, listed when the count passes; BackendOptions::gemv_timed).
    std::vector<std::pair<QuantGemvKey, int>> gemv_trials;
  };
  enum class Trial { None, Pdl, Gemv };  // what the recording in progress tries
  void apply_pdl(const PdlSwitches& s);
  void end_trial();
  // The kernel launch_quant_gemv launches for `key` now: the trial's (gemv_trial_) or the pick.
  int quant_gemv_kernel(const QuantGemvKey& key, int pick) const;
  // Mean replay time in us of each of two recordings of the same step (graph_end).
  std::pair<double, double> time_replays(cudaGraphExec_t a, cudaGraphExec_t b);
  void* alloc_bytes(size_t bytes);
  void free_kv_cache();
  void check_layer(int layer, const AttentionParams& p) const;
  bool use_gemv(const struct GemmArgs& g);
  // The timing of g's shape (auto mode, small batches), measured on first sight; nullptr when
  // nothing is timed (other modes, large batches, first seen while recording).
  const GemvChoice* tuned(const struct GemmArgs& g);
  const LtAlgo* lt_pick(const struct GemmArgs& g);
  bool fused_gemv_pays(const struct GemmArgs& g, const struct GemvFusion& f);
  // rope_kv_write's kernel arguments for `qkv` (checked against the batch and the KV cache).
  struct RopeKvArgs rope_args(int layer, const TensorView& qkv, const QkRope& rope, const AttentionParams& p) const;
  // The device batch as layer `layer` reads it: the block tables and slot mapping of its KV
  // group.
  BatchArgs layer_batch(int layer) const;
  float* attention_workspace(size_t floats);
  // Quantized weights (cuda_quant.cpp): the upload of a W8/W4/FP8 host view, and the matmul
  // of g (g.wq set) on the kernel its shape takes.
  TensorView upload_quantized(const TensorView& host);
  void matmul_quant(const struct GemmArgs& g);
  // Whether matmul_quant runs g as an FP8 W8A8 product (per-token FP8 activations, then
  // cuBLASLt's FP8 GEMM): FP8 weights at more rows than the GEMV and tensor-core kernels take.
  bool runs_w8a8(const struct GemmArgs& g) const;
  // The FP8 codes and row scales an FP8 W8A8 epilogue wrote for the next matmul_fused
  // (MatmulFusion::feeds_next): of the BF16 rows at x [rows, k] as they were written there,
  // normalized first with norm_w (eps) where that is set, in the Fp8Handoff slot pair `slot`.
  // Producers alternate the slots, so a product that reads one writes the other.
  struct Fp8Handoff {
    const void* x = nullptr;
    int64_t rows = 0, k = 0;
    const void* norm_w = nullptr;
    float eps = 0.0f;
    int slot = 0;
  };
  // matmul_fused on an FP8 W8A8 product (cuda_fused.cpp): the norm and the activations'
  // quantization in one kernel, and the add or gated activation in the GEMM's scale kernel
  // where its timed choice allows; false (nothing run) where there is nothing to fuse.
  // `in`: what the call before left for this product (matmul_fused took it from handoff_).
  bool matmul_fp8_fused(const TensorView& x, const struct GemmArgs& g, const MatmulFusion& f, const TensorView& out,
                        const Fp8Handoff& in);
  bool fp8_scale_then_hand_off(Fp8Then t, const void* acc, bool acc_f32, const float* xs, const float* w_scale,
                               const struct GemmArgs& g, const MatmulFusion& f, const TensorView& out);
  // The quantized decode GEMV (g.rows <= kGemvMaxRows, gemv_supported(g, f)) on the kernel
  // timed fastest for its shape and fusion on first sight, or the one a recorded step's trial
  // found faster in the step (gemv_timed): a decode tile of the tensor-core kernel or a
  // CUDA-core GEMV (cuda_quant.cpp). While recording a trial, the trial's kernel for its shape.
  void launch_quant_gemv(const struct GemmArgs& g, const struct GemvFusion& f);
  std::vector<std::string> quant_gemv_report() const;
  // For tuning_report: "W4 g128 rows=1 k=4096 m=4096 +add" and a kernel's name ("gemv-ring8b2").
  static std::string quant_gemv_shape(const QuantGemvKey& key);
  static std::string quant_gemv_name(int kernel);
  // A scratch buffer of at least `bytes` that only grows (never while recording),
  // zero-filled when (re)allocated, one per slot: the quantized matmul's FP8 activations and
  // their scales (its own, and the two pairs of handoff_), its F32 / BF16 intermediates and the tensor-core kernel's split-K partials
  // and counters; moe_experts' assignment lists, activations and expert outputs.
  enum class Scratch : int {
    Fp8Act, Fp8Scale, Fp8Handoff0, Fp8Handoff1, Fp8HandoffScale0, Fp8HandoffScale1,
    QuantTmp, QuantMma, MoeIndex, MoeAct, MoeOut, Count
  };
  void* scratch(Scratch slot, size_t bytes);
  Fp8Handoff handoff_;  // x null: none; every matmul, matmul_fused, add and rms_norm takes it
  int handoff_slot_ = 0;  // the slot the next producer writes
  int64_t fp8_handoffs_taken_ = 0;
  // Decode splits per (sequence, kv head) that keep about four thread blocks per SM busy.
  int64_t decode_want_splits(int64_t n_decode) const;
  // Whether decodes take the tensor-core kernel (decode_attention_mma.cu) as far as the KV
  // cache tells (BF16, INT8 or FP8, head_dim 64, 128 or 256; the group is checked at launch),
  // and the key count a split is a multiple of (its tile: 64; the CUDA-core kernel: 32).
  bool decode_on_tensor_cores() const;
  int32_t decode_split_quantum() const;

  BackendOptions opt_;
  // Made by the first set_options with opt_.profile and kept for tuning_report's totals; ops
  // are timed only while opt_.profile holds (a later recorded step must record no events).
  std::unique_ptr<OpProfiler> profiler_;
  OpProfiler* prof() const { return opt_.profile ? profiler_.get() : nullptr; }
  int n_sms_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasContext* cublas_ = nullptr;
  std::unique_ptr<LtGemm> lt_;
  std::unordered_set<void*> buffers_;  // everything alloc()/upload() handed out, freed at the end
  KvCacheSpec kv_spec_;
  std::vector<TensorView> k_cache_, v_cache_;  // per layer (views of n_blocks; the padding block follows)
  std::vector<TensorView> k_scale_, v_scale_;  // per layer, I8 and FP8 only
  void* cublas_workspace_ = nullptr;
  float* attn_ws_ = nullptr;
  size_t attn_ws_floats_ = 0;
  struct Workspace {
    void* p = nullptr;
    size_t bytes = 0;
  };
  Workspace scratch_[int(Scratch::Count)];
  void* sample_args_ = nullptr;  // device copy of sample_rows' parameters
  size_t sample_args_n_ = 0;
  // Pinned host buffers that stay readable while the stream runs: two for sample_rows'
  // parameters and two for copy_ids_async's ids, used in turn, each with the event that marks
  // the end of its last copy (the copy before is waited for only when a buffer is reused).
  struct PinnedSlot {
    void* p = nullptr;
    size_t bytes = 0;
    cudaEvent_t done = nullptr;
  };
  PinnedSlot sample_slots_[2], ids_slots_[2];
  int sample_slot_ = 0;
  // Slot `s` holding at least `bytes`, once its previous copy has ended.
  void* pinned(PinnedSlot& s, size_t bytes);
  using GemvKey = std::tuple<int64_t, int64_t, int64_t, bool, bool>;  // rows, k, m, f32 out, bias
  static GemvKey gemv_key(const struct GemmArgs& g);
  std::map<GemvKey, GemvChoice> gemv_;
  struct Fp8Choice {
    Fp8Scaling scaling;
    int algo = -1;                           // LtGemm's index among the heuristic's algorithms
    double outer_us = -1, epilogue_us = -1;  // the fastest algorithm of each; -1: not offered
    int outer_algo = -1, epilogue_algo = -1;  // and its index
    int outer_tried = 0, epilogue_tried = 0;
    std::string config;  // the pick's cuBLASLt configuration (lt_algo_name)
  };
  std::map<GemvKey, Fp8Choice> fp8_;  // rows, k, m, f32 out, bias
  // How an FP8 W8A8 GEMM of a's shape applies its scales and which cuBLASLt algorithm runs it,
  // timed on first sight (cuda_quant.cpp).
  Fp8Choice fp8_choice(const Fp8GemmArgs& a, void* acc);
  std::optional<Fp8Choice> fp8_inherited(const Fp8Choice& from, const Fp8GemmArgs& a);
  // FP8 W8A8 shapes of up to this many rows are timed each; above, one per power-of-two bucket
  static constexpr int64_t kFp8TimedRows = 256;
  struct QuantGemvChoice {
    int tile = -1;                              // QuantMmaTile, or < 0: a CUDA-core GEMV (cuda_quant.cpp)
    std::vector<std::pair<int, double>> times;  // (tile, us) of every candidate
  };
  std::map<QuantGemvKey, QuantGemvChoice> quant_gemv_;
  std::unordered_map<uint64_t, Recording> graphs_;
  bool capturing_ = false;
  uint64_t capture_key_ = 0;
  PdlSwitches step_pdl_;  // the PDL switches of the current step (set_batch)
  Trial trial_ = Trial::None;  // the recording in progress: a trial of a recorded step, or not
  std::optional<std::pair<QuantGemvKey, int>> gemv_trial_;  // Trial::Gemv: the shape and its kernel
  std::vector<std::pair<QuantGemvKey, int>> capture_gemv_;  // the timed shapes launched while recording, their kernels
  // The timed choices of each recorded step shape: "N seqs x W tokens, B blocks" (its PDL
  // trial) and that + a GEMV shape (its kernel trials) -> times and pick.
  std::map<std::string, std::string> graph_picks_;

  // Batch metadata: the host copy (sizes, checks), and the device copy the kernels read.
  // Both buffers hold all arrays back to back; staged_ marks the end of the last copy out
  // of the pinned buffer, which set_batch waits for before overwriting it.
  Batch batch_;
  int32_t* batch_pinned_ = nullptr;
  int32_t* batch_device_ = nullptr;
  size_t batch_capacity_ = 0;  // int32 elements of both buffers
  cudaEvent_t staged_ = nullptr;
  BatchArgs dev_batch_;
  std::vector<int32_t> decode_seqs_, decode_tokens_, plain_tokens_;  // work lists (see set_batch)
  std::vector<int32_t> flash_tiles_;                                 // [n, 3], see BatchArgs::flash_tiles
  std::vector<int32_t> split_keys_;                                  // [1], see BatchArgs::split_keys
};

}  // namespace tf::cuda

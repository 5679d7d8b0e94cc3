// The backend interface: owns device memory (weights, the paged KV pool, scratch) and runs
// the op table. Model code calls these ops in order; kernels never see models or requests.
//
// Conventions for every op: activations are row-major [rows, cols] in the backend's
// activation dtype (F32 on the CPU backends); matrices are stored as checkpoints store them,
// [out_features, in_features], in F32/F16/BF16; tensors passed in live on this backend.
// The batch metadata (positions, block tables, slot mapping, ...) is handed over once per
// forward with set_batch() and lives in backend-owned buffers, so a captured decode step
// (CUDA Graphs) reads it as inputs instead of baked-in pointers.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/batch.h"
#include "core/tensor.h"

namespace tf {

// Shape of the paged KV pool. Per layer, K and V are each
// [n_blocks, n_kv_heads, block_size, head_dim] of `dtype`, so one head's keys in one block
// are contiguous. dtype F32/BF16/F16 stores the values; I8 and FP8 store them quantized per
// row (src/quant/kv_int8.h: symmetric, scale = max|row| / 127; src/quant/kv_fp8.h: E4M3,
// scale = max|row| / 448) with one F32 scale per (token slot, kv head) of K and of V, in
// backend-owned arrays [n_blocks, n_kv_heads, block_size] per layer (the row index of the data).
//
// KV groups: a model whose layers keep different spans of keys (Gemma 3: sliding-window
// layers next to full-attention ones) puts each kind in its own group, with its own block
// ids, its own block tables and slot mapping in the batch (Batch::n_kv_groups) and its own
// number of blocks per pool, so the sliding layers' blocks are freed as the window moves on
// while the full layers keep theirs. layer_group[il] is layer il's group, group_blocks[g] the
// blocks of each pool of group g. Both empty: one group, every layer, n_blocks.
//
// Per-layer KV heads (pruned models, whose layers differ): layer_kv_heads[il] is layer il's,
// and n_kv_heads is then the largest of them (what backends size per-batch work by); empty:
// every layer has n_kv_heads.
struct KvCacheSpec {
  int64_t n_layers = 0;
  int64_t n_blocks = 0;  // blocks per layer pool (group 0's when grouped)
  int64_t block_size = 16;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  DType dtype = DType::F32;  // F32, BF16, F16, I8 or FP8
  std::vector<int32_t> layer_group;   // [n_layers] or empty
  std::vector<int64_t> group_blocks;  // [n_groups] or empty (group_blocks[0] == n_blocks)
  std::vector<int64_t> layer_kv_heads;  // [n_layers] or empty

  int32_t n_groups() const { return group_blocks.empty() ? 1 : int32_t(group_blocks.size()); }
  int32_t group_of(int64_t layer) const { return layer_group.empty() ? 0 : layer_group[size_t(layer)]; }
  int64_t blocks_of(int64_t layer) const { return group_blocks.empty() ? n_blocks : group_blocks[size_t(group_of(layer))]; }
  int64_t kv_heads_of(int64_t layer) const { return layer_kv_heads.empty() ? n_kv_heads : layer_kv_heads[size_t(layer)]; }
};

// KV storage with a scale per row (I8, FP8).
inline bool kv_dtype_scaled(DType t) { return t == DType::I8 || t == DType::FP8; }

// Bytes of K and V (scales included) that one token occupies across all spec.n_layers layers;
// n_blocks is not used, so a planner can call it before choosing the pool size. Per layer
// that is 2 * kv_heads_of(layer) * head_dim * dtype_size, plus 2 * kv_heads_of(layer) * 4 for
// the scales of I8 and FP8.
inline int64_t kv_bytes_per_token(const KvCacheSpec& spec) {
  const int64_t row_bytes = spec.head_dim * int64_t(dtype_size(spec.dtype)) +
                            (kv_dtype_scaled(spec.dtype) ? int64_t(sizeof(float)) : 0);
  int64_t heads = 0;
  for (int64_t il = 0; il < spec.n_layers; ++il) heads += spec.kv_heads_of(il);
  return 2 * heads * row_bytes;
}

struct AttentionParams {
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;          // usually 1/sqrt(head_dim)
  int64_t sliding_window = 0;  // 0 = full causal; else keys with pos > q_pos - window
};

// What rope_kv_write does to each q and k head of a qkv row, in order:
//   1. with q_norm / k_norm set, RMSNorm over head_dim: h = h / sqrt(mean(h^2) + eps) * w
//      (Qwen3's and Gemma 3's q_norm and k_norm);
//   2. rotate-half RoPE of the first n_rot = 2 * inv_freq.numel() dims (n_rot <= head_dim;
//      the rest pass through, as partial_rotary_factor says): the pair (i, i + n_rot / 2) is
//      rotated by angle pos * inv_freq[i], or pos * inv_freq_long[i] from position long_from
//      on when inv_freq_long is set (LongRoPE), with cos and sin multiplied by mscale.
struct QkRope {
  TensorView inv_freq;       // [n_rot / 2] F32
  TensorView inv_freq_long;  // [n_rot / 2] F32 or empty
  int32_t long_from = 0;     // first position that takes inv_freq_long
  float mscale = 1.0f;
  TensorView q_norm;         // [head_dim] or empty
  TensorView k_norm;         // [head_dim] or empty
  float eps = 0.0f;
};

// Mixture-of-experts routing and expert shapes (moe_route, moe_experts).
struct MoeParams {
  int64_t n_experts = 0;
  int64_t top_k = 0;
  bool renormalize = true;  // the top_k weights divided by their sum
};

// Switches of a backend, mostly for measuring each optimisation alone (`twofold bench`).
// Host backends ignore them.
struct BackendOptions {
  bool graphs = true;              // record decode steps as CUDA Graphs and replay them
  std::string attention = "auto";  // prefill attention: auto | plain | flash
  std::string gemv = "auto";       // small-batch matmul: auto (faster per shape) | cublas | custom
  bool fusion = true;              // off: each fused op runs as separate kernels
  // FP8 W8A8 matmuls (with fusion on): the activations' quantization in the RMSNorm kernel
  // before, the residual add or gated activation in the scale kernel after
  bool fp8_fusion = true;
  // FP8 W8A8 (with fp8_fusion on): the epilogue also quantizes its output for the next FP8
  // matmul (MatmulFusion::feeds_next), which then skips its own quantization (or norm + quantization)
  bool fp8_handoff = true;
  // FP8 W8A8 with the epilogue scaling: cuBLASLt's unit-scale sums kept as F32 for the scale
  // kernel instead of BF16 (twice the bytes written and read back)
  bool fp8_sums_f32 = false;
  bool pdl = true;                 // programmatic dependent launch: a kernel starts while the previous ends
  // PDL also for the kernels whose grid is sized to the blocks resident at once (persistent and
  // k-split GEMVs) in prefill and mixed steps. Off (measured faster, docs/PERF.md) they start on
  // an idle GPU and spread evenly over the SMs, instead of landing where the previous kernel
  // has left room
  bool pdl_resident = false;
  // PDL in decode steps (every sequence of the batch one new token). Off (measured faster for
  // decode, docs/PERF.md 2026-12-03): prefill and mixed steps keep it, where it is faster
  bool pdl_decode = false;
  // PDL in decode steps only for the kernels whose grid is what fits at once (pdl_resident's
  // kernels), so that they launch as the previous kernel's blocks leave and start their weight
  // copies while it drains, while the other kernels of a decode step keep plain stream order.
  // On (docs/PERF.md 2026-12-05 night, H100, Llama-3-8B shape: INT4 decode +1% at batch 1,
  // +3% at 2, level at 8; INT8 and BF16 batch 1 level, their picks not being grid-sized)
  bool pdl_decode_resident = true;
  // A recorded step (decode, speculative verification) replayed 16 times is recorded once
  // more, with PDL for every kernel, and the faster of its two recordings kept by timed
  // replays (CudaBackend::graph_begin; tuning_report lists each). Off: the switches alone
  // decide. On (docs/PERF.md 2026-12-06, H200, Llama-3-8B shape: INT4 batch 1 +5% in the
  // process whose kernel picks gained from PDL, level in the one whose did not; INT4 batch 2-8,
  // INT8 and BF16 batch 1, BF16 batch 64 level)
  bool pdl_timed = true;
  // ... and then recorded again once for each kernel whose cold time for one of its quantized
  // GEMV shapes (1..kGemvMaxRows rows) was within 10% of the shape's fastest, that shape
  // launched with it, one recording a step; the faster recording is kept and its kernel becomes
  // the shape's pick (gemv_trials.h; tuning_report lists each trial). Off: the cold timing
  // alone picks (turning it on or off times every shape again). On (docs/PERF.md 2026-12-06,
  // H100, Llama-3-8B shape, each setting in its own processes: INT4 decode +3.8% at batch 1,
  // +3.6% at 2, +1.8% at 4; INT8 batch 1 +1.6%)
  bool gemv_timed = true;
  bool cublaslt = true;            // auto gemv mode also times cuBLASLt's heuristic algorithms per small-batch shape
  bool lt_split_k = true;          // cuBLASLt's candidates (BF16 small batches, FP8 W8A8) include split-K copies
  bool decode_mma = true;          // decode attention on tensor cores (BF16, INT8, FP8 KV) instead of CUDA cores
  // ... its key splits merged in a thread block cluster, not by a second kernel, where there are
  // at most 8 of them (docs/PERF.md, "Decode attention's splits merged in a cluster")
  bool decode_cluster = true;
  // ... and each block reads its batch metadata and starts copying the first key tile's keys
  // written by earlier steps before it waits for the previous kernel (which writes the query
  // and the new keys), launched with PDL also where only the grid-sized kernels have it (decode
  // steps); off: everything after the wait, and PDL as for any kernel
  bool decode_early_keys = true;
  int decode_splits = 0;           // decode attention: key splits per sequence (0 = about 4 blocks per SM)
  bool split_gemv = true;          // W4/W8 at one row: the k-split GEMVs among the timed kernels
  bool moe_mma = true;             // mixture-of-experts GEMMs on tensor cores instead of CUDA cores
  bool profile = false;            // time every op (CUDA events; forces graphs off)
  // CPU integer kernels: activations rounded to 8 bits per block of 32 (llama.cpp's scheme,
  // faster) instead of 16 (cpu/kernels/kernels.h, QuantizedActs).
  bool int8_activations = false;
  // CPU float GEMMs on BF16 weights (prefill): activations rounded to BF16 so the products run
  // on AMX tiles where the CPU has them (cpu/kernels/gemm_amx.cpp); off: F32 activations.
  bool bf16_activations = false;
  // CPU weights of 2 MiB or more that would be read in place from the mapped checkpoint
  // (16-bit, GGUF blocks without a repacked copy; not views with scale arrays: W8/W4/FP8) are
  // copied at upload onto transparent huge pages, which a decode step streams faster
  // (core/huge_pages.h); off: they stay on the file's pages (less resident memory, a faster
  // load on VMs where a huge page's first touch is slow). A copy is skipped when it would
  // leave less than 1 GiB of memory available. The repacked copies are on huge pages either way.
  bool huge_pages = true;
};

// What Backend::matmul_fused does around the product y = in @ w^T (+ bias), rounded to the
// activation dtype. Backends fuse the steps where one kernel pays (the CUDA decode GEMV) and
// otherwise run them apart, through the scratch views named here.
struct MatmulFusion {
  // Prologue: with norm_w set, in = rms_norm(x) * norm_w (eps); else in = x. `h` [rows, k]
  // takes the normalized rows when the steps run apart (untouched when fused).
  TensorView norm_w;
  float eps = 0.0f;
  TensorView h;
  // Epilogue. Store: out = y. AddTo: out += y (out is the residual stream, y rounded before
  // the add). Swiglu: out = silu(y[:, :m/2]) * y[:, m/2:] (w holds the gate rows, then the up
  // rows); Geglu the same with gelu_tanh for silu. `y` [rows, m] takes y when the steps run
  // apart (AddTo, Swiglu, Geglu). RopeKv: out = y (the batch's qkv rows), then
  // rope_kv_write(rope_layer, out, rope, attn).
  enum class Epilogue : uint8_t { Store, AddTo, Swiglu, Geglu, RopeKv };
  Epilogue epilogue = Epilogue::Store;
  TensorView y;
  int rope_layer = -1;   // RopeKv: the layer whose KV slots are written
  QkRope rope;           // RopeKv: norms and rotation of q and k
  AttentionParams attn;  // RopeKv: the head layout of the qkv rows
  // What the caller runs next, which a backend may prepare here (the CUDA backend's FP8 W8A8
  // path quantizes `out` for it in the epilogue): with feeds_next set, the next backend call
  // is matmul_fused on `out` as written here, with norm_w = next_norm_w (eps = next_eps; no
  // norm where next_norm_w is empty), and nothing writes `out` in between.
  bool feeds_next = false;
  TensorView next_norm_w;
  float next_eps = 0.0f;
};

// What graph_begin() asks the caller to do.
enum class GraphStep : uint8_t {
  Eager,     // run the ops as usual (nothing is recorded)
  Capture,   // run the ops; they are recorded, not executed; then call graph_end()
  Replayed,  // the ops recorded for this key were launched: do not call them
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  virtual DType act_dtype() const = 0;  // activation dtype of this backend

  // ---- memory -------------------------------------------------------------------------------
  // A buffer owned by the backend (contents undefined), alive until released or the backend dies.
  virtual TensorView alloc(DType dtype, std::initializer_list<int64_t> shape) = 0;
  // Frees a buffer from alloc() (no-op for views the backend does not own).
  virtual void release(const TensorView& buf) = 0;
  // Makes a weight resident on this backend, converting to `dtype`. The CPU backends may
  // return the host view itself when no conversion is needed (zero copy from the mmap).
  virtual TensorView upload(const TensorView& host, DType dtype) = 0;
  // Whether matmul and embedding take weights of GGUF block type t (dtype_is_gguf_block) as
  // uploaded; a loader dequantizes the types a backend does not read.
  virtual bool reads_gguf_block(DType t) const { (void)t; return false; }
  virtual void copy_to_host(const TensorView& src, void* dst) = 0;
  virtual void copy_from_host(const void* src, const TensorView& dst) = 0;
  virtual void synchronize() {}

  // ---- KV pool and batch ----------------------------------------------------------------------
  virtual void init_kv_cache(const KvCacheSpec& spec) = 0;
  virtual const KvCacheSpec& kv_spec() const = 0;
  // Copies the batch metadata into backend buffers; the ops below then refer to it.
  virtual void set_batch(const Batch& batch) = 0;

  // ---- ops (each implementation checks shapes with the helpers in shape_checks.h) ----------
  // out[t] = table[ids[t]] for the current batch's token_ids.   table [n_vocab, d_model]
  // (a GGUF block type where reads_gguf_block says so: the row dequantized)
  virtual void embedding(const TensorView& table, const TensorView& out) = 0;
  // out = x / sqrt(mean(x^2) + eps) * w, row-wise.               x, out [rows, d], w [d]
  virtual void rms_norm(const TensorView& x, const TensorView& w, float eps,
                        const TensorView& out) = 0;
  // residual += delta, rounded once.                          residual, delta [rows, d]
  virtual void add(const TensorView& residual, const TensorView& delta) = 0;
  // out = x @ w^T (+ bias).            x [rows, k], w [m, k], bias [m] or empty, out [rows, m]
  virtual void matmul(const TensorView& x, const TensorView& w, const TensorView& bias,
                      const TensorView& out) = 0;
  // matmul with an RMSNorm prologue and/or a residual-add or SwiGLU epilogue (MatmulFusion).
  // The default runs the plain ops one after the other.
  virtual void matmul_fused(const TensorView& x, const TensorView& w, const TensorView& bias,
                            const TensorView& out, const MatmulFusion& f);
  // Fused QKV epilogue: normalizes and rotates q and k of qkv in place at the batch
  // positions (QkRope), then writes k and v to the layer's KV slots (the slot_mapping of the
  // layer's KV group).   qkv [n_tokens, (n_heads + 2 * n_kv_heads) * head_dim]
  virtual void rope_kv_write(int layer, const TensorView& qkv, const QkRope& rope, const AttentionParams& p) = 0;
  // Paged causal attention of every batch token over its sequence's cache (the block tables
  // of the layer's KV group).
  //   qkv as above (only q is read), out [n_tokens, n_heads * head_dim]
  virtual void attention(int layer, const TensorView& qkv, const AttentionParams& p,
                         const TensorView& out) = 0;
  // out = silu(gate) * up.              gate_up [rows, 2 * d_ff] (gate first), out [rows, d_ff]
  virtual void swiglu(const TensorView& gate_up, const TensorView& out) = 0;
  // out = gelu_tanh(gate) * up (GeGLU, gelu with the tanh approximation: 0.5 g (1 + tanh(
  // sqrt(2/pi) (g + 0.044715 g^3)))).                    shapes as swiglu
  virtual void geglu(const TensorView& gate_up, const TensorView& out) = 0;
  // x *= s, rounded once.                                                       x [rows, d]
  virtual void scale(const TensorView& x, float s) = 0;
  // Mixture-of-experts router: per row, p = softmax(logits), the top_k experts by p
  // (descending; ties: the lower expert id first), their p divided by the sum of the top_k
  // when p.renormalize.
  //   logits [rows, n_experts] F32, ids [rows, top_k] I32, weights [rows, top_k] F32
  virtual void moe_route(const TensorView& logits, const MoeParams& p, const TensorView& ids,
                         const TensorView& weights) = 0;
  // Mixture-of-experts SwiGLU MLPs: out[r] = sum_j weights[r, j] * E_e(x[r]), e = ids[r, j],
  // summed in j order, where E_e(v) = Wdown_e (silu(Wgate_e v) * (Wup_e v)). Expert e's
  // matrices are rows [e * 2 d_ff, (e + 1) * 2 d_ff) of w_gate_up (its gate rows, then its up
  // rows) and rows [e * d_model, (e + 1) * d_model) of w_down. Only the chosen experts'
  // weights are read.
  //   x [rows, d_model], ids, weights as moe_route's, w_gate_up [n_experts * 2 d_ff, d_model],
  //   w_down [n_experts * d_model, d_ff], out [rows, d_model]
  virtual void moe_experts(const TensorView& x, const TensorView& ids, const TensorView& weights,
                           const TensorView& w_gate_up, const TensorView& w_down, const MoeParams& p,
                           const TensorView& out) = 0;
  // out[i] = x[batch.logits_rows[i]].                         x [n_tokens, d], out [n_out, d]
  virtual void gather_logit_rows(const TensorView& x, const TensorView& out) = 0;
  // ids[i] = argmax_j logits[i, j], ties to the lowest j (greedy sampling where the logits
  // live, so only ids travel to the host).              logits [n, n_vocab] F32, ids [n] I32
  virtual void argmax_rows(const TensorView& logits, const TensorView& ids) = 0;
  // One token per row drawn where the logits live: temperature (0: greedy), top-k, top-p and
  // min-p of params[i], with the uniform u in [0, 1) the caller drew from the request's RNG.
  // The logits are overwritten. Returns false when the backend has no such kernel (the caller
  // then samples on the host).                           logits [n, n_vocab] F32, ids [n] I32
  struct SampleParams {
    float temperature = 0.0f;
    int32_t top_k = 0;
    float top_p = 1.0f;
    float min_p = 0.0f;
    float u = 0.0f;
  };
  virtual bool sample_rows(const TensorView& logits, const std::vector<SampleParams>& params, const TensorView& ids) {
    (void)logits, (void)params, (void)ids;
    return false;
  }

  // ---- overlapped steps (the engine launches a decode step before the previous step's ids
  // have reached the host) ------------------------------------------------------------------
  // Whether the ops return before their work ends (a device backend with a stream): only then
  // does launching the next step early hide the host's time between steps.
  virtual bool launches_async() const { return false; }
  // Starts copying ids [n] I32 (on this backend) to the host into slot 0 or 1 and returns
  // without waiting; ids_copied(slot) waits for that copy and returns the n ids, valid until
  // the slot's next copy. The default copies at once.
  virtual void copy_ids_async(const TensorView& ids, int slot);
  virtual const int32_t* ids_copied(int slot);
  // After set_batch(): token j of the batch, j < rows.size(), becomes ids[rows[j]] (ids [n]
  // I32 on this backend, written by earlier work in launch order).
  virtual void take_token_ids(const TensorView& ids, std::span<const int32_t> rows);

  // ---- recorded forwards (CUDA Graphs) ----------------------------------------------------------
  // A KV block outside the pools of KV group `group` that padding rows of a recorded batch
  // may write to, or -1 when the backend records nothing (then run_forward,
  // src/engine/forward_runner.h, never pads a batch).
  virtual int32_t pad_kv_block(int32_t group) const { (void)group; return -1; }
  // Called after set_batch() with a key naming every shape of the batch (run_forward pads a
  // decode batch to a bucket so keys repeat). The first time a key is seen the answer is
  // Eager (warm-up: lazy module loading and per-shape choices happen outside a recording),
  // the second time Capture, afterwards Replayed.
  virtual GraphStep graph_begin(uint64_t key) { (void)key; return GraphStep::Eager; }
  virtual void graph_end() {}
  // Forgets every recording (the buffers they refer to moved) and ends one in progress.
  virtual void graph_reset() {}
  // Copy bandwidth of the memory the weights live in, (bytes read + written) / time in GB/s,
  // best of a few copies of `bytes`; 0 when the backend leaves it to the host test
  // (bench/membw.h measures host memory).
  virtual double measure_copy_bandwidth(int64_t bytes) { (void)bytes; return 0; }
  // Switches the options between forwards (drops recordings where they matter).
  virtual void set_options(const BackendOptions& opt) { (void)opt; }
  // Choices the backend made by measurement (e.g. cuBLAS or its own kernel per matmul
  // shape), one line each, for `twofold bench`.
  virtual std::vector<std::string> tuning_report() const { return {}; }

 private:
  std::vector<int32_t> ids_slots_[2];  // the default copy_ids_async's copies
};

enum class BackendKind : uint8_t { Cpu, Ref, Cuda };
BackendKind parse_backend_kind(const std::string& name);  // "cpu" | "ref" | "cuda"
std::unique_ptr<Backend> make_backend(BackendKind kind, const BackendOptions& opt = {});

}  // namespace tf

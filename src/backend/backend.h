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
struct KvCacheSpec {
  int64_t n_layers = 0;
  int64_t n_blocks = 0;
  int64_t block_size = 16;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  DType dtype = DType::F32;  // F32, BF16, F16, I8 or FP8
};

// KV storage with a scale per row (I8, FP8).
inline bool kv_dtype_scaled(DType t) { return t == DType::I8 || t == DType::FP8; }

// Bytes of K and V (scales included) that one token occupies across all spec.n_layers layers;
// n_blocks is not used, so a planner can call it before choosing the pool size. Per layer
// that is 2 * n_kv_heads * head_dim * dtype_size, plus 2 * n_kv_heads * 4 for the scales of
// I8 and FP8.
inline int64_t kv_bytes_per_token(const KvCacheSpec& spec) {
  const int64_t row_bytes = spec.head_dim * int64_t(dtype_size(spec.dtype)) +
                            (kv_dtype_scaled(spec.dtype) ? int64_t(sizeof(float)) : 0);
  return spec.n_layers * 2 * spec.n_kv_heads * row_bytes;
}

struct AttentionParams {
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;          // usually 1/sqrt(head_dim)
  int64_t sliding_window = 0;  // 0 = full causal; else keys with pos > q_pos - window
};

// Switches of a backend, mostly for measuring each optimisation alone (`twofold bench`).
// Host backends ignore them.
struct BackendOptions {
  bool graphs = true;              // record decode steps as CUDA Graphs and replay them
  std::string attention = "auto";  // prefill attention: auto | plain | flash
  std::string gemv = "auto";       // small-batch matmul: auto (faster per shape) | cublas | custom
  bool fusion = true;              // off: each fused op runs as separate kernels
  bool pdl = true;                 // programmatic dependent launch: a kernel starts while the previous ends
  bool cublaslt = true;            // auto gemv mode also times cuBLASLt's heuristic algorithms per small-batch shape
  bool decode_mma = true;          // decode attention on tensor cores (BF16 KV) instead of CUDA cores
  int decode_splits = 0;           // decode attention: key splits per sequence (0 = about 4 blocks per SM)
  bool profile = false;            // time every op (CUDA events; forces graphs off)
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
  // rows). `y` [rows, m] takes y when the steps run apart (AddTo, Swiglu). RopeKv: out = y
  // (the batch's qkv rows), then rope_kv_write(rope_layer, out, inv_freq, attn).
  enum class Epilogue : uint8_t { Store, AddTo, Swiglu, RopeKv };
  Epilogue epilogue = Epilogue::Store;
  TensorView y;
  int rope_layer = -1;  // RopeKv: the layer whose KV slots are written
  TensorView inv_freq;  // RopeKv: [head_dim / 2] F32
  AttentionParams attn;  // RopeKv: the head layout of the qkv rows
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
  // Fused QKV epilogue: rotates q and k of qkv in place with RoPE at the batch positions,
  // then writes k and v to the layer's KV slots (slot_mapping).
  //   qkv [n_tokens, (n_heads + 2 * n_kv_heads) * head_dim], inv_freq [head_dim / 2] F32
  virtual void rope_kv_write(int layer, const TensorView& qkv, const TensorView& inv_freq,
                             const AttentionParams& p) = 0;
  // Paged causal attention of every batch token over its sequence's cache.
  //   qkv as above (only q is read), out [n_tokens, n_heads * head_dim]
  virtual void attention(int layer, const TensorView& qkv, const AttentionParams& p,
                         const TensorView& out) = 0;
  // out = silu(gate) * up.              gate_up [rows, 2 * d_ff] (gate first), out [rows, d_ff]
  virtual void swiglu(const TensorView& gate_up, const TensorView& out) = 0;
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

  // ---- recorded forwards (CUDA Graphs) ----------------------------------------------------------
  // A KV block outside the pool that padding rows of a recorded batch may write to, or -1
  // when the backend records nothing (then run_forward, src/engine/forward_runner.h, never
  // pads a batch).
  virtual int32_t pad_kv_block() const { return -1; }
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
};

enum class BackendKind : uint8_t { Cpu, Ref, Cuda };
BackendKind parse_backend_kind(const std::string& name);  // "cpu" | "ref" | "cuda"
std::unique_ptr<Backend> make_backend(BackendKind kind, const BackendOptions& opt = {});

}  // namespace tf

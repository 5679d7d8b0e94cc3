// A loaded model: config, weights resident on a backend, and the forward pass over a packed
// batch. Each architecture is one file under src/model/arch/ and one row of the registry
// (registry.h); load_model picks the row by config.json's model_type.
//
// A forward is two calls, so that whoever owns the step (src/engine/forward_runner.h) can
// pad a batch and record or replay the ops (CUDA Graphs) without the model knowing:
//   prepare(batch)  scratch for the batch's rows, its metadata handed to the backend(s)
//   run()           the ops of the forward, backend calls only, on the prepared buffers
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/batch.h"
#include "model/config.h"

namespace tf {

class Communicator;

// One precision the forward's linear weights (q|k|v, o, gate|up, down; weight_table.h
// is_linear_role) are held in on the backend. Embeddings, norms and biases are held once.
struct WeightCopy {
  // Stored: as the checkpoint holds them. Dense16: BF16 values (a quantized checkpoint's
  // dequantized). Quantized: `format`, the checkpoint's own tensors when it stores that layout,
  // else round-to-nearest at load from its 16-bit values (a quantized checkpoint's dequantized).
  enum class Kind : uint8_t { Stored, Dense16, Quantized };
  Kind kind = Kind::Stored;
  DType format = DType::W4;  // Quantized: W8, W4 or FP8
  int32_t group_size = 128;  // W4 (lowered where it does not divide a weight's input dimension: fitting_group_size)
  // The initial policy: steps of at least this many tokens use this copy (up to the next
  // copy's); 0: no steps until a policy names it (Model::set_copy_ranges).
  int64_t min_tokens = 1;
};

struct LoadOptions {
  // Weight dtype on the backend; F32/F16/BF16, or "as stored" when unset (the CPU backends
  // then read the memory-mapped checkpoint in place).
  bool keep_stored_dtype = true;
  DType weight_dtype = DType::BF16;
  // A GGUF file's quantized matrices dequantized to F32 at load even where the backend reads
  // their blocks (Backend::reads_gguf_block), for comparison (`--dequantize`).
  bool dequantize_gguf = false;
  // Random weights from config.json alone (`--load-format dummy`), for speed work.
  bool dummy_weights = false;
  uint64_t dummy_seed = 1;
  // Tensor parallelism (tp_shard.h): this model is rank tp_rank of tp_size, holds only its
  // shard of the weights and KV heads, and all-reduces through `comm` (required when
  // tp_size > 1). Its logits are then this rank's vocabulary slice.
  int32_t tp_rank = 0;
  int32_t tp_size = 1;
  Communicator* comm = nullptr;
  // The linear weights' copies, by min_tokens ascending (the first from 1 token); empty: one
  // copy as stored. With several, each step uses the copy for its number of tokens.
  std::vector<WeightCopy> weight_copies;
  // Quantized copies made at load include a dense LM head (untied: a tied one is the
  // embedding, which stays 16-bit); a head the checkpoint stores quantized always follows them.
  bool quantize_lm_head = false;
};

// What prepare() hands back.
struct PreparedStep {
  TensorView logits;           // [batch.n_out(), n_vocab] F32 on the model's (rank 0's) backend, written by run()
  bool buffers_moved = false;  // scratch was reallocated: recorded forwards refer to freed memory
  int weight_copy = 0;         // the copy of the linear weights run() will use (a recording is of one copy)
};

// One copy of the linear weights as loaded (LoadOptions::weight_copies).
struct WeightCopyInfo {
  std::string name;   // "as stored", "bf16", "int8", "int4 g128", "fp8"
  int64_t bytes = 0;  // resident bytes of this copy's linear weights (scales and zeros included)
};

// Which copy of the linear weights a step uses: steps of at least min_tokens tokens (up to the
// next range's min_tokens) use `copy`. A policy is a list of ranges by min_tokens ascending,
// the first from 1 token.
struct CopyRange {
  int64_t min_tokens = 1;
  int copy = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // Gets ready to run `batch` (at least one token): scratch for its rows, and its metadata
  // copied to the backend (Backend::set_batch).
  virtual PreparedStep prepare(const Batch& batch) = 0;
  // Runs the forward over the batch last prepared: K/V of its tokens are written into the
  // backend's KV pool and the logits where prepare() said, valid until the next prepare().
  // Issues backend ops only, on buffers that stay put until prepare() reports them moved.
  virtual void run() = 0;
  // Bytes of all weights as resident on the backend (every copy of the linear weights).
  virtual int64_t weight_bytes() const = 0;
  // Bytes of the weights a step of n_tokens reads: the others and the linear weights' copy it uses.
  virtual int64_t step_weight_bytes(int64_t n_tokens) const { (void)n_tokens; return weight_bytes(); }
  // The copies of the linear weights (one when loaded without copies), and the policy that
  // picks one per step. Changing the policy keeps recordings valid: each is of one copy.
  virtual std::vector<WeightCopyInfo> weight_copies() const { return {{"as stored", weight_bytes()}}; }
  virtual std::vector<CopyRange> copy_ranges() const { return {CopyRange{}}; }
  virtual void set_copy_ranges(const std::vector<CopyRange>& ranges) { (void)ranges; }
  virtual int64_t n_params() const = 0;
  // Sets up the KV pool for `spec` (the whole model's KV heads) on `backend`, the one the
  // model was loaded onto. A sharded model gives each rank's backend its share of the heads.
  virtual void init_kv_cache(Backend& backend, const KvCacheSpec& spec) { backend.init_kv_cache(spec); }
};

// The KV pool geometry of cfg's layers: n_layers, head_dim and each layer's KV heads
// (KvCacheSpec::layer_kv_heads when they differ, n_kv_heads their largest). The caller sets
// the blocks, dtype and groups.
KvCacheSpec kv_geometry(const ModelConfig& cfg);

// Loads DIR (config.json + safetensors, a GGUF file, or random weights with opt.dummy_weights)
// onto `backend` through the architecture registry. A GGUF file's matrices stay in their
// blocks where the backend reads them (Backend::reads_gguf_block) and they are uploaded as
// stored (one copy as stored, tp_size 1, not opt.dequantize_gguf); else they are dequantized.
// Throws tf::Error naming the file and tensor
// at fault. The backend must outlive the model.
std::unique_ptr<Model> load_model(const std::string& dir, Backend& backend, const LoadOptions& opt = {});

class TensorSource;
// The model of `cfg` with weights from `weights` (validated against the table of cfg, quantized
// formats included): for models assembled in memory (`twofold quantize` evaluates its
// candidates so). The model keeps `weights`.
std::unique_ptr<Model> load_model(ModelConfig cfg, std::unique_ptr<TensorSource> weights, Backend& backend,
                                  const LoadOptions& opt = {});

}  // namespace tf

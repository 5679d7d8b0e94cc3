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

struct LoadOptions {
  // Weight dtype on the backend; F32/F16/BF16, or "as stored" when unset (the CPU backends
  // then read the memory-mapped checkpoint in place).
  bool keep_stored_dtype = true;
  DType weight_dtype = DType::BF16;
  // Random weights from config.json alone (`--load-format dummy`), for speed work.
  bool dummy_weights = false;
  uint64_t dummy_seed = 1;
  // Tensor parallelism (tp_shard.h): this model is rank tp_rank of tp_size, holds only its
  // shard of the weights and KV heads, and all-reduces through `comm` (required when
  // tp_size > 1). Its logits are then this rank's vocabulary slice.
  int32_t tp_rank = 0;
  int32_t tp_size = 1;
  Communicator* comm = nullptr;
};

// What prepare() hands back.
struct PreparedStep {
  TensorView logits;           // [batch.n_out(), n_vocab] F32 on the model's (rank 0's) backend, written by run()
  bool buffers_moved = false;  // scratch was reallocated: recorded forwards refer to freed memory
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
  // Bytes of all weights as resident on the backend.
  virtual int64_t weight_bytes() const = 0;
  virtual int64_t n_params() const = 0;
  // Sets up the KV pool for `spec` (the whole model's KV heads) on `backend`, the one the
  // model was loaded onto. A sharded model gives each rank's backend its share of the heads.
  virtual void init_kv_cache(Backend& backend, const KvCacheSpec& spec) { backend.init_kv_cache(spec); }
};

// Loads DIR (config.json + safetensors, or random weights with opt.dummy_weights) onto
// `backend` through the architecture registry. Throws tf::Error naming the file and tensor
// at fault. The backend must outlive the model.
std::unique_ptr<Model> load_model(const std::string& dir, Backend& backend, const LoadOptions& opt = {});

}  // namespace tf

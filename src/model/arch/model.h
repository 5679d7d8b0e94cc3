// A loaded model: config, weights resident on a backend, and the forward pass over a packed
// batch. The Llama family (llama, mistral, qwen2) shares one forward (llama.cpp); another
// architecture would be another file implementing this interface.
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
  // tp_size > 1). forward() then returns this rank's vocabulary slice of the logits.
  int32_t tp_rank = 0;
  int32_t tp_size = 1;
  Communicator* comm = nullptr;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // Runs one packed batch; K/V of its tokens are written into the backend's KV pool.
  // Returns logits [batch.n_out(), n_vocab] (F32), resident on the backend, valid until the
  // next forward.
  virtual TensorView forward(const Batch& batch) = 0;
  // Bytes of all weights as resident on the backend.
  virtual int64_t weight_bytes() const = 0;
  virtual int64_t n_params() const = 0;
  // Sets up the KV pool for `spec` (the whole model's KV heads) on `backend`, the one the
  // model was loaded onto. A sharded model gives each rank's backend its share of the heads.
  virtual void init_kv_cache(Backend& backend, const KvCacheSpec& spec) { backend.init_kv_cache(spec); }
};

// Loads DIR (config.json + safetensors) onto `backend`. Throws tf::Error naming the file and
// tensor at fault. The backend must outlive the model.
std::unique_ptr<Model> load_model(const std::string& dir, Backend& backend, const LoadOptions& opt = {});

}  // namespace tf

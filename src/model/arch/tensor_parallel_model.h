// Tensor parallelism inside one process: N shard models (load_model with
// LoadOptions::tp_rank/tp_size, each holding 1/N of the heads, d_ff and vocabulary) on N
// backends, driven by N rank threads that meet in an in-process communicator.
//
//   prepare(batch): every rank's shard prepares the batch on its backend.
//   run(): every rank runs its shard's forward on its own thread (two all-reduces per layer
//   inside), then all-gathers its vocabulary slice of the logits; rank 0 lays the slices
//   side by side into [n_out, n_vocab] on its backend, where prepare() said.
//
// Rank 0's backend is the caller's (the engine's), so the engine reads logits and runs
// argmax where it always does. Host backends only: the in-process communicator reads and
// writes the buffers as host memory. GPUs would take an NCCL communicator (and one process
// or one thread per GPU); that is not wired here.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dist/in_process_communicator.h"
#include "dist/rank_threads.h"
#include "model/arch/model.h"
#include "model/arch/tp_shard.h"

namespace tf {

class TensorParallelModel final : public Model {
 public:
  // Loads DIR as len(others) + 1 shards: rank 0 on `rank0`, rank r on others[r - 1] (owned
  // from now on). Throws tf::Error if a backend is not a host backend or the model's
  // dimensions do not split (tp_shard()).
  TensorParallelModel(const std::string& dir, Backend& rank0, std::vector<std::unique_ptr<Backend>> others,
                      const LoadOptions& opt);
  ~TensorParallelModel() override;

  const ModelConfig& config() const override { return shards_[0]->config(); }
  PreparedStep prepare(const Batch& batch) override;
  void run() override;
  // Weight bytes and parameters resident over all ranks (replicated tensors count once per rank).
  int64_t weight_bytes() const override;
  int64_t step_weight_bytes(int64_t n_tokens) const override;
  // Rank 0's copies (every rank holds the same copies of its shard), bytes summed over ranks.
  std::vector<WeightCopyInfo> weight_copies() const override;
  std::vector<CopyRange> copy_ranges() const override { return shards_[0]->copy_ranges(); }
  void set_copy_ranges(const std::vector<CopyRange>& ranges) override;
  int64_t n_params() const override;
  // Each rank's pool gets spec with its own number of KV heads.
  void init_kv_cache(Backend& backend, const KvCacheSpec& spec) override;

  int size() const { return int(shards_.size()); }
  const Model& shard(int rank) const { return *shards_[size_t(rank)]; }
  Backend& backend(int rank) const { return *backends_[size_t(rank)]; }
  const TpShard& layout(int rank) const { return layouts_[size_t(rank)]; }

 private:
  bool ensure_logits(int64_t n_out);  // true when the buffers were reallocated

  std::vector<Backend*> backends_;                  // [size]; [0] is the caller's
  std::vector<std::unique_ptr<Backend>> owned_;     // ranks 1..size-1
  InProcessGroup group_;
  std::vector<std::unique_ptr<Model>> shards_;      // destroyed before owned_ (declared after)
  std::vector<TpShard> layouts_;
  std::unique_ptr<RankThreads> threads_;
  std::vector<TensorView> gathered_;                // per rank: [size, cap_out, n_vocab / size] F32
  TensorView logits_;                               // rank 0: [cap_out, n_vocab] F32
  int64_t cap_out_ = 0;
  int64_t n_out_ = 0;                               // of the prepared batch
  std::vector<TensorView> local_;                   // per rank: its shard's logits [n_out, n_vocab / size]
  std::vector<float> host_gathered_, host_logits_;  // rank 0's reordering in host memory
};

}  // namespace tf

// What every decoder-only architecture's model shares, so that its file holds only the
// forward: the weights loaded by the table (weight_loader.h) as this rank's shard, the scratch
// activations (blocks.h Activations) grown to the largest batch seen, prepare()/run() around
// the architecture's ops, and the choice per step of the linear weights' copy (the range of
// its number of tokens names it).
#pragma once

#include <memory>

#include "model/arch/blocks.h"
#include "model/arch/model.h"
#include "model/arch/registry.h"
#include "model/arch/tp_shard.h"
#include "model/arch/weight_loader.h"

namespace tf {

class DecoderModel : public Model {
 public:
  // Takes this rank's shard of b.table's weights onto b.backend. Throws tf::Error when the
  // model does not split into b.opt.tp_size ranks or the communicator does not match.
  explicit DecoderModel(ModelBuild b);

  const ModelConfig& config() const override { return cfg_; }  // the whole model's, also when sharded
  PreparedStep prepare(const Batch& batch) override;
  void run() override;
  int64_t weight_bytes() const override { return weights_.bytes(); }
  int64_t step_weight_bytes(int64_t n_tokens) const override;
  std::vector<WeightCopyInfo> weight_copies() const override;
  std::vector<CopyRange> copy_ranges() const override { return ranges_; }
  void set_copy_ranges(const std::vector<CopyRange>& ranges) override;
  int64_t n_params() const override { return weights_.n_params(); }

 protected:
  // The architecture's ops over `a` (n tokens, n_out logit rows; n_out may be 0).
  virtual void forward(const Activations& a, int64_t n_out) = 0;

  Backend& be() const { return be_; }
  const TpShard& shard() const { return shard_; }
  const LoadedWeights& weights() const { return weights_; }
  // The copy of the linear weights the prepared batch uses (0 .. weights().n_copies() - 1).
  int copy() const { return copy_; }
  // `a` with its per-layer buffers (qkv, attn, gate_up, act) cut to layer il's widths on this
  // rank (the same views when every layer has the same widths).
  Activations layer_activations(const Activations& a, int64_t il) const;
  BlockContext block_context() const { return BlockContext{.be = be_, .comm = comm_, .eps = cfg_.rms_norm_eps}; }
  // The RoPE frequencies of a kind of layer (rope.h) on the backend, as rope_kv_write takes
  // them (q/k norms left empty: they are layer weights).
  QkRope upload_rope(LayerAttention kind = LayerAttention::Full);

 private:
  // Grows the scratch to n_tokens / n_out rows; true when buffers were reallocated.
  bool reserve(int64_t n_tokens, int64_t n_out);
  TensorView upload_f32(const std::vector<float>& v);
  int copy_for(int64_t n_tokens) const;

  ModelConfig cfg_;
  std::unique_ptr<TensorSource> source_;  // zero-copy backends read weights from here
  Backend& be_;
  TpShard shard_;                 // this rank's heads, d_ff and vocabulary (all when unsharded)
  Communicator* comm_ = nullptr;  // set when sharded
  LoadedWeights weights_;
  Activations scratch_;           // full-capacity buffers (empty views for buffers the model never uses)
  std::vector<TensorView> rope_tables_;  // uploaded by upload_rope
  int64_t cap_tokens_ = 0, cap_out_ = 0;
  int64_t n_tokens_ = 0, n_out_ = 0;  // of the prepared batch
  std::vector<CopyRange> ranges_;     // which copy a step uses (model.h CopyRange)
  int copy_ = 0;                      // of the prepared batch
};

}  // namespace tf

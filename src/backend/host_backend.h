// Memory, KV pool and batch handling shared by the two host backends (ref and cpu): device
// memory is host memory, weights stay in the mapped checkpoint when their dtype is kept.
#pragma once

#include <memory>
#include <new>
#include <vector>

#include "backend/backend.h"

namespace tf {

class HostBackend : public Backend {
 public:
  Device device() const override { return Device::Host; }
  DType act_dtype() const override { return DType::F32; }

  TensorView alloc(DType dtype, std::initializer_list<int64_t> shape) override;
  void release(const TensorView& buf) override;
  TensorView upload(const TensorView& host, DType dtype) override;
  void copy_to_host(const TensorView& src, void* dst) override;
  void copy_from_host(const void* src, const TensorView& dst) override;

  void init_kv_cache(const KvCacheSpec& spec) override;
  const KvCacheSpec& kv_spec() const override { return kv_spec_; }
  void set_batch(const Batch& batch) override;
  void add(const TensorView& residual, const TensorView& delta) override;
  void scale(const TensorView& x, float s) override;
  void argmax_rows(const TensorView& logits, const TensorView& ids) override;
  void take_token_ids(const TensorView& ids, std::span<const int32_t> rows) override;
  void moe_route(const TensorView& logits, const MoeParams& p, const TensorView& ids, const TensorView& weights) override;

  // rows of K or V of one layer as [n_blocks * n_kv_heads * block_size, head_dim] of kv_spec().dtype
  // (the layer's KV heads: KvCacheSpec::kv_heads_of)
  const TensorView& k_cache(int layer) const { return k_cache_[size_t(layer)]; }
  const TensorView& v_cache(int layer) const { return v_cache_[size_t(layer)]; }
  // I8 and FP8 storage only: the F32 scale of each row of k_cache / v_cache,
  // [n_blocks * n_kv_heads * block_size] (an empty view for float storage).
  const TensorView& k_scale(int layer) const { return k_scale_[size_t(layer)]; }
  const TensorView& v_scale(int layer) const { return v_scale_[size_t(layer)]; }

 protected:
  // Row of (slot, kv_head) in layer `layer`'s K or V pool (and index of its scale).
  int64_t kv_row_index(int layer, int64_t slot, int64_t kv_head) const {
    const int64_t block = slot / kv_spec_.block_size, in_block = slot % kv_spec_.block_size;
    return (block * kv_spec_.kv_heads_of(layer) + kv_head) * kv_spec_.block_size + in_block;
  }
  const Batch& batch() const { return batch_; }
  // The batch's block tables [n_seqs, max_blocks] and slot mapping [n_tokens] of the KV
  // group of `layer`.
  const int32_t* block_tables(int layer) const {
    return batch_.block_tables.data() + size_t(kv_spec_.group_of(layer)) * size_t(batch_.n_seqs()) * size_t(batch_.max_blocks);
  }
  const int32_t* slot_mapping(int layer) const {
    return batch_.slot_mapping.data() + size_t(kv_spec_.group_of(layer)) * size_t(batch_.n_tokens());
  }

 private:
  struct AlignedDelete {
    void operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  std::vector<std::unique_ptr<uint8_t[], AlignedDelete>> buffers_;
  KvCacheSpec kv_spec_;
  std::vector<TensorView> k_cache_, v_cache_;  // per layer
  std::vector<TensorView> k_scale_, v_scale_;  // per layer, data == nullptr unless I8/FP8
  Batch batch_;
};

// Reads element i of a float tensor of any float dtype.
float load_f32(const void* data, DType dtype, int64_t i);
void store_f32(void* data, DType dtype, int64_t i, float v);
// Elements [offset, offset + n) of data (F32, BF16 or F16) = src, each as store_f32 writes it
// (the dtype chosen once, so the loop vectorizes).
void store_row_f32(void* data, DType dtype, int64_t offset, int64_t n, const float* src);
// Converts n elements starting at element `offset` to float.
void load_row_f32(const void* data, DType dtype, int64_t offset, int64_t n, float* dst);

}  // namespace tf

// A Backend decorator base: every call goes to the wrapped backend unchanged. Subclasses
// override the calls they observe or alter (quant/capture_backend.h records matmul inputs)
// and stay transparent otherwise: the model cannot tell it runs on the decorator.
#pragma once

#include "backend/backend.h"

namespace tf {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(Backend& inner) : inner_(inner) {}
  Backend& inner() const { return inner_; }

  std::string name() const override { return inner_.name(); }
  Device device() const override { return inner_.device(); }
  DType act_dtype() const override { return inner_.act_dtype(); }
  TensorView alloc(DType dtype, std::initializer_list<int64_t> shape) override { return inner_.alloc(dtype, shape); }
  void release(const TensorView& buf) override { inner_.release(buf); }
  TensorView upload(const TensorView& host, DType dtype) override { return inner_.upload(host, dtype); }
  bool reads_gguf_block(DType t) const override { return inner_.reads_gguf_block(t); }
  void copy_to_host(const TensorView& src, void* dst) override { inner_.copy_to_host(src, dst); }
  void copy_from_host(const void* src, const TensorView& dst) override { inner_.copy_from_host(src, dst); }
  void synchronize() override { inner_.synchronize(); }
  void init_kv_cache(const KvCacheSpec& spec) override { inner_.init_kv_cache(spec); }
  const KvCacheSpec& kv_spec() const override { return inner_.kv_spec(); }
  void set_batch(const Batch& batch) override { inner_.set_batch(batch); }
  void embedding(const TensorView& table, const TensorView& out) override { inner_.embedding(table, out); }
  void rms_norm(const TensorView& x, const TensorView& w, float eps, const TensorView& out) override {
    inner_.rms_norm(x, w, eps, out);
  }
  void add(const TensorView& residual, const TensorView& delta) override { inner_.add(residual, delta); }
  void matmul(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out) override {
    inner_.matmul(x, w, bias, out);
  }
  void matmul_fused(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out,
                    const MatmulFusion& f) override {
    inner_.matmul_fused(x, w, bias, out, f);
  }
  void rope_kv_write(int layer, const TensorView& qkv, const QkRope& rope, const AttentionParams& p) override {
    inner_.rope_kv_write(layer, qkv, rope, p);
  }
  void attention(int layer, const TensorView& qkv, const AttentionParams& p, const TensorView& out) override {
    inner_.attention(layer, qkv, p, out);
  }
  void swiglu(const TensorView& gate_up, const TensorView& out) override { inner_.swiglu(gate_up, out); }
  void geglu(const TensorView& gate_up, const TensorView& out) override { inner_.geglu(gate_up, out); }
  void scale(const TensorView& x, float s) override { inner_.scale(x, s); }
  void moe_route(const TensorView& logits, const MoeParams& p, const TensorView& ids, const TensorView& weights) override {
    inner_.moe_route(logits, p, ids, weights);
  }
  void moe_experts(const TensorView& x, const TensorView& ids, const TensorView& weights, const TensorView& w_gate_up,
                   const TensorView& w_down, const MoeParams& p, const TensorView& out) override {
    inner_.moe_experts(x, ids, weights, w_gate_up, w_down, p, out);
  }
  void gather_logit_rows(const TensorView& x, const TensorView& out) override { inner_.gather_logit_rows(x, out); }
  void argmax_rows(const TensorView& logits, const TensorView& ids) override { inner_.argmax_rows(logits, ids); }
  bool sample_rows(const TensorView& logits, const std::vector<SampleParams>& params, const TensorView& ids) override {
    return inner_.sample_rows(logits, params, ids);
  }
  bool launches_async() const override { return inner_.launches_async(); }
  void copy_ids_async(const TensorView& ids, int slot) override { inner_.copy_ids_async(ids, slot); }
  const int32_t* ids_copied(int slot) override { return inner_.ids_copied(slot); }
  void take_token_ids(const TensorView& ids, std::span<const int32_t> rows) override {
    inner_.take_token_ids(ids, rows);
  }
  int32_t pad_kv_block(int32_t group) const override { return inner_.pad_kv_block(group); }
  GraphStep graph_begin(uint64_t key) override { return inner_.graph_begin(key); }
  void graph_end() override { inner_.graph_end(); }
  void graph_reset() override { inner_.graph_reset(); }
  double measure_copy_bandwidth(int64_t bytes) override { return inner_.measure_copy_bandwidth(bytes); }
  void set_options(const BackendOptions& opt) override { inner_.set_options(opt); }
  std::vector<std::string> tuning_report() const override { return inner_.tuning_report(); }

 private:
  Backend& inner_;
};

}  // namespace tf

// Helpers of the CUDA op tests: BF16 tensors on the CUDA backend, a guarded BF16 output, KV
// pool access for both the reference and the CUDA backend, and comparisons that also fill
// the per-op report (cuda_test_report.h).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/batch.h"
#include "engine/forward_runner.h"
#include "model/arch/model.h"
#include "attention_history.h"
#include "cuda_test_report.h"
#include "op_test_util.h"

namespace tf::test {

struct Backends {
  explicit Backends(const BackendOptions& cuda_options = {})
      : ref(make_backend(BackendKind::Ref)), cuda(make_backend(BackendKind::Cuda, cuda_options)) {}
  std::unique_ptr<Backend> ref;
  std::unique_ptr<Backend> cuda;
};

// Values rounded to BF16 (and widened back): what both backends get as input.
inline std::vector<float> round_bf16(std::vector<float> v) {
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}

// A BF16 activation [rows, cols] on `be` holding `values` (rounded to BF16).
inline TensorView to_cuda_bf16(Backend& be, const std::vector<float>& values, int64_t rows, int64_t cols) {
  TensorView t = be.alloc(DType::BF16, {rows, cols});
  EXPECT_EQ(int64_t(values.size()), t.numel());
  std::vector<uint16_t> h(values.size());
  for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_bf16(values[i]);
  be.copy_from_host(h.data(), t);
  return t;
}

// A BF16 or F32 tensor of `be` as F32 values.
inline std::vector<float> from_cuda(Backend& be, const TensorView& t) {
  std::vector<uint8_t> bytes(t.nbytes());
  be.copy_to_host(t, bytes.data());
  std::vector<float> out(size_t(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_f32(bytes.data(), t.dtype, int64_t(i));
  return out;
}

// A BF16 output [rows, cols] followed by one guard row, all NaN before the op: an element the
// op does not write stays NaN (and fails every comparison); a write past the end changes the
// guard (test::GuardedOut is the F32 version).
class GuardedBf16 {
 public:
  static constexpr uint16_t kPoison = 0x7fc1;  // quiet NaN with a payload
  GuardedBf16(Backend& be, int64_t rows, int64_t cols) : be_(be), rows_(rows), cols_(cols) {
    buf_ = be.alloc(DType::BF16, {rows + 1, cols});
    const std::vector<uint16_t> init(size_t((rows + 1) * cols), kPoison);
    be.copy_from_host(init.data(), buf_);
    view_ = buf_;
    view_.shape[0] = rows;
  }
  const TensorView& view() const { return view_; }
  std::vector<float> values() const { return from_cuda(be_, view_); }
  bool guard_intact() const {
    std::vector<uint16_t> all(size_t((rows_ + 1) * cols_));
    be_.copy_to_host(buf_, all.data());
    for (int64_t i = rows_ * cols_; i < (rows_ + 1) * cols_; ++i)
      if (all[size_t(i)] != kPoison) return false;
    return true;
  }

 private:
  Backend& be_;
  int64_t rows_, cols_;
  TensorView buf_, view_;
};

// got ~ want within `tol` relative L2 (and the output guard intact), recorded under `op`.
inline void expect_close(const std::string& op, const std::vector<float>& got, const std::vector<float>& want,
                         double tol, bool guard_intact) {
  const auto r = close_rel_l2(got, want, tol);
  EXPECT_TRUE(r) << op;
  EXPECT_TRUE(guard_intact) << op << " wrote past its output";
  record(op, "rel L2", error_stats(got, want).rel_l2, tol, r && guard_intact);
}

// The KV pools of one backend (reference or CUDA), read and written as bytes; with I8
// storage also the row scales.
class KvPools {
 public:
  template <typename B>
  KvPools(Backend& be, B& owner)
      : be_(&be),
        pool_([&owner](int il, int kv) -> const TensorView& { return kv ? owner.v_cache(il) : owner.k_cache(il); }),
        scale_([&owner](int il, int kv) -> const TensorView& { return kv ? owner.v_scale(il) : owner.k_scale(il); }) {}

  std::vector<float> scales(int il, int kv) const {
    std::vector<float> out(size_t(scale_(il, kv).numel()));
    be_->copy_to_host(scale_(il, kv), out.data());
    return out;
  }
  void set_scales(int il, int kv, const std::vector<float>& v) const { be_->copy_from_host(v.data(), scale_(il, kv)); }

  std::vector<uint8_t> bytes(int il, int kv) const {
    std::vector<uint8_t> out(pool_(il, kv).nbytes());
    be_->copy_to_host(pool_(il, kv), out.data());
    return out;
  }
  void set_bytes(int il, int kv, const std::vector<uint8_t>& b) const { be_->copy_from_host(b.data(), pool_(il, kv)); }

  // Every element of both layers' pools NaN (quiet, with a payload); I8 and FP8: every scale
  // NaN (and the codes nan_bytes' poison, which quantization never produces).
  void poison_all() const {
    const KvCacheSpec& s = be_->kv_spec();
    for (int il = 0; il < int(s.n_layers); ++il)
      for (int kv = 0; kv < 2; ++kv) {
        set_bytes(il, kv, nan_bytes(s.dtype, pool_(il, kv).numel()));
        if (kv_dtype_scaled(s.dtype))
          set_scales(il, kv, std::vector<float>(size_t(scale_(il, kv).numel()), std::nanf("")));
      }
  }
  // Block `block` of every layer NaN (a dropped block handed to someone else).
  void poison_block(int32_t block) const {
    const KvCacheSpec& s = be_->kv_spec();
    const int64_t n = s.n_kv_heads * s.block_size * s.head_dim;
    for (int il = 0; il < int(s.n_layers); ++il)
      for (int kv = 0; kv < 2; ++kv) {
        if (kv_dtype_scaled(s.dtype)) {
          std::vector<float> sc = scales(il, kv);
          for (int64_t r = 0; r < s.n_kv_heads * s.block_size; ++r)
            sc[size_t(block * s.n_kv_heads * s.block_size + r)] = std::nanf("");
          set_scales(il, kv, sc);
          continue;
        }
        const TensorView& pool = pool_(il, kv);
        const TensorView blk = make_view(pool.as<uint8_t>() + block * n * int64_t(dtype_size(s.dtype)), s.dtype,
                                         {n}, pool.device);
        be_->copy_from_host(nan_bytes(s.dtype, n).data(), blk);
      }
  }

 private:
  Backend* be_;
  std::function<const TensorView&(int, int)> pool_, scale_;
};

// A model (`dir`) on two CUDA backends that both record, with the GEMV kernel pinned (not the
// timed choice, which may differ between two backends) and a BF16 KV pool of `n_blocks`
// blocks of 16: run(0, b) records and replays forwards (after one eager warm-up per key),
// run(1, b) drops every recording first, so it runs the same padded shapes eagerly. The
// logits of the two must agree bit for bit.
struct RecordedAndEager {
  RecordedAndEager(const std::string& dir, int64_t n_blocks) {
    for (int i = 0; i < 2; ++i) {
      be[i] = make_backend(BackendKind::Cuda, {.graphs = true, .gemv = "custom"});
      model[i] = load_model(dir, *be[i]);
      const ModelConfig& cfg = model[i]->config();
      be[i]->init_kv_cache(KvCacheSpec{.n_layers = cfg.n_layers, .n_blocks = n_blocks, .block_size = 16,
                                       .n_kv_heads = cfg.n_kv_heads, .head_dim = cfg.head_dim,
                                       .dtype = DType::BF16});
    }
  }
  cuda::CudaBackend& recording() { return dynamic_cast<cuda::CudaBackend&>(*be[0]); }
  std::vector<float> run(int i, const Batch& batch) {
    if (i == 1) be[i]->graph_reset();
    const TensorView logits = run_forward(*model[i], *be[i], batch);
    std::vector<float> out(size_t(logits.numel()));
    be[i]->copy_to_host(logits, out.data());
    return out;
  }
  std::unique_ptr<Backend> be[2];
  std::unique_ptr<Model> model[2];
};

}  // namespace tf::test

#include "backend/host_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "core/error.h"

namespace tf {

float load_f32(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::F32: return static_cast<const float*>(data)[i];
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    default: TF_ASSERT(false, "load_f32: dtype {} is not a float type", dtype_name(dtype));
  }
  return 0;
}

void store_f32(void* data, DType dtype, int64_t i, float v) {
  switch (dtype) {
    case DType::F32: static_cast<float*>(data)[i] = v; return;
    case DType::BF16: static_cast<uint16_t*>(data)[i] = f32_to_bf16(v); return;
    case DType::F16: static_cast<uint16_t*>(data)[i] = f32_to_f16(v); return;
    default: TF_ASSERT(false, "store_f32: dtype {} is not a float type", dtype_name(dtype));
  }
}

void store_row_f32(void* data, DType dtype, int64_t offset, int64_t n, const float* src) {
  switch (dtype) {
    case DType::F32: std::memcpy(static_cast<float*>(data) + offset, src, size_t(n) * 4); return;
    case DType::BF16: {
      uint16_t* dst = static_cast<uint16_t*>(data) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::F16: {
      uint16_t* dst = static_cast<uint16_t*>(data) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
      return;
    }
    default: TF_ASSERT(false, "store_row_f32: dtype {} is not a float type", dtype_name(dtype));
  }
}

void load_row_f32(const void* data, DType dtype, int64_t offset, int64_t n, float* dst) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(dst, static_cast<const float*>(data) + offset, size_t(n) * 4);
      return;
    case DType::BF16: {
      // Written so the compiler vectorises it: widen, shift into the high half, reinterpret.
      const uint16_t* src = static_cast<const uint16_t*>(data) + offset;
      uint32_t* out = reinterpret_cast<uint32_t*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = uint32_t(src[i]) << 16;
      return;
    }
    case DType::F16: {
#if defined(__F16C__)
      const _Float16* src = static_cast<const _Float16*>(data) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = float(src[i]);  // vcvtph2ps
#else
      // Without F16C the compiler converts _Float16 with a library call per element (10x
      // slower than BF16 here); detail::f16_to_f32_soft vectorises instead. Bit-exact for all
      // 65536 inputs (tests/backend/test_host_backend.cpp).
      const uint16_t* src = static_cast<const uint16_t*>(data) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = detail::f16_to_f32_soft(src[i]);
#endif
      return;
    }
    default: TF_ASSERT(false, "load_row_f32: dtype {} is not a float type", dtype_name(dtype));
  }
}

TensorView HostBackend::alloc(DType dtype, std::initializer_list<int64_t> shape) {
  TensorView v = make_view(nullptr, dtype, shape);
  const size_t bytes = (v.nbytes() + 63) / 64 * 64;
  // Contents are undefined (not cleared): no op reads memory it did not write, and leaving
  // a large KV pool untouched means its pages cost nothing until sequences fill them.
  auto* p = static_cast<uint8_t*>(::operator new[](bytes ? bytes : 64, std::align_val_t(64)));
  buffers_.emplace_back(p);
  v.data = p;
  return v;
}

void HostBackend::release(const TensorView& buf) {
  for (auto& b : buffers_) {
    if (b.get() == buf.data) {
      b = std::move(buffers_.back());
      buffers_.pop_back();
      return;
    }
  }
}

TensorView HostBackend::upload(const TensorView& host, DType dtype) {
  // zero copy: use the mapped bytes in place (a quantized view's scales and zeros with them)
  if (host.dtype == dtype) return host;
  TF_ASSERT(!dtype_is_quantized(host.dtype) && !dtype_is_quantized(dtype),
            "upload {} as {}: quantized weights are uploaded in their own format (quantize them first)",
            dtype_name(host.dtype), dtype_name(dtype));
  TensorView out = host;
  TensorView buf = alloc(dtype, {host.numel()});
  out.data = buf.data;
  out.dtype = dtype;
  for (int64_t i = 0; i < host.numel(); ++i)
    store_f32(out.data, dtype, i, load_f32(host.data, host.dtype, i));
  return out;
}

void HostBackend::copy_to_host(const TensorView& src, void* dst) {
  std::memcpy(dst, src.data, src.nbytes());
}

void HostBackend::copy_from_host(const void* src, const TensorView& dst) {
  std::memcpy(dst.data, src, dst.nbytes());
}

void HostBackend::init_kv_cache(const KvCacheSpec& spec) {
  TF_ASSERT(spec.dtype == DType::F32 || spec.dtype == DType::BF16 || spec.dtype == DType::F16 ||
                kv_dtype_scaled(spec.dtype),
            "host backends store KV as F32/BF16/F16/I8/FP8, not {}", dtype_name(spec.dtype));
  kv_spec_ = spec;
  TF_ASSERT(spec.group_blocks.empty() || (int64_t(spec.layer_group.size()) == spec.n_layers &&
                                          spec.group_blocks[0] == spec.n_blocks),
            "KV groups: {} layer entries for {} layers", spec.layer_group.size(), spec.n_layers);
  TF_ASSERT(spec.layer_kv_heads.empty() || int64_t(spec.layer_kv_heads.size()) == spec.n_layers,
            "KV heads of {} layers for {} layers", spec.layer_kv_heads.size(), spec.n_layers);
  for (auto* pools : {&k_cache_, &v_cache_, &k_scale_, &v_scale_}) {
    for (const auto& t : *pools)
      if (t.data) release(t);
    pools->clear();
  }
  for (int64_t il = 0; il < spec.n_layers; ++il) {
    const int64_t rows = spec.blocks_of(il) * spec.kv_heads_of(il) * spec.block_size;
    k_cache_.push_back(alloc(spec.dtype, {rows, spec.head_dim}));
    v_cache_.push_back(alloc(spec.dtype, {rows, spec.head_dim}));
    const bool scaled = kv_dtype_scaled(spec.dtype);
    k_scale_.push_back(scaled ? alloc(DType::F32, {rows}) : TensorView{});
    v_scale_.push_back(scaled ? alloc(DType::F32, {rows}) : TensorView{});
  }
}

void HostBackend::set_batch(const Batch& batch) {
  TF_ASSERT(batch.n_kv_groups == kv_spec_.n_groups(), "a batch of {} KV groups for a KV cache of {}",
            batch.n_kv_groups, kv_spec_.n_groups());
  batch_ = batch;
}

void HostBackend::take_token_ids(const TensorView& ids, std::span<const int32_t> rows) {
  TF_ASSERT(ids.dtype == DType::I32 && rows.size() <= batch_.token_ids.size(),
            "take_token_ids: {} ids ({}) for a batch of {} tokens", rows.size(), dtype_name(ids.dtype),
            batch_.token_ids.size());
  for (size_t j = 0; j < rows.size(); ++j) {
    TF_ASSERT(rows[j] >= 0 && rows[j] < ids.numel(), "take_token_ids: row {} of {} ids", rows[j], ids.numel());
    batch_.token_ids[j] = ids.as<const int32_t>()[rows[j]];
  }
}

void HostBackend::scale(const TensorView& x, float s) {
  TF_ASSERT(x.dtype == DType::F32, "scale: {} {}", dtype_name(x.dtype), x.shape_str());
  float* v = x.as<float>();
  const int64_t n = x.numel();
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) v[i] *= s;
}

// Softmax in double over each row, then a selection of the top_k by (probability
// descending, expert id ascending); the same on both host backends (a row of n_experts is
// too small for threads to pay).
void HostBackend::moe_route(const TensorView& logits, const MoeParams& p, const TensorView& ids,
                            const TensorView& weights) {
  const int64_t rows = logits.n_dims == 2 ? logits.shape[0] : 0, ne = p.n_experts, k = p.top_k;
  TF_ASSERT(logits.n_dims == 2 && logits.dtype == DType::F32 && logits.shape[1] == ne && k >= 1 && k <= ne,
            "moe_route: logits {} {} for {} experts, top {}", dtype_name(logits.dtype), logits.shape_str(), ne, k);
  TF_ASSERT(ids.dtype == DType::I32 && ids.numel() == rows * k && weights.dtype == DType::F32 &&
                weights.numel() == rows * k,
            "moe_route: ids {} {}, weights {} {} for {} rows of top {}", dtype_name(ids.dtype), ids.shape_str(),
            dtype_name(weights.dtype), weights.shape_str(), rows, k);
  std::vector<double> prob(static_cast<size_t>(ne));
  std::vector<int32_t> order(static_cast<size_t>(ne));
  for (int64_t r = 0; r < rows; ++r) {
    const float* l = logits.as<const float>() + r * ne;
    const double mx = *std::max_element(l, l + ne);
    double sum = 0;
    for (int64_t e = 0; e < ne; ++e) sum += (prob[size_t(e)] = std::exp(double(l[e]) - mx));
    for (int64_t e = 0; e < ne; ++e) {
      prob[size_t(e)] /= sum;
      order[size_t(e)] = int32_t(e);
    }
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return prob[size_t(a)] != prob[size_t(b)] ? prob[size_t(a)] > prob[size_t(b)] : a < b;
    });
    double top = 0;
    for (int64_t j = 0; j < k; ++j) top += prob[size_t(order[size_t(j)])];
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = order[size_t(j)];
      ids.as<int32_t>()[r * k + j] = e;
      weights.as<float>()[r * k + j] = float(p.renormalize ? prob[size_t(e)] / top : prob[size_t(e)]);
    }
  }
}

void HostBackend::add(const TensorView& residual, const TensorView& delta) {
  TF_ASSERT(residual.dtype == DType::F32 && delta.dtype == DType::F32 && residual.numel() == delta.numel(),
            "add: residual {} {}, delta {} {}", dtype_name(residual.dtype), residual.shape_str(),
            dtype_name(delta.dtype), delta.shape_str());
  float* x = residual.as<float>();
  const float* d = delta.as<const float>();
  const int64_t n = residual.numel();
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] += d[i];
}

void HostBackend::argmax_rows(const TensorView& logits, const TensorView& ids) {
  TF_ASSERT(logits.n_dims == 2 && logits.dtype == DType::F32, "argmax_rows logits: {} {}", dtype_name(logits.dtype),
            logits.shape_str());
  TF_ASSERT(ids.dtype == DType::I32 && ids.numel() == logits.shape[0], "argmax_rows ids: {} {} for {} rows",
            dtype_name(ids.dtype), ids.shape_str(), logits.shape[0]);
  const int64_t n = logits.shape[1];
  for (int64_t r = 0; r < logits.shape[0]; ++r) {
    const float* row = logits.as<const float>() + r * n;
    int64_t best = 0;
    for (int64_t j = 1; j < n; ++j)
      if (row[j] > row[best]) best = j;  // strict: ties keep the lowest id
    ids.as<int32_t>()[r] = int32_t(best);
  }
}

}  // namespace tf

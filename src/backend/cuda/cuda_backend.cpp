// Front half of the CUDA backend: memory, the KV pool, the batch, and per op the shape and
// dtype checks before one launcher call (the kernels live in the .cu files beside this).
// A .cpp, not a .cu: it includes core/error.h, whose fmt format strings nvcc rejects.
#include "backend/cuda/cuda_backend.h"

#include <cublas_v2.h>

#include <algorithm>
#include <cstring>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/gemm.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/norm.cuh"
#include "backend/cuda/rope_kv.cuh"
#include "backend/cuda/sample.cuh"
#include "backend/cuda_factory.h"
#include "backend/shape_checks.h"

namespace tf {

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opt) {
  return std::make_unique<cuda::CudaBackend>(opt);
}

namespace cuda {
namespace {

using bf16 = __nv_bfloat16;

bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

// A tensor an op reads or writes: on the GPU, of the expected dtype.
void check_dev(const TensorView& t, DType dtype, const char* what) {
  TF_ASSERT(t.data && t.device == Device::Cuda, "{}: not a CUDA tensor (allocate it with the CUDA backend)", what);
  TF_ASSERT(t.dtype == dtype, "{}: dtype {}, the CUDA backend wants {}", what, dtype_name(t.dtype),
            dtype_name(dtype));
}

const bf16* bf(const TensorView& t) { return static_cast<const bf16*>(t.data); }
bf16* bf_mut(const TensorView& t) { return static_cast<bf16*>(t.data); }

float host_load(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::F32: return t.as<const float>()[i];
    case DType::BF16: return bf16_to_f32(t.as<const uint16_t>()[i]);
    default: return f16_to_f32(t.as<const uint16_t>()[i]);
  }
}

}  // namespace

// cuBLAS gets a fixed workspace so that GEMMs recorded into a CUDA Graph never allocate.
constexpr size_t kCublasWorkspaceBytes = 32u << 20;

static void check_options(const BackendOptions& o) {
  if (o.attention != "auto" && o.attention != "plain" && o.attention != "flash")
    fail("unknown attention kernel '{}' (expected auto, plain or flash)", o.attention);
  if (o.gemv != "auto" && o.gemv != "cublas" && o.gemv != "custom")
    fail("unknown gemv choice '{}' (expected auto, cublas or custom)", o.gemv);
}

CudaBackend::CudaBackend(const BackendOptions& opt) : opt_(opt) {
  check_options(opt_);
  if (opt_.profile) {
    opt_.graphs = false;  // events between ops cannot be timed inside a recording
    profiler_ = std::make_unique<OpProfiler>();
  }
  int n_devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&n_devices);
  if (e != cudaSuccess || n_devices == 0)
    fail("the CUDA backend needs a GPU, and none is usable here ({})",
         e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device found");
  TF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  TF_CUBLAS_CHECK(cublasCreate(&cublas_));
  TF_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  TF_CUDA_CHECK(cudaEventCreateWithFlags(&staged_, cudaEventDisableTiming));
  int device = 0;
  TF_CUDA_CHECK(cudaGetDevice(&device));
  TF_CUDA_CHECK(cudaDeviceGetAttribute(&n_sms_, cudaDevAttrMultiProcessorCount, device));
  cublas_workspace_ = alloc_bytes(kCublasWorkspaceBytes);
  TF_CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspaceBytes));
}

CudaBackend::~CudaBackend() {
  // Errors are ignored here: a destructor must not throw, and the process may be unwinding
  // from a CUDA error already.
  if (capturing_) {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(stream_, &g);
    if (g) cudaGraphDestroy(g);
  }
  for (auto& [key, r] : graphs_)
    if (r.exec) cudaGraphExecDestroy(r.exec);
  if (stream_) cudaStreamSynchronize(stream_);
  for (void* p : buffers_) cudaFree(p);
  if (batch_device_) cudaFree(batch_device_);
  if (batch_pinned_) cudaFreeHost(batch_pinned_);
  if (staged_) cudaEventDestroy(staged_);
  if (cublas_) cublasDestroy(cublas_);
  if (stream_) cudaStreamDestroy(stream_);
}

// ---- memory ---------------------------------------------------------------------------------

void* CudaBackend::alloc_bytes(size_t bytes) {
  void* p = nullptr;
  TF_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 256)));
  buffers_.insert(p);
  return p;
}

TensorView CudaBackend::alloc(DType dtype, std::initializer_list<int64_t> shape) {
  TensorView v = make_view(nullptr, dtype, shape, Device::Cuda);
  v.data = alloc_bytes(v.nbytes());
  return v;
}

void CudaBackend::release(const TensorView& buf) {
  auto it = buffers_.find(buf.data);
  if (it == buffers_.end()) return;
  TF_ASSERT(!capturing_, "release() while a CUDA Graph is being recorded");
  TF_CUDA_CHECK(cudaStreamSynchronize(stream_));  // kernels queued on it may still read it
  TF_CUDA_CHECK(cudaFree(buf.data));
  buffers_.erase(it);
}

TensorView CudaBackend::upload(const TensorView& host, DType dtype) {
  TF_ASSERT(is_float(dtype) && is_float(host.dtype), "CUDA upload: {} -> {}: only float weights are supported",
            dtype_name(host.dtype), dtype_name(dtype));
  TensorView out = host;
  out.dtype = DType::BF16;  // see the header: weights are BF16 on this backend
  out.device = Device::Cuda;
  out.data = alloc_bytes(out.nbytes());
  const int64_t n = host.numel();
  if (host.dtype == DType::BF16) {
    TF_CUDA_CHECK(cudaMemcpyAsync(out.data, host.data, out.nbytes(), cudaMemcpyHostToDevice, stream_));
  } else {
    std::vector<uint16_t> tmp(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) tmp[size_t(i)] = f32_to_bf16(host_load(host, i));
    TF_CUDA_CHECK(cudaMemcpyAsync(out.data, tmp.data(), out.nbytes(), cudaMemcpyHostToDevice, stream_));
    TF_CUDA_CHECK(cudaStreamSynchronize(stream_));  // before tmp goes away
  }
  TF_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return out;
}

void CudaBackend::copy_to_host(const TensorView& src, void* dst) {
  TF_ASSERT(src.device == Device::Cuda, "copy_to_host: source is not a CUDA tensor");
  TF_CUDA_CHECK(cudaMemcpyAsync(dst, src.data, src.nbytes(), cudaMemcpyDeviceToHost, stream_));
  TF_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy_from_host(const void* src, const TensorView& dst) {
  TF_ASSERT(dst.device == Device::Cuda, "copy_from_host: destination is not a CUDA tensor");
  TF_CUDA_CHECK(cudaMemcpyAsync(dst.data, src, dst.nbytes(), cudaMemcpyHostToDevice, stream_));
  TF_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::synchronize() { TF_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

// ---- KV pool and batch ----------------------------------------------------------------------

void CudaBackend::free_kv_cache() {
  graph_reset();
  for (auto* pools : {&k_cache_, &v_cache_, &k_scale_, &v_scale_}) {
    for (const TensorView& t : *pools) release(t);
    pools->clear();
  }
}

void CudaBackend::init_kv_cache(const KvCacheSpec& spec) {
  if (!is_float(spec.dtype) && spec.dtype != DType::I8)
    fail("the CUDA backend stores KV as bf16, f16, f32 or int8, not {}", dtype_name(spec.dtype));
  TF_ASSERT(spec.head_dim <= kAttnMaxHeadDim, "head_dim {}: the CUDA kernels take head_dim <= {}", spec.head_dim,
            kAttnMaxHeadDim);
  TF_ASSERT(spec.n_layers > 0 && spec.n_blocks > 0 && spec.block_size > 0 && spec.n_kv_heads > 0 &&
                spec.head_dim > 0,
            "init_kv_cache: empty spec");
  free_kv_cache();
  kv_spec_ = spec;
  // One more block than asked for: the padding block (pad_kv_block), outside the views.
  const int64_t rows = spec.n_blocks * spec.n_kv_heads * spec.block_size;
  const int64_t rows_alloc = (spec.n_blocks + 1) * spec.n_kv_heads * spec.block_size;
  auto view_of = [&](DType dt, std::initializer_list<int64_t> alloc_shape, int64_t n_rows) {
    TensorView v = alloc(dt, alloc_shape);
    v.shape[0] = n_rows;
    return v;
  };
  for (int64_t il = 0; il < spec.n_layers; ++il) {
    k_cache_.push_back(view_of(spec.dtype, {rows_alloc, spec.head_dim}, rows));
    v_cache_.push_back(view_of(spec.dtype, {rows_alloc, spec.head_dim}, rows));
    if (spec.dtype == DType::I8) {
      k_scale_.push_back(view_of(DType::F32, {rows_alloc}, rows));
      v_scale_.push_back(view_of(DType::F32, {rows_alloc}, rows));
    }
  }
}

// Packs the batch arrays back to back (each padded to 32 elements, 128 bytes) into the pinned
// staging buffer and copies them to the device buffer in one cudaMemcpyAsync. Growing either
// buffer waits for the stream (kernels may still read the old device buffer); a grown buffer
// has new addresses, which a captured CUDA Graph would have to be re-captured for.
void CudaBackend::set_batch(const Batch& b) {
  const size_t n_tokens = size_t(b.n_tokens()), n_seqs = size_t(b.n_seqs());
  TF_ASSERT(b.positions.size() == n_tokens && b.slot_mapping.size() == n_tokens && b.seq_starts.size() >= 1 &&
                b.context_lens.size() == n_seqs && b.block_tables.size() == n_seqs * size_t(b.max_blocks),
            "set_batch: inconsistent batch ({} tokens, {} sequences)", n_tokens, n_seqs);
  batch_ = b;
  // Attention work lists: one-token sequences for the decode kernel, the tokens of longer
  // chunks for the plain kernel.
  decode_seqs_.clear();
  decode_tokens_.clear();
  plain_tokens_.clear();
  flash_tiles_.clear();
  // Chunks long enough (or any, when asked) go to the tiled kernel in tiles of 64 rows.
  const bool flash_ok = flash_supported(kv_spec_.head_dim) && opt_.attention != "plain";
  const int32_t flash_min = opt_.attention == "flash" ? 2 : kFlashMinRows;
  for (int32_t s = 0; s < b.n_seqs(); ++s) {
    const int32_t begin = b.seq_starts[size_t(s)], end = b.seq_starts[size_t(s) + 1];
    if (end - begin == 1) {
      decode_seqs_.push_back(s);
      decode_tokens_.push_back(begin);
    } else if (flash_ok && end - begin >= flash_min) {
      for (int32_t t = begin; t < end; t += 64) flash_tiles_.insert(flash_tiles_.end(), {s, t, std::min(64, end - t)});
    } else {
      for (int32_t t = begin; t < end; ++t) plain_tokens_.push_back(t);
    }
  }
  // Decode split size: enough splits of the longest context that about four thread blocks
  // per SM are busy (the grid, decode_grid_splits(), is fixed by the batch shape), at least
  // 32 keys each.
  int32_t max_ctx = 1;
  for (int32_t s : decode_seqs_) max_ctx = std::max(max_ctx, b.context_lens[size_t(s)]);
  const int64_t want = decode_want_splits(int64_t(decode_seqs_.size()));
  const int64_t per_split = (max_ctx + want - 1) / want;
  split_keys_.assign(1, int32_t(std::max<int64_t>(32, (per_split + 31) / 32 * 32)));
  const std::vector<int32_t>* arrays[] = {&b.token_ids,    &b.positions,    &b.seq_starts,   &b.context_lens,
                                          &b.block_tables, &b.slot_mapping, &b.logits_rows,  &decode_seqs_,
                                          &decode_tokens_, &plain_tokens_,  &split_keys_,   &flash_tiles_};
  constexpr size_t kArrays = std::size(arrays);
  size_t offsets[kArrays], total = 0;
  for (size_t i = 0; i < kArrays; ++i) {
    offsets[i] = total;
    total += (arrays[i]->size() + 31) / 32 * 32;
  }
  TF_CUDA_CHECK(cudaEventSynchronize(staged_));  // the previous copy has left the pinned buffer
  if (total > batch_capacity_) {
    graph_reset();  // recordings read the old buffer
    TF_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (batch_device_) TF_CUDA_CHECK(cudaFree(batch_device_));
    if (batch_pinned_) TF_CUDA_CHECK(cudaFreeHost(batch_pinned_));
    batch_device_ = nullptr;
    batch_pinned_ = nullptr;
    batch_capacity_ = std::max(total, 2 * batch_capacity_);
    void *device = nullptr, *pinned = nullptr;
    TF_CUDA_CHECK(cudaMalloc(&device, batch_capacity_ * sizeof(int32_t)));
    batch_device_ = static_cast<int32_t*>(device);
    TF_CUDA_CHECK(cudaMallocHost(&pinned, batch_capacity_ * sizeof(int32_t)));
    batch_pinned_ = static_cast<int32_t*>(pinned);
  }
  for (size_t i = 0; i < kArrays; ++i)
    if (!arrays[i]->empty())
      std::memcpy(batch_pinned_ + offsets[i], arrays[i]->data(), arrays[i]->size() * sizeof(int32_t));
  if (total > 0)
    TF_CUDA_CHECK(cudaMemcpyAsync(batch_device_, batch_pinned_, total * sizeof(int32_t), cudaMemcpyHostToDevice,
                                  stream_));
  TF_CUDA_CHECK(cudaEventRecord(staged_, stream_));
  dev_batch_ = BatchArgs{.token_ids = batch_device_ + offsets[0],
                         .positions = batch_device_ + offsets[1],
                         .seq_starts = batch_device_ + offsets[2],
                         .context_lens = batch_device_ + offsets[3],
                         .block_tables = batch_device_ + offsets[4],
                         .slot_mapping = batch_device_ + offsets[5],
                         .logits_rows = batch_device_ + offsets[6],
                         .decode_seqs = batch_device_ + offsets[7],
                         .decode_tokens = batch_device_ + offsets[8],
                         .plain_tokens = batch_device_ + offsets[9],
                         .flash_tiles = batch_device_ + offsets[11],
                         .split_keys = batch_device_ + offsets[10],
                         .n_tokens = b.n_tokens(),
                         .n_seqs = b.n_seqs(),
                         .max_blocks = b.max_blocks,
                         .n_out = b.n_out(),
                         .n_decode = int32_t(decode_seqs_.size()),
                         .n_plain = int32_t(plain_tokens_.size()),
                         .n_flash = int32_t(flash_tiles_.size() / 3)};
}

// ---- ops --------------------------------------------------------------------------------------

void CudaBackend::embedding(const TensorView& table, const TensorView& out) {
  OpScope scope(prof(), "embedding", stream_);
  check_dev(table, DType::BF16, "embedding table");
  check_dev(out, DType::BF16, "embedding out");
  TF_ASSERT(table.n_dims == 2, "embedding table: shape {}", table.shape_str());
  const int64_t d = table.shape[1];
  check_2d(out, batch_.n_tokens(), d, "embedding out");
  for (int32_t id : batch_.token_ids)
    TF_ASSERT(id >= 0 && id < table.shape[0], "token id {} out of range", id);
  launch_embedding(bf(table), dev_batch_.token_ids, batch_.n_tokens(), d, bf_mut(out), stream_);
}

void CudaBackend::rms_norm(const TensorView& x, const TensorView& w, float eps, const TensorView& out) {
  OpScope scope(prof(), "rms_norm", stream_);
  check_dev(x, DType::BF16, "rms_norm x");
  check_dev(w, DType::BF16, "rms_norm w");
  check_dev(out, DType::BF16, "rms_norm out");
  const int64_t d = x.row_size();
  check_2d(out, x.n_rows(), d, "rms_norm out");
  TF_ASSERT(w.numel() == d, "rms_norm w: shape {} for rows of {}", w.shape_str(), d);
  launch_rms_norm(RmsNormArgs{.x = bf_mut(x), .w = bf(w), .out = bf_mut(out), .rows = x.n_rows(), .d = d, .eps = eps},
                  stream_);
}

void CudaBackend::add_rms_norm(const TensorView& residual, const TensorView& delta, const TensorView& w, float eps,
                               const TensorView& out) {
  OpScope scope(prof(), "add_rms_norm", stream_);
  check_dev(residual, DType::BF16, "add_rms_norm residual");
  check_dev(delta, DType::BF16, "add_rms_norm delta");
  check_dev(w, DType::BF16, "add_rms_norm w");
  check_dev(out, DType::BF16, "add_rms_norm out");
  const int64_t d = residual.row_size(), rows = residual.n_rows();
  check_2d(delta, rows, d, "add_rms_norm delta");
  check_2d(out, rows, d, "add_rms_norm out");
  TF_ASSERT(w.numel() == d, "add_rms_norm w: shape {} for rows of {}", w.shape_str(), d);
  if (!opt_.fusion) {  // the same result as two kernels: the add, then the norm
    launch_add(bf_mut(residual), bf(delta), rows * d, stream_);
    launch_rms_norm(RmsNormArgs{.x = bf_mut(residual), .w = bf(w), .out = bf_mut(out), .rows = rows, .d = d,
                                .eps = eps},
                    stream_);
    return;
  }
  launch_rms_norm(RmsNormArgs{.x = bf_mut(residual), .delta = bf(delta), .w = bf(w), .out = bf_mut(out),
                              .rows = rows, .d = d, .eps = eps},
                  stream_);
}

void CudaBackend::matmul(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out) {
  check_matmul(x, w, bias, out);
  check_dev(x, DType::BF16, "matmul x");
  check_dev(w, DType::BF16, "matmul w");
  if (bias.data) check_dev(bias, DType::BF16, "matmul bias");
  TF_ASSERT(out.dtype == DType::BF16 || out.dtype == DType::F32, "matmul out: dtype {}", dtype_name(out.dtype));
  check_dev(out, out.dtype, "matmul out");
  TF_ASSERT(x.shape[0] <= INT32_MAX && x.shape[1] <= INT32_MAX && w.shape[0] <= INT32_MAX,
            "matmul: dims beyond cuBLAS's int");
  OpScope scope(prof(), profiler_ ? fmt::format("matmul rows={} k={} m={}", x.shape[0], x.shape[1], w.shape[0]) : "",
                stream_);
  const GemmArgs g{.x = bf(x), .w = bf(w), .bias = bias.data ? bf(bias) : nullptr, .out = out.data,
                   .out_f32 = out.dtype == DType::F32, .rows = x.shape[0], .k = x.shape[1], .m = w.shape[0]};
  if (use_gemv(g))
    launch_gemv(g, stream_);
  else
    launch_gemm(cublas_, g, stream_);
}

// cuBLAS or the GEMV kernel for a small-batch shape: as asked (BackendOptions::gemv), or in
// auto mode the one that was faster when the shape was first seen: each timed over 5 runs
// after a warm-up, with CUDA events on this stream. A shape first seen while a graph is being
// recorded (never, when the model runs a key eagerly before recording it) gets cuBLAS.
bool CudaBackend::use_gemv(const GemmArgs& g) {
  if (!gemv_supported(g) || opt_.gemv == "cublas") return false;
  if (opt_.gemv == "custom") return true;
  const auto key = std::make_tuple(g.rows, g.k, g.m, g.out_f32, g.bias != nullptr);
  if (auto it = gemv_.find(key); it != gemv_.end()) return it->second.custom;
  if (capturing_) return false;
  cudaEvent_t ev[3];
  for (cudaEvent_t& e : ev) TF_CUDA_CHECK(cudaEventCreate(&e));
  constexpr int kReps = 5;
  launch_gemm(cublas_, g, stream_);
  launch_gemv(g, stream_);
  TF_CUDA_CHECK(cudaEventRecord(ev[0], stream_));
  for (int i = 0; i < kReps; ++i) launch_gemm(cublas_, g, stream_);
  TF_CUDA_CHECK(cudaEventRecord(ev[1], stream_));
  for (int i = 0; i < kReps; ++i) launch_gemv(g, stream_);
  TF_CUDA_CHECK(cudaEventRecord(ev[2], stream_));
  TF_CUDA_CHECK(cudaEventSynchronize(ev[2]));
  float ms_cublas = 0, ms_custom = 0;
  TF_CUDA_CHECK(cudaEventElapsedTime(&ms_cublas, ev[0], ev[1]));
  TF_CUDA_CHECK(cudaEventElapsedTime(&ms_custom, ev[1], ev[2]));
  for (cudaEvent_t& e : ev) TF_CUDA_CHECK(cudaEventDestroy(e));
  GemvChoice c{.cublas_us = 1e3 * ms_cublas / kReps, .custom_us = 1e3 * ms_custom / kReps};
  c.custom = c.custom_us < c.cublas_us;
  gemv_[key] = c;
  return c.custom;
}

std::vector<std::string> CudaBackend::tuning_report() const {
  std::vector<std::string> lines;
  if (profiler_) lines = profiler_->report();
  for (const auto& [key, c] : gemv_) {
    const auto& [rows, k, m, f32, bias] = key;
    lines.push_back(fmt::format("matmul rows={} k={} m={}{}{}: cublas {:.1f} us, gemv {:.1f} us -> {}", rows, k, m,
                                f32 ? " f32-out" : "", bias ? " bias" : "", c.cublas_us, c.custom_us,
                                c.custom ? "gemv" : "cublas"));
  }
  return lines;
}

void CudaBackend::check_layer(int layer, const AttentionParams& p) const {
  TF_ASSERT(!k_cache_.empty(), "the KV cache is not initialized (init_kv_cache)");
  TF_ASSERT(layer >= 0 && layer < int(kv_spec_.n_layers), "layer {} of a {}-layer KV cache", layer,
            kv_spec_.n_layers);
  TF_ASSERT(p.n_kv_heads == kv_spec_.n_kv_heads && p.head_dim == kv_spec_.head_dim,
            "attention params ({} kv heads, head_dim {}) vs KV cache ({}, {})", p.n_kv_heads, p.head_dim,
            kv_spec_.n_kv_heads, kv_spec_.head_dim);
  TF_ASSERT(p.n_heads > 0 && p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0, "{} heads over {} kv heads",
            p.n_heads, p.n_kv_heads);
  TF_ASSERT(p.head_dim % 2 == 0 && p.head_dim <= kAttnMaxHeadDim, "head_dim {}: the CUDA kernels take even "
            "head_dim <= {}", p.head_dim, kAttnMaxHeadDim);
}

void CudaBackend::rope_kv_write(int layer, const TensorView& qkv, const TensorView& inv_freq,
                                const AttentionParams& p) {
  OpScope scope(prof(), "rope_kv_write", stream_);
  check_layer(layer, p);
  check_dev(qkv, DType::BF16, "rope_kv_write qkv");
  check_dev(inv_freq, DType::F32, "rope_kv_write inv_freq");
  check_2d(qkv, batch_.n_tokens(), (p.n_heads + 2 * p.n_kv_heads) * p.head_dim, "rope_kv_write qkv");
  TF_ASSERT(inv_freq.numel() == p.head_dim / 2, "inv_freq: shape {} for head_dim {}", inv_freq.shape_str(),
            p.head_dim);
  launch_rope_kv_write(RopeKvArgs{.qkv = bf_mut(qkv),
                                  .inv_freq = inv_freq.as<const float>(),
                                  .k_pool = k_cache_[size_t(layer)].data,
                                  .v_pool = v_cache_[size_t(layer)].data,
                                  .kv_dtype = kv_spec_.dtype,
                                  .k_scale = k_scale_.empty() ? nullptr : k_scale_[size_t(layer)].as<float>(),
                                  .v_scale = v_scale_.empty() ? nullptr : v_scale_[size_t(layer)].as<float>(),
                                  .batch = dev_batch_,
                                  .n_heads = p.n_heads,
                                  .n_kv_heads = p.n_kv_heads,
                                  .head_dim = p.head_dim,
                                  .block_size = kv_spec_.block_size,
                                  .fused = opt_.fusion},
                       stream_);
}

void CudaBackend::attention(int layer, const TensorView& qkv, const AttentionParams& p, const TensorView& out) {
  OpScope scope(prof(), dev_batch_.n_decode == batch_.n_seqs() ? "attention (decode)" : "attention (prefill/mixed)", stream_);
  check_layer(layer, p);
  check_dev(qkv, DType::BF16, "attention qkv");
  check_dev(out, DType::BF16, "attention out");
  check_2d(qkv, batch_.n_tokens(), (p.n_heads + 2 * p.n_kv_heads) * p.head_dim, "attention qkv");
  check_2d(out, batch_.n_tokens(), p.n_heads * p.head_dim, "attention out");
  PagedAttentionArgs a{.qkv = bf(qkv),
                       .k_pool = k_cache_[size_t(layer)].data,
                       .v_pool = v_cache_[size_t(layer)].data,
                       .kv_dtype = kv_spec_.dtype,
                       .k_scale = k_scale_.empty() ? nullptr : k_scale_[size_t(layer)].as<const float>(),
                       .v_scale = v_scale_.empty() ? nullptr : v_scale_[size_t(layer)].as<const float>(),
                       .out = bf_mut(out),
                       .batch = dev_batch_,
                       .n_heads = p.n_heads,
                       .n_kv_heads = p.n_kv_heads,
                       .head_dim = p.head_dim,
                       .block_size = kv_spec_.block_size,
                       .scale = p.scale,
                       .sliding_window = p.sliding_window};
  // Prefill chunks: the plain kernel over their tokens.
  a.tokens = dev_batch_.plain_tokens;
  a.n_list = dev_batch_.n_plain;
  launch_paged_attention(a, stream_);
  launch_flash_attention(a, stream_);
  if (dev_batch_.n_decode == 0) return;
  if (!decode_supported(p.head_dim, p.n_heads / p.n_kv_heads)) {
    a.tokens = dev_batch_.decode_tokens;
    a.n_list = dev_batch_.n_decode;
    launch_paged_attention(a, stream_);
    return;
  }
  // Decode: the grid holds as many splits as set_batch may ask for (the split size itself
  // is read from device memory), a number fixed by the batch shape, so a recorded step
  // stays valid while contexts grow.
  const int64_t max_keys = int64_t(batch_.max_blocks) * kv_spec_.block_size;
  a.n_splits = int32_t(std::min(decode_want_splits(dev_batch_.n_decode), (max_keys + 31) / 32));
  if (a.n_splits > 1)
    a.workspace = attention_workspace(size_t(dev_batch_.n_decode) * size_t(p.n_heads) * size_t(a.n_splits) *
                                      size_t(p.head_dim + 2));
  launch_decode_attention(a, stream_);
}

int64_t CudaBackend::decode_want_splits(int64_t n_decode) const {
  const int64_t units = std::max<int64_t>(1, n_decode * std::max<int64_t>(1, kv_spec_.n_kv_heads));
  return std::max<int64_t>(1, (4 * int64_t(n_sms_) + units - 1) / units);
}

// Grows only; growing drops the recordings (they hold the old address). Never during a
// recording: the model runs every key eagerly first, with the same sizes.
float* CudaBackend::attention_workspace(size_t floats) {
  if (floats <= attn_ws_floats_) return attn_ws_;
  TF_ASSERT(!capturing_, "attention workspace grows while recording a CUDA Graph");
  graph_reset();
  if (attn_ws_) release(make_view(attn_ws_, DType::F32, {int64_t(attn_ws_floats_)}, Device::Cuda));
  attn_ws_floats_ = std::max(floats, 2 * attn_ws_floats_);
  attn_ws_ = static_cast<float*>(alloc_bytes(attn_ws_floats_ * sizeof(float)));
  return attn_ws_;
}

void CudaBackend::swiglu(const TensorView& gate_up, const TensorView& out) {
  OpScope scope(prof(), "swiglu", stream_);
  check_dev(gate_up, DType::BF16, "swiglu gate_up");
  check_dev(out, DType::BF16, "swiglu out");
  TF_ASSERT(out.n_dims == 2, "swiglu out: shape {}", out.shape_str());
  const int64_t rows = out.shape[0], d_ff = out.shape[1];
  check_2d(gate_up, rows, 2 * d_ff, "swiglu gate_up");
  if (opt_.fusion)
    launch_swiglu(bf(gate_up), rows, d_ff, bf_mut(out), stream_);
  else
    launch_swiglu_unfused(bf(gate_up), rows, d_ff, bf_mut(out), stream_);
}

void CudaBackend::gather_logit_rows(const TensorView& x, const TensorView& out) {
  OpScope scope(prof(), "gather_logit_rows", stream_);
  check_dev(x, x.dtype, "gather_logit_rows x");
  check_dev(out, x.dtype, "gather_logit_rows out");
  TF_ASSERT(x.n_dims == 2, "gather_logit_rows x: shape {}", x.shape_str());
  const int64_t d = x.shape[1];
  check_2d(out, batch_.n_out(), d, "gather_logit_rows out");
  for (int32_t r : batch_.logits_rows) TF_ASSERT(r >= 0 && r < x.shape[0], "logits row {} of {}", r, x.shape[0]);
  TF_ASSERT(dtype_size(x.dtype) % 2 == 0, "gather_logit_rows: dtype {}", dtype_name(x.dtype));
  launch_gather_rows(x.data, dev_batch_.logits_rows, batch_.n_out(), d * int64_t(dtype_size(x.dtype)), out.data,
                     stream_);
}

void CudaBackend::argmax_rows(const TensorView& logits, const TensorView& ids) {
  OpScope scope(prof(), "argmax_rows", stream_);
  check_dev(logits, DType::F32, "argmax_rows logits");
  check_dev(ids, DType::I32, "argmax_rows ids");
  TF_ASSERT(logits.n_dims == 2 && ids.numel() == logits.shape[0], "argmax_rows: logits {}, ids {}",
            logits.shape_str(), ids.shape_str());
  launch_argmax_rows(logits.as<const float>(), logits.shape[0], logits.shape[1], ids.as<int32_t>(), stream_);
}

bool CudaBackend::sample_rows(const TensorView& logits, const std::vector<SampleParams>& params,
                              const TensorView& ids) {
  OpScope scope(prof(), "sample_rows", stream_);
  check_dev(logits, DType::F32, "sample_rows logits");
  check_dev(ids, DType::I32, "sample_rows ids");
  TF_ASSERT(logits.n_dims == 2 && ids.numel() == logits.shape[0] && int64_t(params.size()) == logits.shape[0],
            "sample_rows: logits {}, ids {}, {} parameter rows", logits.shape_str(), ids.shape_str(), params.size());
  static_assert(sizeof(SampleParams) == sizeof(SampleRowArgs), "SampleParams and SampleRowArgs differ");
  if (params.size() > sample_args_n_) {
    if (sample_args_) release(make_view(sample_args_, DType::U8, {int64_t(sample_args_n_ * sizeof(SampleRowArgs))},
                                        Device::Cuda));
    sample_args_n_ = std::max<size_t>(params.size(), 64);
    sample_args_ = alloc_bytes(sample_args_n_ * sizeof(SampleRowArgs));
  }
  std::vector<SampleRowArgs> args(params.size());
  for (size_t i = 0; i < params.size(); ++i)
    args[i] = SampleRowArgs{.temperature = params[i].temperature, .top_k = params[i].top_k, .top_p = params[i].top_p,
                            .min_p = params[i].min_p, .u = params[i].u};
  TF_CUDA_CHECK(cudaMemcpyAsync(sample_args_, args.data(), args.size() * sizeof(SampleRowArgs),
                                cudaMemcpyHostToDevice, stream_));
  launch_sample_rows(logits.as<float>(), logits.shape[0], logits.shape[1], static_cast<SampleRowArgs*>(sample_args_),
                     ids.as<int32_t>(), stream_);
  TF_CUDA_CHECK(cudaStreamSynchronize(stream_));  // `args` is pageable host memory
  return true;
}

// ---- CUDA Graphs ------------------------------------------------------------------------------

int32_t CudaBackend::pad_kv_block() const {
  return opt_.graphs && !k_cache_.empty() ? int32_t(kv_spec_.n_blocks) : -1;
}

GraphStep CudaBackend::graph_begin(uint64_t key) {
  if (!opt_.graphs) return GraphStep::Eager;
  TF_ASSERT(!capturing_, "graph_begin while recording");
  Recording& r = graphs_[key];
  if (r.exec) {
    TF_CUDA_CHECK(cudaGraphLaunch(r.exec, stream_));
    return GraphStep::Replayed;
  }
  if (!r.seen) {
    r.seen = true;
    return GraphStep::Eager;
  }
  // Thread-local mode: another thread's unrelated CUDA calls do not break this recording.
  TF_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  capture_key_ = key;
  return GraphStep::Capture;
}

void CudaBackend::graph_end() {
  TF_ASSERT(capturing_, "graph_end without graph_begin returning Capture");
  cudaGraph_t graph = nullptr;
  capturing_ = false;
  TF_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  TF_CUDA_CHECK(e);
  graphs_[capture_key_].exec = exec;
  TF_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
}

void CudaBackend::graph_reset() {
  if (capturing_) {  // a forward threw while recording: end the recording, drop it
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream_, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // clear the capture-invalidated state
  }
  for (auto& [key, r] : graphs_)
    if (r.exec) TF_CUDA_CHECK(cudaGraphExecDestroy(r.exec));
  graphs_.clear();
}

// Device-to-device cudaMemcpyAsync of `bytes`, best of 5 after a warm-up.
double CudaBackend::measure_copy_bandwidth(int64_t bytes) {
  void* a = alloc_bytes(size_t(bytes));
  void* b = alloc_bytes(size_t(bytes));
  TF_CUDA_CHECK(cudaMemsetAsync(a, 1, size_t(bytes), stream_));
  cudaEvent_t e0, e1;
  TF_CUDA_CHECK(cudaEventCreate(&e0));
  TF_CUDA_CHECK(cudaEventCreate(&e1));
  double best = 0;
  for (int i = 0; i < 6; ++i) {
    TF_CUDA_CHECK(cudaEventRecord(e0, stream_));
    TF_CUDA_CHECK(cudaMemcpyAsync(b, a, size_t(bytes), cudaMemcpyDeviceToDevice, stream_));
    TF_CUDA_CHECK(cudaEventRecord(e1, stream_));
    TF_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    TF_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (i > 0) best = std::max(best, 2.0 * double(bytes) / (double(ms) * 1e6));
  }
  TF_CUDA_CHECK(cudaEventDestroy(e0));
  TF_CUDA_CHECK(cudaEventDestroy(e1));
  release(make_view(a, DType::U8, {bytes}, Device::Cuda));
  release(make_view(b, DType::U8, {bytes}, Device::Cuda));
  return best;
}

void CudaBackend::set_options(const BackendOptions& opt) {
  check_options(opt);
  graph_reset();  // recordings were made with the old kernels
  opt_ = opt;
  if (opt_.profile) {
    opt_.graphs = false;
    if (!profiler_) profiler_ = std::make_unique<OpProfiler>();
  }
}

int64_t CudaBackend::n_graphs() const {
  int64_t n = 0;
  for (const auto& [key, r] : graphs_) n += r.exec != nullptr;
  return n;
}

}  // namespace cuda
}  // namespace tf

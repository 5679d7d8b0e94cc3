// Front half of the CUDA backend: construction, memory, the KV pool and the batch (with its
// attention work lists). The ops' front halves are in cuda_ops.cpp, cuda_matmul.cpp,
// cuda_attention.cpp, recordings in cuda_graphs.cpp; the kernels live in the .cu files.
// These are .cpp files, not .cu: they include core/error.h, whose fmt format strings nvcc
// rejects.
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_util.h"

#include <cublas_v2.h>

#include <algorithm>
#include <cstring>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_lt.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/pdl_policy.h"
#include "backend/cuda_factory.h"
#include "quant/quantized_weight.h"

namespace tf {

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opt) {
  return std::make_unique<cuda::CudaBackend>(opt);
}

namespace cuda {

using namespace detail;

// cuBLAS gets a fixed workspace so that GEMMs recorded into a CUDA Graph never allocate.

// The process-wide PDL switches of launch.cuh, for the kernels launched (or recorded) next.
void CudaBackend::apply_pdl(const PdlSwitches& s) {
  pdl_enabled() = s.plain;
  pdl_resident_enabled() = s.resident;
}

static void check_options(const BackendOptions& o) {
  if (o.attention != "auto" && o.attention != "plain" && o.attention != "flash")
    fail("unknown attention kernel '{}' (expected auto, plain or flash)", o.attention);
  if (o.gemv != "auto" && o.gemv != "cublas" && o.gemv != "custom")
    fail("unknown gemv choice '{}' (expected auto, cublas or custom)", o.gemv);
}

CudaBackend::CudaBackend(const BackendOptions& opt) {
  set_options(opt);
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
  for (PinnedSlot* slot : {&sample_slots_[0], &sample_slots_[1], &ids_slots_[0], &ids_slots_[1]}) {
    if (slot->p) cudaFreeHost(slot->p);
    if (slot->done) cudaEventDestroy(slot->done);
  }
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
  if (host.dtype == DType::Q4_0) {  // reads_gguf_block: as W4, group 32, zero 8 (exact)
    TF_ASSERT(dtype == DType::Q4_0, "CUDA upload: Q4_0 -> {}: GGUF blocks are uploaded as stored", dtype_name(dtype));
    TF_ASSERT(host.n_dims == 2 && host.shape[1] % 32 == 0, "CUDA upload: Q4_0 tensor of shape {}: 2-d, rows of whole blocks",
              host.shape_str());
    const QuantizedWeight w4 = repack_q4_0_to_w4(host);
    return upload_quantized(w4.view());  // copies before returning
  }
  if (host.dtype == DType::W8 || host.dtype == DType::W4 || host.dtype == DType::FP8) {
    TF_ASSERT(dtype == host.dtype, "CUDA upload: {} -> {}: quantized weights keep their format", dtype_name(host.dtype),
              dtype_name(dtype));
    return upload_quantized(host);
  }
  TF_ASSERT(is_float(dtype) && is_float(host.dtype), "CUDA upload: {} -> {}: float or W8/W4/FP8 weights only",
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
  }
  TF_CUDA_CHECK(cudaStreamSynchronize(stream_));  // before tmp (or the caller's host view) goes away
  return out;
}

void CudaBackend::copy_to_host(const TensorView& src, void* dst) {
  TF_ASSERT(src.device == Device::Cuda, "copy_to_host: source is not a CUDA tensor");
  TF_CUDA_CHECK(cudaMemcpyAsync(dst, src.data, src.nbytes(), cudaMemcpyDeviceToHost, stream_));
  TF_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void* CudaBackend::pinned(PinnedSlot& s, size_t bytes) {
  if (!s.done) TF_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  TF_CUDA_CHECK(cudaEventSynchronize(s.done));  // the slot's last copy has ended (at once if none)
  if (bytes > s.bytes) {
    if (s.p) TF_CUDA_CHECK(cudaFreeHost(s.p));
    s.p = nullptr;
    s.bytes = std::max<size_t>(bytes, 4096);
    TF_CUDA_CHECK(cudaMallocHost(&s.p, s.bytes));
  }
  return s.p;
}

void CudaBackend::copy_ids_async(const TensorView& ids, int slot) {
  TF_ASSERT(slot == 0 || slot == 1, "copy_ids_async: slot {} (0 or 1)", slot);
  check_dev(ids, DType::I32, "copy_ids_async ids");
  PinnedSlot& s = ids_slots_[slot];
  void* host = pinned(s, ids.nbytes());
  TF_CUDA_CHECK(cudaMemcpyAsync(host, ids.data, ids.nbytes(), cudaMemcpyDeviceToHost, stream_));
  TF_CUDA_CHECK(cudaEventRecord(s.done, stream_));
}

const int32_t* CudaBackend::ids_copied(int slot) {
  TF_ASSERT(slot == 0 || slot == 1, "ids_copied: slot {} (0 or 1)", slot);
  PinnedSlot& s = ids_slots_[slot];
  TF_ASSERT(s.done, "ids_copied: slot {} has no copy", slot);
  TF_CUDA_CHECK(cudaEventSynchronize(s.done));
  return static_cast<const int32_t*>(s.p);
}

// The token ids lead the batch's device copy (set_batch). Runs of consecutive rows (all of them,
// when no sequence left the batch) take one copy each.
void CudaBackend::take_token_ids(const TensorView& ids, std::span<const int32_t> rows) {
  check_dev(ids, DType::I32, "take_token_ids ids");
  TF_ASSERT(int64_t(rows.size()) <= batch_.n_tokens(), "take_token_ids: {} ids for a batch of {} tokens", rows.size(),
            batch_.n_tokens());
  const int32_t* src = ids.as<const int32_t>();
  for (size_t j = 0; j < rows.size();) {
    TF_ASSERT(rows[j] >= 0 && rows[j] < ids.numel(), "take_token_ids: row {} of {} ids", rows[j], ids.numel());
    size_t n = 1;
    while (j + n < rows.size() && rows[j + n] == rows[j] + int32_t(n)) ++n;
    TF_ASSERT(rows[j] + int64_t(n) <= ids.numel(), "take_token_ids: rows {}..{} of {} ids", rows[j],
              rows[j] + int64_t(n) - 1, ids.numel());
    TF_CUDA_CHECK(cudaMemcpyAsync(batch_device_ + j, src + rows[j], n * sizeof(int32_t),
                                  cudaMemcpyDeviceToDevice, stream_));
    j += n;
  }
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
  if (!is_float(spec.dtype) && !kv_dtype_scaled(spec.dtype))
    fail("the CUDA backend stores KV as bf16, f16, f32, int8 or fp8, not {}", dtype_name(spec.dtype));
  TF_ASSERT(spec.head_dim <= kAttnMaxHeadDim, "head_dim {}: the CUDA kernels take head_dim <= {}", spec.head_dim,
            kAttnMaxHeadDim);
  TF_ASSERT(spec.n_layers > 0 && spec.n_blocks > 0 && spec.block_size > 0 && spec.n_kv_heads > 0 &&
                spec.head_dim > 0,
            "init_kv_cache: empty spec");
  TF_ASSERT(spec.group_blocks.empty() || (int64_t(spec.layer_group.size()) == spec.n_layers &&
                                          spec.group_blocks[0] == spec.n_blocks),
            "KV groups: {} layer entries for {} layers", spec.layer_group.size(), spec.n_layers);
  TF_ASSERT(spec.layer_kv_heads.empty() || int64_t(spec.layer_kv_heads.size()) == spec.n_layers,
            "KV heads of {} layers for {} layers", spec.layer_kv_heads.size(), spec.n_layers);
  free_kv_cache();
  kv_spec_ = spec;
  auto view_of = [&](DType dt, std::initializer_list<int64_t> alloc_shape, int64_t n_rows) {
    TensorView v = alloc(dt, alloc_shape);
    v.shape[0] = n_rows;
    return v;
  };
  for (int64_t il = 0; il < spec.n_layers; ++il) {
    // One more block than the layer's group asks for: the padding block (pad_kv_block),
    // outside the views.
    const int64_t rows = spec.blocks_of(il) * spec.kv_heads_of(il) * spec.block_size;
    const int64_t rows_alloc = (spec.blocks_of(il) + 1) * spec.kv_heads_of(il) * spec.block_size;
    k_cache_.push_back(view_of(spec.dtype, {rows_alloc, spec.head_dim}, rows));
    v_cache_.push_back(view_of(spec.dtype, {rows_alloc, spec.head_dim}, rows));
    if (kv_dtype_scaled(spec.dtype)) {
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
  const size_t n_tokens = size_t(b.n_tokens()), n_seqs = size_t(b.n_seqs()), n_groups = size_t(b.n_kv_groups);
  TF_ASSERT(b.n_kv_groups == kv_spec_.n_groups(), "a batch of {} KV groups for a KV cache of {}", b.n_kv_groups,
            kv_spec_.n_groups());
  TF_ASSERT(b.positions.size() == n_tokens && b.slot_mapping.size() == n_groups * n_tokens &&
                b.seq_starts.size() >= 1 && b.context_lens.size() == n_seqs &&
                b.block_tables.size() == n_groups * n_seqs * size_t(b.max_blocks),
            "set_batch: inconsistent batch ({} tokens, {} sequences, {} KV groups)", n_tokens, n_seqs, n_groups);
  batch_ = b;
  // PDL by step kind (pdl_policy.h): a decode step, recorded as a graph, runs in plain stream
  // order by default except for its grid-sized kernels; prefill and mixed steps overlap their
  // kernels except for those.
  step_pdl_ = pdl_switches(opt_, /*decode=*/n_tokens == n_seqs);
  apply_pdl(step_pdl_);
  // Attention work lists: one-token sequences for the decode kernel, the tokens of longer
  // chunks for the plain kernel.
  decode_seqs_.clear();
  decode_tokens_.clear();
  plain_tokens_.clear();
  flash_tiles_.clear();
  // Chunks long enough (or any, when asked) go to the tiled kernel in tiles of 64 rows; in
  // "auto" mode, chunks of up to kDecodeChunkMaxRows rows shorter than that (speculative
  // verifications: the last token and its proposals) take the decode kernel, one item per row.
  const bool flash_ok = flash_supported(kv_spec_.head_dim) && opt_.attention != "plain";
  const int32_t flash_min = opt_.attention == "flash" ? 2 : flash_min_rows(kv_spec_.dtype, kv_spec_.head_dim);
  const int32_t decode_max = opt_.attention == "auto" ? kDecodeChunkMaxRows : 1;
  for (int32_t s = 0; s < b.n_seqs(); ++s) {
    const int32_t begin = b.seq_starts[size_t(s)], end = b.seq_starts[size_t(s) + 1];
    if (end - begin == 1 || (end - begin <= decode_max && !(flash_ok && end - begin >= flash_min))) {
      for (int32_t t = begin; t < end; ++t) {
        decode_seqs_.push_back(s);
        decode_tokens_.push_back(t);
      }
    } else if (flash_ok && end - begin >= flash_min) {
      for (int32_t t = begin; t < end; t += 64) flash_tiles_.insert(flash_tiles_.end(), {s, t, std::min(64, end - t)});
    } else {
      for (int32_t t = begin; t < end; ++t) plain_tokens_.push_back(t);
    }
  }
  // Decode split size: enough splits of the longest context that the decode kernel's blocks
  // fill the SMs (decode_want_splits; attention() sizes the grid from the same count, so it
  // is fixed by the batch shape), a multiple of the kernel's key tile (decode_split_quantum).
  int32_t max_ctx = 1;
  for (int32_t s : decode_seqs_) max_ctx = std::max(max_ctx, b.context_lens[size_t(s)]);
  const int64_t want = decode_want_splits(int64_t(decode_seqs_.size()));
  const int64_t per_split = (max_ctx + want - 1) / want;
  const int64_t quantum = decode_split_quantum();
  split_keys_.assign(1, int32_t(std::max<int64_t>(quantum, (per_split + quantum - 1) / quantum * quantum)));
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
  if (opt.lt_split_k != opt_.lt_split_k) {  // the timed choices were made among other candidates
    gemv_.clear();
    fp8_.clear();
    lt_.reset();
  }
  if (opt.gemv_timed != opt_.gemv_timed) quant_gemv_.clear();  // the trials' picks: timed again
  opt_ = opt;
  step_pdl_ = pdl_switches(opt_, /*decode=*/false);  // until a batch says otherwise
  apply_pdl(step_pdl_);
  if (opt_.profile) {
    opt_.graphs = false;  // events between ops cannot be timed inside a recording
    if (!profiler_) profiler_ = std::make_unique<OpProfiler>();
  }
}

}  // namespace cuda
}  // namespace tf

// The CUDA backend's quantized weights: upload of W8/W4/FP8 host views, and the matmul on
// them, dispatched by shape:
//   rows <= kGemvMaxRows            the decode GEMV: a decode tile of the tensor-core kernel
//                                   (quant_gemm.cuh), the CUDA-core GEMV (gemv.cuh) or, W4
//                                   and W8 at rows <= 4, the half2 GEMV (gemv_half2.cuh), with the
//                                   GEMV's fusions, whichever was timed fastest for the
//                                   shape and fusion (launch_quant_gemv)
//   FP8, rows > kFp8MmaMaxRows      per-token FP8 activations + cuBLASLt's FP8 GEMM (W8A8)
//   rows <= kQuantMmaMaxRows        the tensor-core kernel (W4 k % 128, W8/FP8 k % 64)
//   anything else                   dequantize to BF16 scratch, then cuBLAS
// The row thresholds are where bench_quant_gemm measured the kernels cross on the H200.
#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <functional>
#include <optional>
#include <iterator>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_util.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm.cuh"
#include "backend/cuda/gemm_lt.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/gemv_half2.cuh"
#include "backend/cuda/quant_gemm.cuh"

namespace tf::cuda {

using namespace detail;

namespace {

// Bytes of a quantized weight's scale and zero arrays (quant/formats.h).
size_t scale_bytes(const TensorView& w) {
  return w.dtype == DType::W4 ? size_t(w.shape[0] * (w.shape[1] / w.group_size)) * 2 : size_t(w.shape[0]) * 4;
}
size_t zero_bytes(const TensorView& w) {
  return w.dtype == DType::W4 ? size_t(w.shape[0] * (w.shape[1] / w.group_size)) : 0;
}

}  // namespace

TensorView CudaBackend::upload_quantized(const TensorView& host) {
  check_quantized(host);
  TensorView out = host;
  out.device = Device::Cuda;
  out.data = alloc_bytes(host.nbytes());
  out.scales = alloc_bytes(scale_bytes(host));
  out.zeros = host.dtype == DType::W4 ? alloc_bytes(zero_bytes(host)) : nullptr;
  TF_CUDA_CHECK(cudaMemcpyAsync(out.data, host.data, host.nbytes(), cudaMemcpyHostToDevice, stream_));
  TF_CUDA_CHECK(cudaMemcpyAsync(out.scales, host.scales, scale_bytes(host), cudaMemcpyHostToDevice, stream_));
  if (out.zeros)
    TF_CUDA_CHECK(cudaMemcpyAsync(out.zeros, host.zeros, zero_bytes(host), cudaMemcpyHostToDevice, stream_));
  TF_CUDA_CHECK(cudaStreamSynchronize(stream_));  // before the caller's host view goes away
  return out;
}

void* CudaBackend::scratch(Scratch slot, size_t bytes) {
  Workspace& w = scratch_[int(slot)];
  if (bytes <= w.bytes) return w.p;
  TF_ASSERT(!capturing_, "scratch buffer {} grows while recording a CUDA Graph", int(slot));
  graph_reset();
  if (w.p) release(make_view(w.p, DType::U8, {int64_t(w.bytes)}, Device::Cuda));
  w.bytes = std::max(bytes, 2 * w.bytes);
  w.p = alloc_bytes(w.bytes);
  TF_CUDA_CHECK(cudaMemsetAsync(w.p, 0, w.bytes, stream_));
  return w.p;
}

// FP8 W8A8 on cuBLASLt: both scalings it offers (outer-vector scales, and the unit-scale GEMM
// with the epilogue kernel), each with every algorithm of the heuristic's list (up to
// LtGemm::kFp8Candidates) and their split-K copies, are timed once per shape (ColdTimer; first
// sight, not while a graph is being recorded) and the fastest pair kept: the heuristic ranks
// neither the scalings nor, for skinny products, its own algorithms by speed (the H200: its
// first algorithm takes 43 us for 64 rows of 4096 x 14336, whose weights stream in 14). A
// shape first seen while recording takes the heuristic's order (Auto, its first algorithm).
// Above kFp8TimedRows rows (prefill and mixed steps, whose token counts take any value up to
// the step's budget, so timing each would stall a server on every new count) only the first
// shape of each power-of-two bucket of rows is timed; the others of the bucket take its
// scaling with the heuristic's first algorithm for it (fp8_inherited). Timing writes a.out.
CudaBackend::Fp8Choice CudaBackend::fp8_choice(const Fp8GemmArgs& a, void* acc) {
  constexpr int kReps = 5;
  const GemvKey key{a.rows, a.k, a.m, a.out_f32, a.bias != nullptr};
  if (auto it = fp8_.find(key); it != fp8_.end()) return it->second;
  if (capturing_) return Fp8Choice{.scaling = Fp8Scaling::Auto};
  const bool bucketed = a.rows > kFp8TimedRows;
  const GemvKey bucket{-int64_t(std::bit_ceil(uint64_t(a.rows))), a.k, a.m, a.out_f32, a.bias != nullptr};
  if (bucketed)
    if (auto it = fp8_.find(bucket); it != fp8_.end())
      if (std::optional<Fp8Choice> c = fp8_inherited(it->second, a)) return fp8_[key] = *c;
  Fp8Choice c{.scaling = lt_->fp8_scaling(a, kCublasWorkspaceBytes)};
  ColdTimer timer(stream_);
  double best = -1;
  for (Fp8Scaling s : {Fp8Scaling::OuterVectors, Fp8Scaling::Epilogue}) {
    Fp8GemmArgs t = a;
    t.scaling = s;
    if (!lt_->fp8_available(t, kCublasWorkspaceBytes)) continue;
    const int n = lt_->fp8_algorithms(t, kCublasWorkspaceBytes);
    (s == Fp8Scaling::OuterVectors ? c.outer_tried : c.epilogue_tried) = n;
    for (int i = 0; i < n; ++i) {
      t.algo = i;
      const double us =
          timer.us([&] { lt_->run_fp8(t, cublas_workspace_, kCublasWorkspaceBytes, acc, stream_); }, kReps);
      double& slot = s == Fp8Scaling::OuterVectors ? c.outer_us : c.epilogue_us;
      if (slot < 0 || us < slot) slot = us, (s == Fp8Scaling::OuterVectors ? c.outer_algo : c.epilogue_algo) = i;
      if (best < 0 || us < best) best = us, c.scaling = s, c.algo = i;
    }
  }
  if (best >= 0) {
    Fp8GemmArgs t = a;
    t.scaling = c.scaling;
    t.algo = c.algo;
    c.config = lt_->fp8_algorithm_name(t, kCublasWorkspaceBytes);
  }
  if (bucketed) fp8_[bucket] = c;
  return fp8_[key] = c;
}

// The timed choice `from` of another shape of a's bucket, applied to a: its scaling and its
// times (which matmul_fp8_fused compares), the heuristic's first algorithm of each scaling
// for a's own shape. None where a's shape lacks the chosen scaling.
std::optional<CudaBackend::Fp8Choice> CudaBackend::fp8_inherited(const Fp8Choice& from, const Fp8GemmArgs& a) {
  Fp8Choice c = from;
  c.outer_tried = c.epilogue_tried = 0;
  for (Fp8Scaling s : {Fp8Scaling::OuterVectors, Fp8Scaling::Epilogue}) {
    Fp8GemmArgs t = a;
    t.scaling = s;
    const bool ok = lt_->fp8_available(t, kCublasWorkspaceBytes) && lt_->fp8_algorithms(t, kCublasWorkspaceBytes) > 0;
    double& us = s == Fp8Scaling::OuterVectors ? c.outer_us : c.epilogue_us;
    int& algo = s == Fp8Scaling::OuterVectors ? c.outer_algo : c.epilogue_algo;
    if (!ok && s == c.scaling) return std::nullopt;
    if (!ok) us = -1, algo = -1;
    else if (us >= 0) algo = 0;
  }
  c.algo = 0;
  Fp8GemmArgs t = a;
  t.scaling = c.scaling;
  c.config = lt_->fp8_algorithm_name(t, kCublasWorkspaceBytes);
  return c;
}

namespace {

// The kernels launch_quant_gemv times, by the number it keeps: the tensor-core tiles
// (QuantMmaTile) and these.
constexpr int kSimtGemv = -1;  // the CUDA-core GEMV (gemv.cuh)
// The W4/W8 half2 GEMV (gemv_half2.cuh): -2 - i for the launch options kHalf2Options[i].
constexpr const auto& kHalf2Options = kHalf2AllOptions;
constexpr int half2_id(int i) { return -2 - i; }
constexpr int half2_index(int id) { return -2 - id; }
constexpr int kHalf2Variants = int(std::size(kHalf2Options));

std::string quant_kernel_name(int tile) {
  if (tile == kSimtGemv) return "gemv";
  if (tile < 0) {
    const Half2Options& o = kHalf2Options[half2_index(tile)];
    if (o.imma) return "gemv-imma";
    if (o.stages > 0)
      return fmt::format("gemv-ring{}{}{}", o.stages, o.split > 1 ? fmt::format("x{}", o.split) : "",
                         o.blocks_per_sm ? fmt::format("b{}", o.blocks_per_sm) : "");
    if (o.split > 0) return fmt::format("gemv-h2s{}", o.split);
    return fmt::format("gemv-h2{}{}", o.features_per_warp == 2 ? "x2" : "", o.persistent ? "p" : "");
  }
  return quant_mma_tile_name(QuantMmaTile(tile));
}

}  // namespace

// Every kernel that takes g with f is timed once per key (ColdTimer; not while recording a
// graph: a key first seen then takes launch_gemv's rule by shape). The timing runs the call
// itself, which only writes its outputs again with the same values (Store, Swiglu, RopeKv's
// qkv rows and pool rows), except AddTo, which would add twice: it is timed as the plain
// product into scratch.
void CudaBackend::launch_quant_gemv(const GemmArgs& g, const GemvFusion& f) {
  const QuantGemvKey key{g.rows, g.k, g.m, int(g.wq.dtype), g.wq.group_size, int(f.epilogue), f.norm_w != nullptr,
                         g.bias != nullptr, g.out_f32, opt_.split_gemv};
  auto it = quant_gemv_.find(key);
  if (it == quant_gemv_.end()) {
    if (capturing_) {
      launch_gemv(g, stream_, f);
      return;
    }
    constexpr int kReps = 5;
    GemmArgs t = g;
    GemvFusion tf = f;
    if (f.epilogue == GemvEpilogue::AddTo) {
      t.out = scratch(Scratch::QuantTmp, size_t(g.rows * g.m) * 2);
      tf.epilogue = GemvEpilogue::Store;
    }
    ColdTimer timer(stream_);
    QuantGemvChoice c;
    double best = -1;
    auto consider = [&](int tile, const std::function<void()>& launch) {
      const double us = timer.us(launch, kReps);
      c.times.emplace_back(tile, us);
      if (best < 0 || us < best) best = us, c.tile = tile;
    };
    if (gemv_supported(t, tf)) consider(kSimtGemv, [&] { launch_gemv_simt(t, stream_, tf); });
    for (int i = 0; i < kHalf2Variants; ++i)
      if ((opt_.split_gemv || kHalf2Options[i].split == 0) && gemv_half2_supported(t, tf, kHalf2Options[i]))
        consider(half2_id(i), [&] { launch_gemv_half2(t, stream_, tf, kHalf2Options[i]); });
    for (QuantMmaTile tile : kQuantMmaTiles)
      if (quant_mma_supported(t, tf, tile))
        consider(int(tile), [&] { launch_quant_mma(t, stream_, tf, {.tile = tile}); });
    it = quant_gemv_.emplace(key, std::move(c)).first;
  }
  const int tile = quant_gemv_kernel(key, it->second.tile);
  if (capturing_ && std::find(capture_gemv_.begin(), capture_gemv_.end(), std::pair(key, tile)) == capture_gemv_.end())
    capture_gemv_.emplace_back(key, tile);
  if (tile == kSimtGemv)
    launch_gemv_simt(g, stream_, f);
  else if (tile < 0)
    launch_gemv_half2(g, stream_, f, kHalf2Options[half2_index(tile)]);
  else
    launch_quant_mma(g, stream_, f, {.tile = QuantMmaTile(tile)});
}

std::string CudaBackend::quant_gemv_shape(const QuantGemvKey& key) {
  constexpr const char* kEpilogue[] = {"", " +add", " +swiglu", " +rope/kv"};
  const auto& [rows, k, m, dtype, group, epi, norm, bias, f32, split] = key;
  return fmt::format("{}{} rows={} k={} m={}{}{}{}{}{}", dtype_name(DType(dtype)),
                     dtype == int(DType::W4) ? fmt::format(" g{}", group) : "", rows, k, m, norm ? " norm+" : "",
                     kEpilogue[epi], f32 ? " f32-out" : "", bias ? " bias" : "", split ? "" : " no-split");
}

std::string CudaBackend::quant_gemv_name(int kernel) { return quant_kernel_name(kernel); }

std::vector<std::string> CudaBackend::quant_gemv_report() const {
  std::vector<std::string> lines;
  for (const auto& [key, c] : quant_gemv_) {
    std::string times;
    for (const auto& [tile, us] : c.times)
      times += fmt::format("{}{} {:.1f} us", times.empty() ? "" : ", ", quant_kernel_name(tile), us);
    lines.push_back(fmt::format("quant gemv {}: {} -> {}", quant_gemv_shape(key), times, quant_kernel_name(c.tile)));
  }
  return lines;
}

bool CudaBackend::runs_w8a8(const GemmArgs& g) const {
  if (g.wq.dtype != DType::FP8 || (g.rows <= kGemvMaxRows && gemv_supported(g))) return false;
  if (!LtGemm::fp8_supported(Fp8GemmArgs{.rows = g.rows, .k = g.k, .m = g.m})) return false;
  return !quant_mma_supported(g) || g.rows > kFp8MmaMaxRows;
}

void CudaBackend::matmul_quant(const GemmArgs& g) {
  OpScope scope(prof(),
                prof() ? fmt::format("matmul {} rows={} k={} m={}", dtype_name(g.wq.dtype), g.rows, g.k, g.m) : "",
                stream_);
  if (g.rows <= kGemvMaxRows && gemv_supported(g)) {
    launch_quant_gemv(g, {});
    return;
  }
  Fp8GemmArgs a{.wq = g.wq.q, .w_scale = static_cast<const float*>(g.wq.scales), .bias = g.bias, .out = g.out,
                .out_f32 = g.out_f32, .rows = g.rows, .k = g.k, .m = g.m, .acc_f32 = opt_.fp8_sums_f32};
  const bool w8a8 = g.wq.dtype == DType::FP8 && LtGemm::fp8_supported(a);
  if (quant_mma_supported(g) && g.rows <= (g.wq.dtype == DType::FP8 && w8a8 ? kFp8MmaMaxRows : kQuantMmaMaxRows)) {
    const size_t ws = quant_mma_workspace_bytes(g);
    launch_quant_mma(g, stream_, {},
                     {.workspace = ws ? scratch(Scratch::QuantMma, ws) : nullptr, .workspace_bytes = ws});
    return;
  }
  if (w8a8) {
    auto* xq = static_cast<uint8_t*>(scratch(Scratch::Fp8Act, size_t(g.rows * g.k)));
    auto* xs = static_cast<float*>(scratch(Scratch::Fp8Scale, size_t(g.rows) * 4));
    launch_quantize_rows_fp8(g.x, g.rows, g.k, xq, xs, stream_);
    a.xq = xq;
    a.x_scale = xs;
    if (!lt_) lt_ = std::make_unique<LtGemm>(opt_.lt_split_k);
    void* acc = scratch(Scratch::QuantTmp, size_t(g.rows * g.m) * (a.sums_f32() ? 4 : 2));
    const Fp8Choice choice = fp8_choice(a, acc);
    a.scaling = choice.scaling;
    a.algo = choice.algo;
    lt_->run_fp8(a, cublas_workspace_, kCublasWorkspaceBytes, acc, stream_);
    return;
  }
  auto* w16 = static_cast<bf16*>(scratch(Scratch::QuantTmp, size_t(g.m * g.k) * 2));
  launch_dequantize(g.wq, g.m, g.k, w16, stream_);
  GemmArgs plain = g;
  plain.w = w16;
  plain.wq = {};
  launch_gemm(cublas_, plain, stream_);
}

}  // namespace tf::cuda

// The CUDA backend's residual add and fused matmul (Backend::matmul_fused): the decode GEMV
// with its RMSNorm prologue and residual-add / SwiGLU epilogue as one kernel where that pays
// (gemv.cu), otherwise the plain kernels in turn, with cuBLAS adding into the residual itself.
#include <fmt/format.h>

#include <utility>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_util.h"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/gemm.cuh"
#include "backend/cuda/gemm_lt.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/quant_gemm.cuh"
#include "backend/shape_checks.h"

namespace tf::cuda {

using namespace detail;

namespace {

// What one small kernel between two matmuls costs in a recorded batch-1 decode step: its
// launch gap plus a few microseconds of work (docs/PERF.md profiles: add+RMSNorm and SwiGLU
// took 6 us each with events around them).
constexpr double kSmallKernelUs = 3.0;

const char* epilogue_name(MatmulFusion::Epilogue e) {
  switch (e) {
    case MatmulFusion::Epilogue::Store: return "";
    case MatmulFusion::Epilogue::AddTo: return "+add";
    case MatmulFusion::Epilogue::Swiglu: return "+swiglu";
    case MatmulFusion::Epilogue::Geglu: return "+geglu";
    case MatmulFusion::Epilogue::RopeKv: return "+rope/kv";
  }
  return "";
}

}  // namespace

void CudaBackend::add(const TensorView& residual, const TensorView& delta) {
  OpScope scope(prof(), "add", stream_);
  handoff_ = {};
  check_dev(residual, DType::BF16, "add residual");
  check_dev(delta, DType::BF16, "add delta");
  TF_ASSERT(residual.numel() == delta.numel(), "add: residual {} vs delta {}", residual.shape_str(),
            delta.shape_str());
  launch_add(bf_mut(residual), bf(delta), residual.numel(), stream_);
}

// The fused kernel streams the same weights as the plain product, so its time is the plain
// GEMV's; it wins when the GEMV is the pick for the plain shape, or is slower than cuBLAS by
// less than the small kernels the fusion saves (the norm, the SwiGLU). `plain` is the plain
// product with its output in scratch (use_gemv times it on first sight, writing there).
bool CudaBackend::fused_gemv_pays(const GemmArgs& plain, const GemvFusion& f) {
  if (!opt_.fusion || opt_.gemv == "cublas" || !gemv_supported(plain, f)) return false;
  if (opt_.gemv == "custom" || use_gemv(plain)) return true;
  const GemvChoice* c = tuned(plain);
  if (!c || c->custom_us < 0) return false;  // first seen while recording: cuBLAS, as use_gemv decided
  const double other_us = c->lt ? c->lt_us : c->cublas_us;
  const int saved = (f.norm_w ? 1 : 0) + (f.epilogue != GemvEpilogue::Store && f.epilogue != GemvEpilogue::AddTo ? 1 : 0);
  return c->custom_us <= other_us + saved * kSmallKernelUs;
}

void CudaBackend::matmul_fused(const TensorView& x, const TensorView& w, const TensorView& bias,
                               const TensorView& out, const MatmulFusion& f) {
  using Epi = MatmulFusion::Epilogue;
  const Fp8Handoff handoff = std::exchange(handoff_, {});
  check_dev(x, DType::BF16, "matmul_fused x");
  const bool quantized = dtype_is_quantized(w.dtype);
  check_dev(w, quantized ? w.dtype : DType::BF16, "matmul_fused w");
  check_dev(out, DType::BF16, "matmul_fused out");
  if (bias.data) check_dev(bias, DType::BF16, "matmul_fused bias");
  TF_ASSERT(x.n_dims == 2 && w.n_dims == 2 && out.n_dims == 2 && x.shape[1] == w.shape[1],
            "matmul_fused: x {} w {} out {}", x.shape_str(), w.shape_str(), out.shape_str());
  const int64_t rows = x.shape[0], k = x.shape[1], m = w.shape[0];
  const bool gated = f.epilogue == Epi::Swiglu || f.epilogue == Epi::Geglu;
  const int64_t m_out = gated ? m / 2 : m;
  TF_ASSERT(!gated || m % 2 == 0, "matmul_fused: a gated MLP over {} weight rows (odd)", m);
  TF_ASSERT(out.shape[0] == rows && out.shape[1] == m_out, "matmul_fused: out {} for x {} w {}", out.shape_str(),
            x.shape_str(), w.shape_str());
  TF_ASSERT(!bias.data || bias.numel() == m, "matmul_fused: bias {} for w {}", bias.shape_str(), w.shape_str());
  if (f.norm_w.data) {
    check_dev(f.norm_w, DType::BF16, "matmul_fused norm_w");
    TF_ASSERT(f.norm_w.numel() == k, "matmul_fused: norm_w {} for rows of {}", f.norm_w.shape_str(), k);
    check_dev(f.h, DType::BF16, "matmul_fused h");
  }
  const bool out_is_y = f.epilogue == Epi::Store || f.epilogue == Epi::RopeKv;
  if (!out_is_y) {
    check_dev(f.y, DType::BF16, "matmul_fused y");
    check_2d(f.y, rows, m, "matmul_fused y");
  }

  GemmArgs plain{.x = bf(x), .w = quantized ? nullptr : bf(w), .bias = bias.data ? bf(bias) : nullptr,
                 .out = out_is_y ? out.data : f.y.data, .rows = rows, .k = k, .m = m, .wq = quant_args(w)};
  GemvFusion gf{.norm_w = f.norm_w.data ? bf(f.norm_w) : nullptr,
                .eps = f.eps,
                .epilogue = f.epilogue == Epi::AddTo    ? GemvEpilogue::AddTo
                            : f.epilogue == Epi::Swiglu ? GemvEpilogue::Swiglu
                            : f.epilogue == Epi::RopeKv ? GemvEpilogue::RopeKv
                                                        : GemvEpilogue::Store};
  if (f.epilogue == Epi::RopeKv) gf.rope = rope_args(f.rope_layer, out, f.rope, f.attn);
  // Quantized weights have no cuBLAS path to weigh the GEMV against: fused whenever it runs.
  // The GEMV has no GeGLU epilogue: Geglu runs apart.
  const bool gemv_ok = f.epilogue != Epi::Geglu;
  if (gemv_ok && (quantized ? opt_.fusion && gemv_supported(plain, gf) : fused_gemv_pays(plain, gf))) {
    OpScope scope(prof(),
                  prof() ? fmt::format("matmul{}{} (GEMV) rows={} k={} m={}", f.norm_w.data ? "+norm" : "",
                                          epilogue_name(f.epilogue), rows, k, m)
                            : "",
                  stream_);
    GemmArgs g = plain;
    g.out = out.data;
    if (quantized)
      launch_quant_gemv(g, gf);
    else
      launch_gemv(g, stream_, gf);
    return;
  }
  if (quantized && matmul_fp8_fused(x, plain, f, out, handoff)) return;
  // Apart: the plain ops in turn (Backend::matmul_fused), except that on the cuBLAS path a
  // residual add is cuBLAS summing into the residual (beta = 1).
  TensorView in = x;
  MatmulFusion rest = f;
  if (f.norm_w.data) {
    rms_norm(x, f.norm_w, f.eps, f.h);
    in = f.h;
    rest.norm_w = {};
  }
  plain.x = bf(in);
  if (f.epilogue == Epi::AddTo && opt_.fusion && !bias.data && !quantized && !use_gemv(plain)) {
    OpScope scope(prof(), prof() ? fmt::format("matmul+add rows={} k={} m={}", rows, k, m) : "", stream_);
    const LtAlgo* lt = lt_pick(plain);  // times the plain product into y on first sight
    GemmArgs g = plain;
    g.out = out.data;
    g.accumulate = true;
    if (lt)
      lt_->run(g, *lt, cublas_workspace_, stream_);
    else
      launch_gemm(cublas_, g, stream_);
    return;
  }
  Backend::matmul_fused(in, w, bias, out, rest);
}

// Where the FP8 GEMM's timed choice is its unit-scale algorithms (or those are within a small
// kernel of the outer-vector ones), the add / gated activation joins their scale kernel, and
// the RoPE/KV kernel reads their sums itself (RopeKvArgs::acc); else cuBLASLt scales into y
// (qkv) and the add / activation / RoPE kernel runs after it. A shape first seen while
// recording a graph runs as cuBLASLt's heuristic orders it, with the kernel after.
bool CudaBackend::matmul_fp8_fused(const TensorView& x, const GemmArgs& g, const MatmulFusion& f,
                                   const TensorView& out, const Fp8Handoff& in) {
  using Epi = MatmulFusion::Epilogue;
  if (!opt_.fusion || !opt_.fp8_fusion || !runs_w8a8(g)) return false;
  const bool then = f.epilogue == Epi::AddTo || f.epilogue == Epi::Swiglu || f.epilogue == Epi::Geglu;
  const bool rope = f.epilogue == Epi::RopeKv;
  if (!f.norm_w.data && !then && !rope) return false;
  const Fp8Then t =  // read only where `then`
      f.epilogue == Epi::AddTo ? Fp8Then::AddTo : f.epilogue == Epi::Swiglu ? Fp8Then::Swiglu : Fp8Then::Geglu;
  OpScope scope(prof(),
                prof() ? fmt::format("matmul fp8{}{} (W8A8) rows={} k={} m={}", f.norm_w.data ? " +norm" : "",
                                        epilogue_name(f.epilogue), g.rows, g.k, g.m)
                          : "",
                stream_);
  uint8_t* xq = nullptr;
  float* xs = nullptr;
  if (in.x == g.x && in.rows == g.rows && in.k == g.k && in.norm_w == f.norm_w.data &&
      (!in.norm_w || in.eps == f.eps)) {
    xq = static_cast<uint8_t*>(scratch_[int(Scratch::Fp8Handoff0) + in.slot].p);
    xs = static_cast<float*>(scratch_[int(Scratch::Fp8HandoffScale0) + in.slot].p);
    ++fp8_handoffs_taken_;
  } else if (xq = static_cast<uint8_t*>(scratch(Scratch::Fp8Act, size_t(g.rows * g.k))),
             xs = static_cast<float*>(scratch(Scratch::Fp8Scale, size_t(g.rows) * 4));
             !f.norm_w.data || !launch_rms_norm_quantize_rows_fp8(g.x, bf(f.norm_w), f.eps, g.rows, g.k, xq, xs, stream_)) {
    const TensorView* in = &x;
    if (f.norm_w.data) {
      rms_norm(x, f.norm_w, f.eps, f.h);
      in = &f.h;
    }
    launch_quantize_rows_fp8(bf(*in), g.rows, g.k, xq, xs, stream_);
  }
  if (!lt_) lt_ = std::make_unique<LtGemm>(opt_.lt_split_k);
  Fp8GemmArgs a{.xq = xq, .x_scale = xs, .wq = g.wq.q, .w_scale = static_cast<const float*>(g.wq.scales),
                .bias = g.bias, .out = then ? f.y.data : out.data, .rows = g.rows, .k = g.k, .m = g.m,
                .acc_f32 = opt_.fp8_sums_f32};
  void* acc = scratch(Scratch::QuantTmp, size_t(g.rows * g.m) * (a.sums_f32() ? 4 : 2));
  const Fp8Choice c = fp8_choice(a, acc);
  if ((then || rope) && c.epilogue_us >= 0 &&
      (c.scaling == Fp8Scaling::Epilogue || c.epilogue_us <= c.outer_us + kSmallKernelUs)) {
    a.scaling = Fp8Scaling::Epilogue;
    a.algo = c.epilogue_algo;
    a.acc_only = true;
    lt_->run_fp8(a, cublas_workspace_, kCublasWorkspaceBytes, acc, stream_);
    if (rope) {
      RopeKvArgs r = rope_args(f.rope_layer, out, f.rope, f.attn);
      r.acc = acc;
      r.acc_f32 = a.sums_f32();
      r.acc_x_scale = xs;
      r.acc_w_scale = a.w_scale;
      r.acc_bias = g.bias;
      launch_rope_kv_write(r, stream_);
      return true;
    }
    if (!fp8_scale_then_hand_off(t, acc, a.sums_f32(), xs, a.w_scale, g, f, out))
      launch_fp8_scale_then(t, acc, a.sums_f32(), xs, a.w_scale, g.bias, g.rows, g.m, bf_mut(out), stream_);
    return true;
  }
  a.scaling = c.scaling;
  a.algo = c.algo;
  lt_->run_fp8(a, cublas_workspace_, kCublasWorkspaceBytes, acc, stream_);
  // cuBLASLt applied the scales into y: the handoff kernel with unit scales adds / gates and
  // quantizes for the next product in one kernel
  if (then && !g.bias) {
    if (fp8_scale_then_hand_off(t, f.y.data, /*acc_f32=*/false, nullptr, nullptr, g, f, out)) return true;
  }
  switch (f.epilogue) {
    case Epi::Store: break;
    case Epi::AddTo: add(out, f.y); break;
    case Epi::Swiglu: swiglu(f.y, out); break;
    case Epi::Geglu: geglu(f.y, out); break;
    case Epi::RopeKv: rope_kv_write(f.rope_layer, out, f.rope, f.attn); break;
  }
  return true;
}

// The scale kernel that also quantizes `out` for the next product (MatmulFusion::feeds_next)
// into the handoff slot not read by this one; false (nothing launched) where the kernel does
// not take the shape, or its buffers would have to grow while a graph is being recorded.
bool CudaBackend::fp8_scale_then_hand_off(Fp8Then t, const void* acc, bool acc_f32, const float* xs,
                                          const float* w_scale,
                                          const GemmArgs& g, const MatmulFusion& f, const TensorView& out) {
  if (!f.feeds_next || !opt_.fp8_handoff || (t == Fp8Then::AddTo) != (f.next_norm_w.data != nullptr)) return false;
  const int64_t k_next = t == Fp8Then::AddTo ? g.m : g.m / 2;
  const Scratch qslot = Scratch(int(Scratch::Fp8Handoff0) + handoff_slot_);
  const Scratch sslot = Scratch(int(Scratch::Fp8HandoffScale0) + handoff_slot_);
  const size_t q_bytes = size_t(g.rows * k_next), s_bytes = size_t(g.rows) * 4;
  if (capturing_ && (scratch_[int(qslot)].bytes < q_bytes || scratch_[int(sslot)].bytes < s_bytes)) return false;
  auto* q = static_cast<uint8_t*>(scratch(qslot, q_bytes));
  auto* qs = static_cast<float*>(scratch(sslot, s_bytes));
  if (!launch_fp8_scale_then_quantize(t, acc, acc_f32, xs, w_scale, g.bias, g.rows, g.m, bf_mut(out),
                                      f.next_norm_w.data ? bf(f.next_norm_w) : nullptr, f.next_eps, q, qs, stream_))
    return false;
  handoff_ = {.x = out.data, .rows = g.rows, .k = k_next, .norm_w = f.next_norm_w.data, .eps = f.next_eps,
              .slot = handoff_slot_};
  handoff_slot_ ^= 1;
  return true;
}

}  // namespace tf::cuda

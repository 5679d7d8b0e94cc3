// Front halves of the CUDA backend's row-wise ops: shape and dtype checks, then one launcher
// call each (kernels in elementwise.cu, norm.cu, sample.cu, sample_topp.cu).
#include "backend/cuda/cuda_backend.h"

#include <utility>

#include "backend/cuda/cuda_backend_util.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/norm.cuh"
#include "backend/cuda/sample.cuh"
#include "backend/shape_checks.h"

namespace tf::cuda {

using namespace detail;

void CudaBackend::embedding(const TensorView& table, const TensorView& out) {
  OpScope scope(prof(), "embedding", stream_);
  const bool w4 = table.dtype == DType::W4;  // a GGUF Q4_0 table, uploaded as W4 (upload)
  if (w4) {
    TF_ASSERT(table.device == Device::Cuda, "embedding table: not a CUDA tensor");
    check_quantized(table);
  } else {
    check_dev(table, DType::BF16, "embedding table");
  }
  check_dev(out, DType::BF16, "embedding out");
  TF_ASSERT(table.n_dims == 2, "embedding table: shape {}", table.shape_str());
  const int64_t d = table.shape[1];
  check_2d(out, batch_.n_tokens(), d, "embedding out");
  for (int32_t id : batch_.token_ids)
    TF_ASSERT(id >= 0 && id < table.shape[0], "token id {} out of range", id);
  if (w4) {
    launch_embedding_w4(static_cast<const uint8_t*>(table.data), static_cast<const uint16_t*>(table.scales),
                        static_cast<const uint8_t*>(table.zeros), table.group_size, dev_batch_.token_ids,
                        batch_.n_tokens(), d, bf_mut(out), stream_);
    return;
  }
  launch_embedding(bf(table), dev_batch_.token_ids, batch_.n_tokens(), d, bf_mut(out), stream_);
}

void CudaBackend::rms_norm(const TensorView& x, const TensorView& w, float eps, const TensorView& out) {
  OpScope scope(prof(), "rms_norm", stream_);
  handoff_ = {};
  check_dev(x, DType::BF16, "rms_norm x");
  check_dev(w, DType::BF16, "rms_norm w");
  check_dev(out, DType::BF16, "rms_norm out");
  const int64_t d = x.row_size();
  check_2d(out, x.n_rows(), d, "rms_norm out");
  TF_ASSERT(w.numel() == d, "rms_norm w: shape {} for rows of {}", w.shape_str(), d);
  launch_rms_norm(RmsNormArgs{.x = bf(x), .w = bf(w), .out = bf_mut(out), .rows = x.n_rows(), .d = d, .eps = eps},
                  stream_);
}

namespace {

// The rows and d_ff of a gated activation's checked arguments (gate_up [rows, 2 d_ff], out
// [rows, d_ff], BF16 on the device).
std::pair<int64_t, int64_t> gated_shape(const TensorView& gate_up, const TensorView& out, const char* gate_up_what,
                                        const char* out_what) {
  check_dev(gate_up, DType::BF16, gate_up_what);
  check_dev(out, DType::BF16, out_what);
  TF_ASSERT(out.n_dims == 2, "{}: shape {}", out_what, out.shape_str());
  const int64_t rows = out.shape[0], d_ff = out.shape[1];
  check_2d(gate_up, rows, 2 * d_ff, gate_up_what);
  return {rows, d_ff};
}

}  // namespace

void CudaBackend::swiglu(const TensorView& gate_up, const TensorView& out) {
  OpScope scope(prof(), "swiglu", stream_);
  const auto [rows, d_ff] = gated_shape(gate_up, out, "swiglu gate_up", "swiglu out");
  if (opt_.fusion)
    launch_swiglu(bf(gate_up), rows, d_ff, bf_mut(out), stream_);
  else
    launch_swiglu_unfused(bf(gate_up), rows, d_ff, bf_mut(out), stream_);
}

void CudaBackend::geglu(const TensorView& gate_up, const TensorView& out) {
  OpScope scope(prof(), "geglu", stream_);
  const auto [rows, d_ff] = gated_shape(gate_up, out, "geglu gate_up", "geglu out");
  launch_geglu(bf(gate_up), rows, d_ff, bf_mut(out), stream_);
}

void CudaBackend::scale(const TensorView& x, float s) {
  OpScope scope(prof(), "scale", stream_);
  check_dev(x, DType::BF16, "scale x");
  launch_scale(bf_mut(x), x.numel(), s, stream_);
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
  // Staged in a pinned buffer, so the call returns without waiting for the copy.
  PinnedSlot& slot = sample_slots_[sample_slot_];
  sample_slot_ ^= 1;
  auto* args = static_cast<SampleRowArgs*>(pinned(slot, params.size() * sizeof(SampleRowArgs)));
  for (size_t i = 0; i < params.size(); ++i)
    args[i] = SampleRowArgs{.temperature = params[i].temperature, .top_k = params[i].top_k, .top_p = params[i].top_p,
                            .min_p = params[i].min_p, .u = params[i].u};
  TF_CUDA_CHECK(cudaMemcpyAsync(sample_args_, args, params.size() * sizeof(SampleRowArgs), cudaMemcpyHostToDevice,
                                stream_));
  TF_CUDA_CHECK(cudaEventRecord(slot.done, stream_));
  launch_sample_rows(logits.as<float>(), logits.shape[0], logits.shape[1], static_cast<SampleRowArgs*>(sample_args_),
                     ids.as<int32_t>(), stream_);
  return true;
}

}  // namespace tf::cuda

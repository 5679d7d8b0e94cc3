// Front halves of the CUDA backend's mixture-of-experts ops: checks, scratch, then the
// launchers of moe.cu.
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_util.h"
#include "backend/cuda/moe.cuh"
#include "backend/shape_checks.h"

namespace tf::cuda {

using namespace detail;

void CudaBackend::moe_route(const TensorView& logits, const MoeParams& p, const TensorView& ids,
                            const TensorView& weights) {
  OpScope scope(prof(), "moe_route", stream_);
  check_dev(logits, DType::F32, "moe_route logits");
  check_dev(ids, DType::I32, "moe_route ids");
  check_dev(weights, DType::F32, "moe_route weights");
  const int64_t rows = logits.n_dims == 2 ? logits.shape[0] : 0;
  TF_ASSERT(logits.n_dims == 2 && logits.shape[1] == p.n_experts && p.top_k >= 1 && p.top_k <= p.n_experts &&
                p.top_k <= kMoeMaxTopK,
            "moe_route: logits {} for {} experts, top {} (the CUDA kernel takes top_k <= {})", logits.shape_str(),
            p.n_experts, p.top_k, kMoeMaxTopK);
  TF_ASSERT(ids.numel() == rows * p.top_k && weights.numel() == rows * p.top_k,
            "moe_route: ids {}, weights {} for {} rows of top {}", ids.shape_str(), weights.shape_str(), rows, p.top_k);
  launch_moe_route(logits.as<const float>(), rows, p.n_experts, p.top_k, p.renormalize, ids.as<int32_t>(),
                   weights.as<float>(), stream_);
}

void CudaBackend::moe_experts(const TensorView& x, const TensorView& ids, const TensorView& weights,
                              const TensorView& w_gate_up, const TensorView& w_down, const MoeParams& p,
                              const TensorView& out) {
  OpScope scope(prof(), "moe_experts", stream_);
  check_dev(x, DType::BF16, "moe_experts x");
  check_dev(ids, DType::I32, "moe_experts ids");
  check_dev(weights, DType::F32, "moe_experts weights");
  check_dev(w_gate_up, DType::BF16, "moe_experts w_gate_up (the CUDA kernels take BF16 experts)");
  check_dev(w_down, DType::BF16, "moe_experts w_down (the CUDA kernels take BF16 experts)");
  check_dev(out, DType::BF16, "moe_experts out");
  const MoeShape m = check_moe(x, ids, weights, w_gate_up, w_down, p, out);
  TF_ASSERT(p.n_experts <= kMoeMaxExperts, "moe_experts: {} experts (the CUDA kernels take up to {})", p.n_experts,
            kMoeMaxExperts);
  const int64_t n_assign = m.rows * p.top_k;
  MoeExpertsArgs a{.x = bf(x),
                   .ids = ids.as<const int32_t>(),
                   .weights = weights.as<const float>(),
                   .w_gate_up = bf(w_gate_up),
                   .w_down = bf(w_down),
                   .out = bf_mut(out),
                   .rows = m.rows,
                   .d_model = m.d_model,
                   .d_ff = m.d_ff,
                   .n_experts = p.n_experts,
                   .top_k = p.top_k,
                   .tensor_cores = opt_.moe_mma};
  a.index = static_cast<int32_t*>(
      scratch(Scratch::MoeIndex, size_t(moe_index_ints(m.rows, p.top_k, p.n_experts)) * sizeof(int32_t)));
  a.act = static_cast<bf16*>(scratch(Scratch::MoeAct, size_t(n_assign * m.d_ff) * 2));
  a.y = static_cast<float*>(scratch(Scratch::MoeOut, size_t(n_assign * m.d_model) * 4));
  launch_moe_experts(a, stream_);
}

}  // namespace tf::cuda

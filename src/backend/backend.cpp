#include "backend/backend.h"

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda_factory.h"
#include "backend/ref/ref_backend.h"
#include "core/error.h"

namespace tf {

BackendKind parse_backend_kind(const std::string& name) {
  if (name == "cpu") return BackendKind::Cpu;
  if (name == "ref") return BackendKind::Ref;
  if (name == "cuda") return BackendKind::Cuda;
  fail("unknown backend '{}' (expected cpu, ref or cuda)", name);
}

void Backend::matmul_fused(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out,
                           const MatmulFusion& f) {
  TensorView in = x;
  if (f.norm_w.data) {
    rms_norm(x, f.norm_w, f.eps, f.h);
    in = f.h;
  }
  switch (f.epilogue) {
    case MatmulFusion::Epilogue::Store: matmul(in, w, bias, out); return;
    case MatmulFusion::Epilogue::AddTo:
      matmul(in, w, bias, f.y);
      add(out, f.y);
      return;
    case MatmulFusion::Epilogue::Swiglu:
      matmul(in, w, bias, f.y);
      swiglu(f.y, out);
      return;
    case MatmulFusion::Epilogue::Geglu:
      matmul(in, w, bias, f.y);
      geglu(f.y, out);
      return;
    case MatmulFusion::Epilogue::RopeKv:
      matmul(in, w, bias, out);
      rope_kv_write(f.rope_layer, out, f.rope, f.attn);
      return;
  }
}

void Backend::copy_ids_async(const TensorView& ids, int slot) {
  TF_ASSERT(slot == 0 || slot == 1, "copy_ids_async: slot {} (0 or 1)", slot);
  TF_ASSERT(ids.dtype == DType::I32, "copy_ids_async: ids of {}", dtype_name(ids.dtype));
  ids_slots_[slot].resize(size_t(ids.numel()));
  copy_to_host(ids, ids_slots_[slot].data());
}

const int32_t* Backend::ids_copied(int slot) {
  TF_ASSERT(slot == 0 || slot == 1, "ids_copied: slot {} (0 or 1)", slot);
  return ids_slots_[slot].data();
}

void Backend::take_token_ids(const TensorView& ids, std::span<const int32_t> rows) {
  (void)ids, (void)rows;
  fail("the {} backend cannot take a batch's token ids from its own buffers", name());
}

std::unique_ptr<Backend> make_backend(BackendKind kind, const BackendOptions& opt) {
  switch (kind) {
    case BackendKind::Cpu: return std::make_unique<CpuBackend>(opt);
    case BackendKind::Ref: return std::make_unique<RefBackend>();
    case BackendKind::Cuda: return make_cuda_backend(opt);
  }
  fail("unknown backend kind");
}

}  // namespace tf

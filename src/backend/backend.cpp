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

std::unique_ptr<Backend> make_backend(BackendKind kind, const BackendOptions& opt) {
  switch (kind) {
    case BackendKind::Cpu: return std::make_unique<CpuBackend>();
    case BackendKind::Ref: return std::make_unique<RefBackend>();
    case BackendKind::Cuda: return make_cuda_backend(opt);
  }
  fail("unknown backend kind");
}

}  // namespace tf

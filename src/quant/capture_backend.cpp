#include "quant/capture_backend.h"

#include "backend/host_backend.h"
#include "core/error.h"

namespace tf {

const CaptureBackend::Record* CaptureBackend::find(const void* weight) const {
  for (const Record& r : records_)
    if (r.weight == weight) return &r;
  return nullptr;
}

void CaptureBackend::record(const TensorView& w, const TensorView& x) {
  TF_ASSERT(x.n_dims == 2, "capture: matmul input {} is not 2-d", x.shape_str());
  Record* r = const_cast<Record*>(find(w.data));
  if (!r) {
    records_.push_back(Record{.weight = w.data, .k = x.shape[1]});
    r = &records_.back();
  }
  TF_ASSERT(r->k == x.shape[1], "capture: weight {} seen with inputs of {} and {} features", w.data, r->k, x.shape[1]);
  const int64_t take = std::min(x.shape[0], opt_.max_rows - r->n_rows);
  r->n_seen += x.shape[0];
  if (take <= 0) return;
  TensorView head = x;  // the first `take` rows
  head.shape[0] = take;
  std::vector<uint8_t> bytes(head.nbytes());
  inner().copy_to_host(head, bytes.data());
  r->rows.resize(size_t((r->n_rows + take) * r->k));
  load_row_f32(bytes.data(), x.dtype, 0, take * r->k, r->rows.data() + r->n_rows * r->k);
  r->n_rows += take;
}

void CaptureBackend::matmul(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out) {
  record(w, x);
  inner().matmul(x, w, bias, out);
}

void CaptureBackend::matmul_fused(const TensorView& x, const TensorView& w, const TensorView& bias,
                                  const TensorView& out, const MatmulFusion& f) {
  if (!f.norm_w.data) {
    record(w, x);
    inner().matmul_fused(x, w, bias, out, f);
    return;
  }
  inner().rms_norm(x, f.norm_w, f.eps, f.h);
  record(w, f.h);
  MatmulFusion rest = f;
  rest.norm_w = {};
  inner().matmul_fused(f.h, w, bias, out, rest);
}

}  // namespace tf

#include "quant/capture_backend.h"

#include <algorithm>
#include <cmath>

#include "backend/host_backend.h"
#include "core/error.h"
#include "quant/quantized_weight.h"

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
  const int64_t skip = std::min(x.shape[0], std::max<int64_t>(opt_.skip_first, 0));
  const int64_t take = std::min(x.shape[0] - skip, opt_.max_rows - r->n_rows);
  r->n_seen += x.shape[0] - skip;
  if (take <= 0) return;
  TensorView head = x;  // `take` rows after the skipped ones
  head.data = static_cast<uint8_t*>(x.data) + size_t(skip) * dtype_row_bytes(x.dtype, x.shape[1]);
  head.shape[0] = take;
  std::vector<uint8_t> bytes(head.nbytes());
  inner().copy_to_host(head, bytes.data());
  r->rows.resize(size_t((r->n_rows + take) * r->k));
  load_row_f32(bytes.data(), x.dtype, 0, take * r->k, r->rows.data() + r->n_rows * r->k);
  r->n_rows += take;
}

void CaptureBackend::append(Record& r, const float* rows, int64_t n) {
  r.rows.insert(r.rows.end(), rows, rows + n * r.k);
  r.n_rows += n;
}

// Per expert: the routed rows of x, and silu(x Wgate^T) * (x Wup^T) from the expert's rows of
// w_gate_up dequantized to F32 (the rows a quantized copy holds, in sequential calibration).
void CaptureBackend::moe_experts(const TensorView& x, const TensorView& ids, const TensorView& weights,
                                 const TensorView& w_gate_up, const TensorView& w_down, const MoeParams& p,
                                 const TensorView& out) {
  inner().moe_experts(x, ids, weights, w_gate_up, w_down, p, out);
  const int64_t rows = x.shape[0], d = x.shape[1], f = w_down.shape[1];
  ExpertRecords* layer = nullptr;
  for (ExpertRecords& e : experts_)
    if (e.w_gate_up == w_gate_up.data) layer = &e;
  if (!layer) {
    experts_.push_back(ExpertRecords{.w_gate_up = w_gate_up.data,
                                     .gate_up = std::vector<Record>(size_t(p.n_experts), Record{.weight = w_gate_up.data, .k = d}),
                                     .down = std::vector<Record>(size_t(p.n_experts), Record{.weight = w_down.data, .k = f})});
    layer = &experts_.back();
  }
  std::vector<uint8_t> xb(x.nbytes());
  inner().copy_to_host(x, xb.data());
  std::vector<float> xf(size_t(rows * d));
  load_row_f32(xb.data(), x.dtype, 0, rows * d, xf.data());
  std::vector<int32_t> id(size_t(ids.numel()));
  inner().copy_to_host(ids, id.data());
  std::vector<float> gate(static_cast<size_t>(d)), up(static_cast<size_t>(d));
  for (int64_t e = 0; e < p.n_experts; ++e) {
    Record& gu = layer->gate_up[size_t(e)];
    Record& dn = layer->down[size_t(e)];
    std::vector<int64_t> mine;
    for (int64_t i = 0; i < rows * p.top_k; ++i)
      if (id[size_t(i)] == e) mine.push_back(i / p.top_k);
    gu.n_seen += int64_t(mine.size());
    dn.n_seen += int64_t(mine.size());
    const int64_t take = std::min<int64_t>(int64_t(mine.size()), opt_.max_rows - gu.n_rows);
    if (take <= 0) continue;
    std::vector<float> xs(size_t(take * d)), as(size_t(take * f));
    for (int64_t i = 0; i < take; ++i) std::copy_n(xf.data() + mine[size_t(i)] * d, d, xs.data() + i * d);
    for (int64_t j = 0; j < f; ++j) {
      const int64_t gate_row = e * 2 * f + j;
      if (dtype_is_quantized(w_gate_up.dtype)) {
        dequantize_row(w_gate_up, gate_row, gate.data());
        dequantize_row(w_gate_up, gate_row + f, up.data());
      } else {
        load_row_f32(w_gate_up.data, w_gate_up.dtype, gate_row * d, d, gate.data());
        load_row_f32(w_gate_up.data, w_gate_up.dtype, (gate_row + f) * d, d, up.data());
      }
      for (int64_t i = 0; i < take; ++i) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < d; ++c) {
          g += double(xs[size_t(i * d + c)]) * gate[size_t(c)];
          u += double(xs[size_t(i * d + c)]) * up[size_t(c)];
        }
        as[size_t(i * f + j)] = float(g / (1.0 + std::exp(-g)) * u);
      }
    }
    append(gu, xs.data(), take);
    append(dn, as.data(), take);
  }
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

#include "model/arch/quantized_parts.h"

#include <cstring>

#include "backend/host_backend.h"
#include "core/error.h"
#include "model/quant_config.h"
#include "quant/quantizer.h"

namespace tf {

namespace {

int64_t n_groups(const TensorView& q) { return q.dtype == DType::W4 ? q.shape[1] / q.group_size : 1; }
// Bytes of one row's scales and zero points.
size_t scale_row_bytes(const TensorView& q) { return q.dtype == DType::W4 ? size_t(n_groups(q)) * 2 : 4; }
size_t zero_row_bytes(const TensorView& q) { return q.dtype == DType::W4 ? size_t(n_groups(q)) : 0; }

// Rows [r0, r0 + n) of a quantized view: a view of the same memory.
TensorView quant_rows(const TensorView& q, int64_t r0, int64_t n) {
  TF_ASSERT(r0 >= 0 && n >= 0 && r0 + n <= q.shape[0], "rows [{}, {}) of {}", r0, r0 + n, q.shape_str());
  TensorView v = q;
  v.shape[0] = n;
  v.data = static_cast<uint8_t*>(q.data) + size_t(r0) * dtype_row_bytes(q.dtype, q.shape[1]);
  v.scales = static_cast<uint8_t*>(q.scales) + size_t(r0) * scale_row_bytes(q);
  if (q.zeros) v.zeros = static_cast<uint8_t*>(q.zeros) + size_t(r0) * zero_row_bytes(q);
  return v;
}

// Columns [c0, c0 + n) of a quantized view, copied. W8/FP8 rows keep their one scale (each
// rank's partial dot product is scaled alike); W4 slices must hold whole groups.
std::unique_ptr<QuantizedWeight> quant_cols(const TensorView& q, int64_t c0, int64_t n, std::string_view name,
                                            int32_t tp_size) {
  const int64_t m = q.shape[0], k = q.shape[1];
  if (q.dtype == DType::W4 && (c0 % q.group_size != 0 || n % q.group_size != 0))
    fail("{}: tensor parallel size {} gives each rank {} of its {} input columns, which does not hold whole int4 "
         "groups of {} (choose a tensor parallel size whose slices are multiples of the group size)",
         name, tp_size, n, k, q.group_size);
  auto out = std::make_unique<QuantizedWeight>(QuantizedWeight::zeros_like(q.dtype, m, n, q.group_size));
  const size_t row_in = dtype_row_bytes(q.dtype, k), row_out = dtype_row_bytes(q.dtype, n);
  const size_t col_byte = dtype_row_bytes(q.dtype, c0);
  const int64_t g0 = q.dtype == DType::W4 ? c0 / q.group_size : 0;
  const size_t sc_in = scale_row_bytes(q), sc_out = q.dtype == DType::W4 ? size_t(n / q.group_size) * 2 : 4;
  const size_t z_in = zero_row_bytes(q), z_out = q.dtype == DType::W4 ? size_t(n / q.group_size) : 0;
  for (int64_t i = 0; i < m; ++i) {
    std::memcpy(out->data.data() + i * row_out, static_cast<const uint8_t*>(q.data) + i * row_in + col_byte, row_out);
    std::memcpy(out->scales.data() + i * sc_out, static_cast<const uint8_t*>(q.scales) + i * sc_in + g0 * 2,
                sc_out);
    if (z_out)
      std::memcpy(out->zeros.data() + i * z_out, static_cast<const uint8_t*>(q.zeros) + i * z_in + g0, z_out);
  }
  return out;
}

// Views of one layout stacked along rows, copied.
std::unique_ptr<QuantizedWeight> quant_concat(const std::vector<TensorView>& parts) {
  const TensorView& first = parts[0];
  int64_t m = 0;
  for (const TensorView& p : parts) {
    TF_ASSERT(p.dtype == first.dtype && p.shape[1] == first.shape[1] && p.group_size == first.group_size,
              "parts of one weight in one layout");
    m += p.shape[0];
  }
  auto out = std::make_unique<QuantizedWeight>(
      QuantizedWeight::zeros_like(first.dtype, m, first.shape[1], first.group_size));
  size_t at_data = 0, at_scales = 0, at_zeros = 0;
  for (const TensorView& p : parts) {
    const size_t d = p.nbytes(), s = size_t(p.shape[0]) * scale_row_bytes(p), z = size_t(p.shape[0]) * zero_row_bytes(p);
    std::memcpy(out->data.data() + at_data, p.data, d);
    std::memcpy(out->scales.data() + at_scales, p.scales, s);
    if (z) std::memcpy(out->zeros.data() + at_zeros, p.zeros, z);
    at_data += d, at_scales += s, at_zeros += z;
  }
  return out;
}

// The stored quantized tensors of part p as one view: rows [p.row0, p.row0 + rows) of them.
TensorView stored_part_view(const WeightSpec& w, const WeightPart& p, const TensorSource& source) {
  const TensorInfo& values = source.get(p.tensor);
  const DType format = weight_format_dtype(w.format);
  const TensorView all = make_quantized_view(QuantizedParts{
      .name = p.tensor, .format = format, .m = values.shape.empty() ? 0 : values.shape[0], .k = p.shape[1],
      .group_size = w.group_size, .data = values.view(), .scales = source.get(p.scales).view(),
      .zeros = p.zeros.empty() ? TensorView{} : source.get(p.zeros).view()});
  return quant_rows(all, p.row0, p.shape[0]);
}

// Part p's logical rows [p.row0, p.row0 + rows) as F32: a dense tensor widened, a quantized
// one dequantized.   [rows, k]
std::vector<float> part_f32(const WeightSpec& w, const WeightPart& p, const TensorSource& source) {
  const int64_t rows = p.shape[0], k = p.shape[1];
  std::vector<float> out(size_t(rows * k));
  if (w.format == WeightFormat::Dense) {
    const TensorView t = source.get(p.tensor).view();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; ++i) load_row_f32(t.data, t.dtype, (p.row0 + i) * k, k, out.data() + i * k);
  } else {
    const TensorView q = stored_part_view(w, p, source);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; ++i) dequantize_row(q, i, out.data() + i * k);
  }
  return out;
}

bool same_layout(const QuantSpec& a, const QuantSpec& b) {
  return a.format == b.format && (a.format != DType::W4 || a.group_size == b.group_size);
}

}  // namespace

PartSlice part_slice(const WeightPart& p, int32_t tp_rank, int32_t tp_size) {
  PartSlice s{.row0 = 0, .n_rows = p.shape[0], .col0 = 0, .n_cols = p.shape.size() > 1 ? p.shape[1] : 1};
  if (p.tp.split == TpSplit::Rows) {
    const TpRange g = tp_groups(p.tp.n_groups, tp_rank, tp_size);
    s.row0 = g.begin * p.tp.group_size;
    s.n_rows = g.count * p.tp.group_size;
  } else if (p.tp.split == TpSplit::Columns) {
    const TpRange g = tp_groups(p.tp.n_groups, tp_rank, tp_size);
    s.col0 = g.begin * p.tp.group_size;
    s.n_cols = g.count * p.tp.group_size;
  }
  return s;
}

QuantSpec stored_spec(const WeightSpec& w) {
  return QuantSpec{.format = weight_format_dtype(w.format), .group_size = w.group_size};
}

HostQuantized quantized_weight_for_rank(const WeightSpec& w, const TensorSource& source, const QuantSpec& target,
                                        int32_t tp_rank, int32_t tp_size) {
  std::vector<std::unique_ptr<QuantizedWeight>> keep;  // what the slices point into, besides the source
  std::vector<TensorView> slices;
  for (const WeightPart& p : w.parts) {
    const int64_t k = p.shape[1];
    const std::string module = module_of(p.tensor).empty() ? p.tensor : module_of(p.tensor);
    QuantSpec spec = target;
    if (spec.format == DType::W4) {
      spec.group_size = fitting_group_size(target.group_size, k);
      if (spec.group_size == 0)
        fail("{}: no int4 group size (a multiple of 32) divides its input dimension {}", module, k);
    }
    TensorView full;
    if (w.format != WeightFormat::Dense && same_layout(stored_spec(w), spec)) {
      full = stored_part_view(w, p, source);
    } else {
      const std::vector<float> f = part_f32(w, p, source);
      keep.push_back(std::make_unique<QuantizedWeight>(quantize_rtn(f.data(), p.shape[0], k, spec, module)));
      full = keep.back()->view();
    }
    const PartSlice s = part_slice(p, tp_rank, tp_size);
    const TensorView rows = quant_rows(full, s.row0, s.n_rows);
    if (s.n_cols == k) {
      slices.push_back(rows);
      continue;
    }
    keep.push_back(quant_cols(rows, s.col0, s.n_cols, module, tp_size));
    slices.push_back(keep.back()->view());
  }
  HostQuantized h;
  if (slices.size() == 1) {
    h.view = slices[0];
    if (!keep.empty()) h.owned = std::move(keep.back());  // the last object made backs the slice
    return h;
  }
  h.owned = quant_concat(slices);
  h.view = h.owned->view();
  return h;
}

std::vector<float> dequantized_weight_for_rank(const WeightSpec& w, const TensorSource& source, int32_t tp_rank,
                                               int32_t tp_size, int64_t* rows, int64_t* cols) {
  std::vector<float> out;
  *rows = 0;
  *cols = 0;
  for (const WeightPart& p : w.parts) {
    const std::vector<float> f = part_f32(w, p, source);
    const PartSlice s = part_slice(p, tp_rank, tp_size);
    const int64_t k = p.shape[1];
    for (int64_t i = s.row0; i < s.row0 + s.n_rows; ++i)
      out.insert(out.end(), f.begin() + i * k + s.col0, f.begin() + i * k + s.col0 + s.n_cols);
    *rows += s.n_rows;
    *cols = s.n_cols;
  }
  return out;
}

}  // namespace tf

#include "quant/quantized_weight.h"
#include "quant/quantized_rows.h"

#include <cstring>

#include "core/error.h"
#include "quant/fp8.h"
#include "quant/gguf_dequant.h"
#include "quant/group_quant.h"

namespace tf {

DType parse_quant_format(std::string_view name, std::string_view what) {
  if (name == "int8") return DType::W8;
  if (name == "int4") return DType::W4;
  if (name == "fp8") return DType::FP8;
  fail("{}: unknown quantization format '{}' (expected int8, int4 or fp8)", what, name);
}

std::string_view quant_format_name(DType format) {
  switch (format) {
    case DType::W8: return "int8";
    case DType::W4: return "int4";
    case DType::FP8: return "fp8";
    default: return dtype_name(format);
  }
}

// ---- QuantizedWeight --------------------------------------------------------------------------

QuantizedWeight QuantizedWeight::zeros_like(DType dtype, int64_t m, int64_t k, int32_t group_size) {
  TF_ASSERT(dtype == DType::W8 || dtype == DType::W4 || dtype == DType::FP8, "QuantizedWeight of {}", dtype_name(dtype));
  TF_ASSERT(dtype != DType::W4 || (group_size > 0 && k % group_size == 0 && k % 2 == 0),
            "W4 [{}, {}] with group size {}", m, k, group_size);
  QuantizedWeight q;
  q.dtype = dtype;
  q.m = m;
  q.k = k;
  q.group_size = dtype == DType::W4 ? group_size : 0;
  q.data.assign(size_t(m) * dtype_row_bytes(dtype, k), 0);
  if (dtype == DType::W4) {
    q.scales.assign(size_t(m * (k / group_size)) * 2, 0);
    q.zeros.assign(size_t(m * (k / group_size)), 0);
  } else {
    q.scales.assign(size_t(m) * 4, 0);
  }
  return q;
}

uint8_t QuantizedWeight::code(int64_t i, int64_t j) const {
  if (dtype != DType::W4) return data[size_t(i * k + j)];
  const uint8_t b = data[size_t(i * (k / 2) + j / 2)];
  return (j & 1) ? uint8_t(b >> 4) : uint8_t(b & 15);
}

void QuantizedWeight::set_code(int64_t i, int64_t j, uint8_t c) {
  if (dtype != DType::W4) {
    data[size_t(i * k + j)] = c;
    return;
  }
  uint8_t& b = data[size_t(i * (k / 2) + j / 2)];
  b = (j & 1) ? uint8_t((b & 0x0f) | (c << 4)) : uint8_t((b & 0xf0) | (c & 15));
}

GroupParams QuantizedWeight::params(int64_t i, int64_t group) const {
  GroupParams p;
  if (dtype == DType::W4) {
    const size_t idx = size_t(i * n_groups() + group);
    uint16_t h;
    std::memcpy(&h, scales.data() + 2 * idx, 2);
    p.scale = f16_to_f32(h);
    p.zero = zeros[idx];
  } else {
    std::memcpy(&p.scale, scales.data() + 4 * size_t(i), 4);
  }
  return p;
}

void QuantizedWeight::set_params(int64_t i, int64_t group, GroupParams p) {
  if (dtype == DType::W4) {
    const size_t idx = size_t(i * n_groups() + group);
    const uint16_t h = f32_to_f16(p.scale);
    std::memcpy(scales.data() + 2 * idx, &h, 2);
    zeros[idx] = p.zero;
  } else {
    std::memcpy(scales.data() + 4 * size_t(i), &p.scale, 4);
  }
}

TensorView QuantizedWeight::view() const {
  TensorView v = make_view(const_cast<uint8_t*>(data.data()), dtype, {m, k});
  v.scales = const_cast<uint8_t*>(scales.data());
  v.zeros = dtype == DType::W4 ? const_cast<uint8_t*>(zeros.data()) : nullptr;
  v.group_size = group_size;
  return v;
}

// ---- checking stored parts ----------------------------------------------------------------------

namespace {

std::string shape_of(std::initializer_list<int64_t> dims) {
  std::string s = "[";
  for (int64_t d : dims) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
  return s + "]";
}

// `part` of tensor `name` must be `dtype` (or `alt`) with exactly the given shape.
void check_part(std::string_view name, const char* part, const TensorView& t, DType dtype, DType alt,
                std::initializer_list<int64_t> shape) {
  if (!t.data) fail("tensor {}: the {} are missing", name, part);
  if (t.dtype != dtype && t.dtype != alt)
    fail("tensor {}: {} of dtype {}, expected {}", name, part, dtype_name(t.dtype), dtype_name(dtype));
  bool same = t.n_dims == int(shape.size());
  int i = 0;
  for (int64_t d : shape) same = same && t.shape[size_t(i++)] == d;
  if (same) return;
  // A packed size that does not match the logical shape is the common case: name the bytes.
  fail("tensor {}: {} of shape {} ({} bytes), expected {} ({} bytes)", name, part, t.shape_str(),
       t.numel() * int64_t(dtype_size(t.dtype)), shape_of(shape), [&] {
         int64_t n = int64_t(dtype_size(dtype));
         for (int64_t d : shape) n *= d;
         return n;
       }());
}

}  // namespace

TensorView make_quantized_view(const QuantizedParts& q) {
  const std::string_view name = q.name;
  if (q.format != DType::W8 && q.format != DType::W4 && q.format != DType::FP8)
    fail("tensor {}: unknown quantized format {} (expected int8, int4 or fp8)", name, dtype_name(q.format));
  if (q.m <= 0 || q.k <= 0) fail("tensor {}: empty logical shape [{}, {}]", name, q.m, q.k);
  if (q.format == DType::W4) {
    if (q.group_size <= 0 || q.group_size % 32 != 0)
      fail("tensor {}: int4 group size {} is not a positive multiple of 32", name, q.group_size);
    if (q.k % q.group_size != 0)
      fail("tensor {}: int4 group size {} does not divide the input dimension {}", name, q.group_size, q.k);
    check_part(name, "packed values", q.data, DType::U8, DType::I8, {q.m, q.k / 2});
    check_part(name, "scales", q.scales, DType::F16, DType::F16, {q.m, q.k / q.group_size});
    check_part(name, "zero points", q.zeros, DType::U8, DType::U8, {q.m, q.k / q.group_size});
  } else {
    check_part(name, "values", q.data, q.format == DType::W8 ? DType::I8 : DType::U8,
               q.format == DType::W8 ? DType::I8 : DType::FP8, {q.m, q.k});
    check_part(name, "scales", q.scales, DType::F32, DType::F32, {q.m});
    if (q.zeros.data) fail("tensor {}: {} has no zero points, but some were given", name, quant_format_name(q.format));
  }
  TensorView v = make_view(q.data.data, q.format, {q.m, q.k}, q.data.device);
  v.scales = q.scales.data;
  v.zeros = q.format == DType::W4 ? q.zeros.data : nullptr;
  v.group_size = q.format == DType::W4 ? q.group_size : 0;
  return v;
}

// ---- dequantization ---------------------------------------------------------------------------

TensorView quantized_rows(const TensorView& w, int64_t row0, int64_t n) {
  TF_ASSERT(w.n_dims == 2 && row0 >= 0 && n >= 0 && row0 + n <= w.shape[0], "quantized_rows: rows [{}, {}) of {}",
            row0, row0 + n, w.shape_str());
  const int64_t k = w.shape[1];
  TensorView v = w;
  v.shape[0] = n;
  v.data = static_cast<uint8_t*>(w.data) + size_t(row0) * dtype_row_bytes(w.dtype, k);
  if (w.dtype == DType::W8 || w.dtype == DType::FP8) {
    v.scales = static_cast<float*>(w.scales) + row0;
  } else if (w.dtype == DType::W4) {
    const int64_t n_groups = k / w.group_size;
    v.scales = static_cast<uint16_t*>(w.scales) + row0 * n_groups;
    v.zeros = static_cast<uint8_t*>(w.zeros) + row0 * n_groups;
  }
  return v;
}

void dequantize_row(const TensorView& w, int64_t row, float* out) {
  TF_ASSERT(w.n_dims == 2 && w.device == Device::Host, "dequantize_row: a 2-d host tensor, not {}", w.shape_str());
  const int64_t k = w.shape[1];
  const uint8_t* r = static_cast<const uint8_t*>(w.data) + size_t(row) * dtype_row_bytes(w.dtype, k);
  switch (w.dtype) {
    case DType::W8:
    case DType::FP8: {
      const GroupParams p{.scale = static_cast<const float*>(w.scales)[row]};
      for (int64_t j = 0; j < k; ++j) out[j] = dequantize_value(w.dtype, r[j], p);
      return;
    }
    case DType::W4: {
      const int64_t g = w.group_size, n_groups = k / g;
      const uint16_t* sc = static_cast<const uint16_t*>(w.scales) + row * n_groups;
      const uint8_t* zp = static_cast<const uint8_t*>(w.zeros) + row * n_groups;
      for (int64_t j = 0; j < k; ++j) {
        const GroupParams p{.scale = f16_to_f32(sc[j / g]), .zero = zp[j / g]};
        const uint8_t c = (j & 1) ? uint8_t(r[j / 2] >> 4) : uint8_t(r[j / 2] & 15);
        out[j] = dequantize_value(DType::W4, c, p);
      }
      return;
    }
    case DType::Q8_0:  // blocks of 34 bytes: F16 d, 32 int8
      for (int64_t b = 0; b < k / 32; ++b) {
        const uint8_t* blk = r + 34 * b;
        uint16_t d;
        std::memcpy(&d, blk, 2);
        for (int e = 0; e < 32; ++e) out[32 * b + e] = f16_to_f32(d) * float(int8_t(blk[2 + e]));
      }
      return;
    case DType::Q4_0:  // blocks of 18 bytes: F16 d, 16 bytes (element e low nibble of byte e, e + 16 high)
      for (int64_t b = 0; b < k / 32; ++b) {
        const uint8_t* blk = r + 18 * b;
        uint16_t d;
        std::memcpy(&d, blk, 2);
        for (int e = 0; e < 16; ++e) {
          out[32 * b + e] = f16_to_f32(d) * float((blk[2 + e] & 15) - 8);
          out[32 * b + e + 16] = f16_to_f32(d) * float((blk[2 + e] >> 4) - 8);
        }
      }
      return;
    case DType::Q4_1:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: tf::dequantize_row(w.dtype, r, out, k); return;  // gguf_dequant.h
    default: TF_ASSERT(false, "dequantize_row: {} is not a quantized weight dtype this supports", dtype_name(w.dtype));
  }
}

std::vector<float> dequantize(const TensorView& w) {
  std::vector<float> out(size_t(w.shape[0] * w.shape[1]));
  for (int64_t i = 0; i < w.shape[0]; ++i) dequantize_row(w, i, out.data() + i * w.shape[1]);
  return out;
}

// ---- packing ----------------------------------------------------------------------------------

void pack_w4(const uint8_t* codes, int64_t n, uint8_t* packed) {
  TF_ASSERT(n % 2 == 0, "pack_w4: {} codes (odd)", n);
  for (int64_t i = 0; i < n / 2; ++i) {
    TF_ASSERT(codes[2 * i] < 16 && codes[2 * i + 1] < 16, "pack_w4: code beyond 15 at {}", 2 * i);
    packed[i] = uint8_t(codes[2 * i] | (codes[2 * i + 1] << 4));
  }
}

void unpack_w4(const uint8_t* packed, int64_t n, uint8_t* codes) {
  TF_ASSERT(n % 2 == 0, "unpack_w4: {} codes (odd)", n);
  for (int64_t i = 0; i < n / 2; ++i) {
    codes[2 * i] = packed[i] & 15;
    codes[2 * i + 1] = packed[i] >> 4;
  }
}

QuantizedWeight repack_q4_0_to_w4(const TensorView& q) {
  TF_ASSERT(q.dtype == DType::Q4_0 && q.n_dims == 2 && q.shape[1] % 32 == 0, "repack_q4_0_to_w4: {} {}",
            dtype_name(q.dtype), q.shape_str());
  const int64_t m = q.shape[0], k = q.shape[1];
  QuantizedWeight w = QuantizedWeight::zeros_like(DType::W4, m, k, 32);
  for (int64_t i = 0; i < m; ++i) {
    const uint8_t* r = static_cast<const uint8_t*>(q.data) + size_t(i) * dtype_row_bytes(DType::Q4_0, k);
    for (int64_t b = 0; b < k / 32; ++b) {
      const uint8_t* blk = r + 18 * b;
      std::memcpy(w.scales.data() + 2 * size_t(i * (k / 32) + b), blk, 2);  // the F16 d, unchanged
      w.zeros[size_t(i * (k / 32) + b)] = 8;
      for (int e = 0; e < 16; ++e) {
        w.set_code(i, 32 * b + e, blk[2 + e] & 15);
        w.set_code(i, 32 * b + e + 16, blk[2 + e] >> 4);
      }
    }
  }
  return w;
}

}  // namespace tf

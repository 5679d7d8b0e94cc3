// Reference scalar code, written for clarity: one pass per block, the operations in the order
// the Python reference uses (see the header). SmolLM2-135M's 135M weights dequantize in well
// under a second on two cores (docs/PERF.md).
#include "quant/gguf_dequant.h"

#include <cstring>

#include "core/error.h"

namespace tf {

namespace {

float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

void q8_0(const uint8_t* b, float* y) {
  const float d = half(b);
  for (int j = 0; j < 32; ++j) y[j] = float(int8_t(b[2 + j])) * d;
}

void q4_0(const uint8_t* b, float* y) {
  const float d = half(b);
  const uint8_t* q = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float(int(q[j] & 0x0f) - 8);
    y[j + 16] = d * float(int(q[j] >> 4) - 8);
  }
}

void q4_1(const uint8_t* b, float* y) {
  const float d = half(b), m = half(b + 2);
  const uint8_t* q = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float(q[j] & 0x0f) + m;
    y[j + 16] = d * float(q[j] >> 4) + m;
  }
}

// Q4_K and Q5_K: eight sub-blocks of 32 with 6-bit scales and mins; `qh` (Q5_K only, else
// null) holds each element's fifth bit.
void k4_or_k5(const uint8_t* b, const uint8_t* qh, const uint8_t* q, float* y) {
  const float d = half(b), dmin = half(b + 2);
  const uint8_t* scales = b + 4;
  for (int sb = 0; sb < 8; ++sb) {
    int sc, mn;
    k4_scale_min(sb, scales, &sc, &mn);
    const float dl = d * float(sc), ml = dmin * float(mn);
    const uint8_t* qs = q + 32 * (sb / 2);
    const int shift = 4 * (sb % 2);
    for (int l = 0; l < 32; ++l) {
      const int v = ((qs[l] >> shift) & 0x0f) | (qh ? ((qh[l] >> sb) & 1) << 4 : 0);
      y[32 * sb + l] = dl * float(v) - ml;
    }
  }
}

void q4_k(const uint8_t* b, float* y) { k4_or_k5(b, nullptr, b + 16, y); }
void q5_k(const uint8_t* b, float* y) { k4_or_k5(b, b + 16, b + 48, y); }

// Element e = 128 h + r (h: half of the block): low nibble from byte 64 h + r % 64 (high
// nibble when r >= 64), two high bits from byte 32 h + r % 32 at bit 2 (r / 32); scale e / 16.
void q6_k(const uint8_t* b, float* y) {
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half(b + 208);
  for (int e = 0; e < 256; ++e) y[e] = (d * float(scales[e / 16])) * float(q6k_value(b, e) - 32);
}

}  // namespace

bool can_dequantize(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16:
    case DType::Q8_0: case DType::Q4_0: case DType::Q4_1:
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

void dequantize_row(DType t, const uint8_t* src, float* out, int64_t k) {
  const int64_t nb = dtype_block_elems(t);
  TF_ASSERT(k % nb == 0, "{} rows hold whole blocks of {}, not {}", dtype_name(t), nb, k);
  switch (t) {
    case DType::F32:
      std::memcpy(out, src, size_t(k) * 4);
      return;
    case DType::F16:
      for (int64_t i = 0; i < k; ++i) out[i] = half(src + 2 * i);
      return;
    case DType::BF16:
      for (int64_t i = 0; i < k; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      }
      return;
    default:
      break;
  }
  void (*block)(const uint8_t*, float*) = nullptr;
  switch (t) {
    case DType::Q8_0: block = q8_0; break;
    case DType::Q4_0: block = q4_0; break;
    case DType::Q4_1: block = q4_1; break;
    case DType::Q4_K: block = q4_k; break;
    case DType::Q5_K: block = q5_k; break;
    case DType::Q6_K: block = q6_k; break;
    default: TF_ASSERT(false, "no dequantizer for {}", dtype_name(t));
  }
  const size_t block_bytes = dtype_row_bytes(t, nb);
  for (int64_t i = 0; i < k / nb; ++i) block(src + size_t(i) * block_bytes, out + i * nb);
}

void dequantize_rows(DType t, const uint8_t* src, float* out, int64_t n_rows, int64_t k) {
  const size_t row_bytes = dtype_row_bytes(t, k);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n_rows; ++r) dequantize_row(t, src + size_t(r) * row_bytes, out + r * k, k);
}

}  // namespace tf

// Repacking of 4-bit weights into U4x4 and of 8-bit ones into U8x4; see quant_pack.h.
#include "backend/cpu/quant_pack.h"

#include <cstring>

#include "quant/gguf_dequant.h"

namespace tf::cpu {
namespace {

constexpr int64_t kBlock = 32;

// The 32 nibble values of block b of a row, in element order.
void block_values(const TensorView& w, int64_t row, int64_t b, uint8_t* v) {
  const int64_t k = w.shape[1];
  const uint8_t* data = w.as<uint8_t>();
  switch (w.dtype) {
    case DType::Q4_0: {  // {f16 d, 16 bytes}: element i low nibble of byte i, 16 + i high
      const uint8_t* qs = data + (row * (k / kBlock) + b) * 18 + 2;
      for (int i = 0; i < 16; ++i) {
        v[i] = qs[i] & 0xF;
        v[16 + i] = qs[i] >> 4;
      }
      return;
    }
    case DType::Q4_1: {  // {f16 d, f16 m, 16 bytes} nibbles as Q4_0
      const uint8_t* qs = data + (row * (k / kBlock) + b) * 20 + 4;
      for (int i = 0; i < 16; ++i) {
        v[i] = qs[i] & 0xF;
        v[16 + i] = qs[i] >> 4;
      }
      return;
    }
    case DType::W4: {  // element j in byte j / 2, low nibble for even j
      const uint8_t* q = data + row * (k / 2) + b * 16;
      for (int i = 0; i < 16; ++i) {
        v[2 * i] = q[i] & 0xF;
        v[2 * i + 1] = q[i] >> 4;
      }
      return;
    }
    case DType::Q4_K: {  // sub-block j: low (even j) or high nibbles of 32 bytes at 16 + 32 (j / 2)
      const uint8_t* p = data + (row * (k / 256) + b / 8) * 144;
      const int j = int(b % 8);
      for (int i = 0; i < 32; ++i) v[i] = j % 2 ? p[16 + 32 * (j / 2) + i] >> 4 : p[16 + 32 * (j / 2) + i] & 0xF;
      return;
    }
    default: return;
  }
}

// Writes the header of segment s of row r (r < 4) of a group; `row` is its row in w.
void put_header(const TensorView& w, int64_t row, int64_t r, int64_t s, uint8_t* h) {
  const int64_t k = w.shape[1];
  const uint8_t* data = w.as<uint8_t>();
  switch (w.dtype) {
    case DType::Q4_0: std::memcpy(h + 2 * r, data + (row * (k / kBlock) + s) * 18, 2); return;
    case DType::Q4_1: {
      const uint8_t* p = data + (row * (k / kBlock) + s) * 20;
      std::memcpy(h + 2 * r, p, 2);          // d
      std::memcpy(h + 8 + 2 * r, p + 2, 2);  // m
      return;
    }
    case DType::W4: {
      const int64_t g = row * (k / w.group_size) + s;
      std::memcpy(h + 2 * r, static_cast<const uint8_t*>(w.scales) + 2 * g, 2);
      h[8 + r] = static_cast<const uint8_t*>(w.zeros)[g];
      return;
    }
    case DType::Q4_K: {
      const uint8_t* p = data + (row * (k / 256) + s) * 144;
      std::memcpy(h + 2 * r, p, 2);          // d
      std::memcpy(h + 8 + 2 * r, p + 2, 2);  // dmin
      for (int j = 0; j < 8; ++j) {
        int sc, mn;
        k4_scale_min(j, p + 4, &sc, &mn);
        h[16 + 4 * j + r] = uint8_t(sc);
        h[48 + 4 * j + r] = uint8_t(mn);
      }
      return;
    }
    default: return;
  }
}

}  // namespace

U4x4Layout u4x4_layout(const TensorView& w) {
  if (w.n_dims != 2 || w.shape[1] % kBlock != 0) return {};
  switch (w.dtype) {
    case DType::Q4_0: return {.blocks_per_segment = 1, .header_bytes = 8};
    case DType::Q4_1: return {.blocks_per_segment = 1, .header_bytes = 16};
    case DType::W4:
      if (!w.scales || !w.zeros || w.group_size <= 0 || w.group_size % kBlock || w.shape[1] % w.group_size) return {};
      return {.blocks_per_segment = w.group_size / kBlock, .header_bytes = 12};
    case DType::Q4_K:
      if (w.shape[1] % 256) return {};
      return {.blocks_per_segment = 8, .header_bytes = 80};
    default: return {};
  }
}

int64_t u4x4_bytes(const TensorView& w) {
  const U4x4Layout l = u4x4_layout(w);
  if (l.blocks_per_segment == 0) return 0;
  const int64_t groups = (w.shape[0] + kU4x4Rows - 1) / kU4x4Rows;
  return groups * (w.shape[1] / kBlock / l.blocks_per_segment) * l.segment_bytes();
}

void pack_u4x4(const TensorView& w, uint8_t* out) {
  const U4x4Layout l = u4x4_layout(w);
  const int64_t m = w.shape[0], nb = w.shape[1] / kBlock, n_seg = nb / l.blocks_per_segment;
  const int64_t groups = (m + kU4x4Rows - 1) / kU4x4Rows;
  uint8_t v[kBlock];
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t s = 0; s < n_seg; ++s) {
      uint8_t* seg = out + (g * n_seg + s) * l.segment_bytes();
      std::memset(seg, 0, size_t(l.segment_bytes()));  // padding rows: scales 0, nibbles 0
      for (int64_t r = 0; r < kU4x4Rows; ++r) {
        const int64_t row = g * kU4x4Rows + r;
        if (row >= m) continue;
        put_header(w, row, r, s, seg);
        for (int64_t i = 0; i < l.blocks_per_segment; ++i) {
          block_values(w, row, s * l.blocks_per_segment + i, v);
          uint8_t* dst = seg + l.header_bytes + i * kU4x4BlockBytes + 16 * r;
          for (int j = 0; j < 16; ++j) dst[j] = uint8_t(v[j] | (v[16 + j] << 4));
        }
      }
    }
  }
}

U4x4Layout u8x4_layout(const TensorView& w) {
  if (w.n_dims != 2 || w.shape[1] % kBlock != 0) return {};
  switch (w.dtype) {
    case DType::Q8_0: return {.blocks_per_segment = 1, .header_bytes = 8};
    case DType::W8:
      if (!w.scales) return {};
      return {.blocks_per_segment = w.shape[1] / kBlock, .header_bytes = 16};
    case DType::Q6_K:
      if (w.shape[1] % 256 != 0) return {};
      return {.blocks_per_segment = 8, .header_bytes = 72};
    case DType::Q5_K:
      if (w.shape[1] % 256 != 0) return {};
      return {.blocks_per_segment = 8, .header_bytes = 80};
    default: return {};
  }
}

int64_t u8x4_bytes(const TensorView& w) {
  const U4x4Layout l = u8x4_layout(w);
  if (l.blocks_per_segment == 0) return 0;
  const int64_t groups = (w.shape[0] + kU4x4Rows - 1) / kU4x4Rows;
  const int64_t seg_bytes = l.header_bytes + l.blocks_per_segment * kU8x4BlockBytes;
  return groups * (w.shape[1] / kBlock / l.blocks_per_segment) * seg_bytes;
}

void pack_u8x4(const TensorView& w, uint8_t* out) {
  const U4x4Layout l = u8x4_layout(w);
  const int64_t m = w.shape[0], k = w.shape[1], nb = k / kBlock, n_seg = nb / l.blocks_per_segment;
  const int64_t groups = (m + kU4x4Rows - 1) / kU4x4Rows;
  const int64_t seg_bytes = l.header_bytes + l.blocks_per_segment * kU8x4BlockBytes;
  const uint8_t* data = w.as<uint8_t>();
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t s = 0; s < n_seg; ++s) {
      uint8_t* seg = out + (g * n_seg + s) * seg_bytes;
      std::memset(seg, 0, size_t(seg_bytes));  // padding rows: scales 0, codes 0
      for (int64_t r = 0; r < kU4x4Rows; ++r) {
        const int64_t row = g * kU4x4Rows + r;
        if (row >= m) continue;
        for (int64_t i = 0; i < l.blocks_per_segment; ++i) {
          const int64_t b = s * l.blocks_per_segment + i;
          uint8_t* dst = seg + l.header_bytes + i * kU8x4BlockBytes + kBlock * r;
          if (w.dtype == DType::Q8_0) {  // {f16 d, int8 qs[32]}
            const uint8_t* p = data + (row * nb + b) * 34;
            std::memcpy(seg + 2 * r, p, 2);
            std::memcpy(dst, p + 2, kBlock);
          } else if (w.dtype == DType::Q6_K) {  // {ql[128], qh[64], int8 scales[16], f16 d}; scale e / 16
            const uint8_t* p = data + row * int64_t(dtype_row_bytes(w.dtype, k)) + s * 210;
            std::memcpy(seg + 2 * r, p + 208, 2);
            seg[8 + 8 * i + 2 * r] = p[192 + 2 * i];
            seg[8 + 8 * i + 2 * r + 1] = p[192 + 2 * i + 1];
            for (int j = 0; j < kBlock; ++j) dst[j] = uint8_t(int8_t(q6k_value(p, int(32 * i) + j) - 32));
          } else if (w.dtype == DType::Q5_K) {  // {f16 d, f16 dmin, scales[12], qh[32], qs[128]}
            const uint8_t* p = data + row * int64_t(dtype_row_bytes(w.dtype, k)) + s * 176;
            std::memcpy(seg + 2 * r, p, 2);
            std::memcpy(seg + 8 + 2 * r, p + 2, 2);
            int sc = 0, mn = 0;
            k4_scale_min(int(i), p + 4, &sc, &mn);
            seg[16 + 4 * i + r] = uint8_t(sc);
            seg[48 + 4 * i + r] = uint8_t(mn);
            for (int j = 0; j < kBlock; ++j) dst[j] = uint8_t(int8_t(q5k_value(p, int(32 * i) + j) - 16));
          } else {  // W8: int8 [m, k], scales F32 [m]
            std::memcpy(dst, data + row * k + b * kBlock, kBlock);
          }
        }
        if (w.dtype == DType::W8) std::memcpy(seg + 4 * r, static_cast<const float*>(w.scales) + row, 4);
      }
    }
  }
}

}  // namespace tf::cpu

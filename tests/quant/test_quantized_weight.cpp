// src/quant/quantized_weight and group_quant: the W8/W4/FP8 layouts of quant/formats.h on
// hand-checked values (nibble packing, scales and zero points including zero points 0 and
// 15, negative values, all-zero groups, group boundaries, odd shapes), round trips within
// the formats' error bounds, GGUF Q8_0/Q4_0 dequantization and the exact Q4_0 -> W4 repack,
// and the errors a loader gets for malformed parts (each naming the tensor).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "quant/group_quant.h"
#include "quant/quantized_weight.h"
#include "quant/quantizer.h"
#include "test_util.h"

namespace tf {
namespace {

std::vector<float> ramp(int64_t n, float from, float step) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = from + step * float(i);
  return v;
}

TEST(W4Packing, KnownBytes) {
  const uint8_t codes[] = {1, 2, 15, 0, 0, 15, 7, 8};
  uint8_t packed[4];
  pack_w4(codes, 8, packed);
  EXPECT_EQ(packed[0], 0x21);  // element 0 low nibble, element 1 high
  EXPECT_EQ(packed[1], 0x0f);
  EXPECT_EQ(packed[2], 0xf0);
  EXPECT_EQ(packed[3], 0x87);
  uint8_t back[8];
  unpack_w4(packed, 8, back);
  EXPECT_EQ(std::memcmp(back, codes, 8), 0);
  // every byte value unpacks and packs back to itself
  for (int b = 0; b < 256; ++b) {
    const uint8_t in = uint8_t(b);
    uint8_t two[2], out;
    unpack_w4(&in, 2, two);
    pack_w4(two, 2, &out);
    EXPECT_EQ(out, in);
  }
}

TEST(W8, HandCheckedRow) {
  // amax 127 -> scale 1; 0.5 and 2.5 are ties that go to even (0 and 2); -127 stays in range.
  const std::vector<float> w = {1.0f, -2.0f, 0.5f, 127.0f, 2.5f, -127.0f};
  const QuantizedWeight q = quantize_rtn(w.data(), 1, 6, QuantSpec{.format = DType::W8}, "w");
  EXPECT_EQ(q.params(0, 0).scale, 1.0f);
  const int8_t want[] = {1, -2, 0, 127, 2, -127};
  for (int j = 0; j < 6; ++j) EXPECT_EQ(int8_t(q.code(0, j)), want[j]) << j;
  EXPECT_EQ(dequantize(q.view()), (std::vector<float>{1, -2, 0, 127, 2, -127}));
}

TEST(W8, RoundTripWithinHalfAStepOnOddShapes) {
  for (auto [m, k] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {5, 33}, {2, 300}}) {
    std::vector<float> w(static_cast<size_t>(m * k));
    for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(float(i) * 1.7f) * (1.0f + float(i % 5));
    const QuantizedWeight q = quantize_rtn(w.data(), m, k, QuantSpec{.format = DType::W8}, "w");
    const std::vector<float> d = dequantize(q.view());
    for (int64_t i = 0; i < m; ++i) {
      float amax = 0;
      for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::abs(w[size_t(i * k + j)]));
      EXPECT_EQ(q.params(i, 0).scale, amax / 127.0f);
      for (int64_t j = 0; j < k; ++j)
        EXPECT_LE(std::abs(d[size_t(i * k + j)] - w[size_t(i * k + j)]), amax / 254.0f * 1.0001f) << i << "," << j;
    }
  }
}

TEST(W4, ZeroPointsAtZeroAndFifteenAndNegativeValues) {
  const int64_t k = 96;
  std::vector<float> w;
  for (float v : ramp(32, 0.0f, 15.0f / 31.0f)) w.push_back(std::nearbyint(v));    // 0..15: zero 0
  for (float v : ramp(32, -15.0f, 15.0f / 31.0f)) w.push_back(std::nearbyint(v));  // -15..0: zero 15
  for (float v : ramp(32, -3.0f, 15.0f / 31.0f)) w.push_back(std::nearbyint(v));   // -3..12: zero 3
  const QuantizedWeight q = quantize_rtn(w.data(), 1, k, QuantSpec{.format = DType::W4, .group_size = 32}, "w");
  EXPECT_EQ(q.params(0, 0).scale, 1.0f);
  EXPECT_EQ(q.params(0, 0).zero, 0);
  EXPECT_EQ(q.params(0, 1).scale, 1.0f);
  EXPECT_EQ(q.params(0, 1).zero, 15);
  EXPECT_EQ(q.params(0, 2).zero, 3);
  EXPECT_EQ(dequantize(q.view()), w);  // integers on a unit grid: exact
  EXPECT_EQ(q.code(0, 32), 0);         // -15 with zero 15
  EXPECT_EQ(q.code(0, 63), 15);        // 0 with zero 15
  // the stored bytes: element 2j in the low nibble
  EXPECT_EQ(q.data[0], uint8_t(q.code(0, 0) | q.code(0, 1) << 4));
}

TEST(W4, AllZeroGroupAndSymmetric) {
  std::vector<float> w(64, 0.0f);
  for (int j = 32; j < 64; ++j) w[size_t(j)] = float(j - 48);  // -16..15
  const QuantizedWeight a = quantize_rtn(w.data(), 1, 64, QuantSpec{.format = DType::W4, .group_size = 32}, "w");
  EXPECT_EQ(a.params(0, 0).scale, 0.0f);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(a.code(0, j), a.params(0, 0).zero);
  const std::vector<float> d = dequantize(a.view());
  for (int j = 0; j < 32; ++j) EXPECT_EQ(d[size_t(j)], 0.0f);
  // symmetric: zero 8, scale 2 amax / 15 rounded to F16; -16 -> code 0 (-8 steps), 15 -> code 15
  const QuantizedWeight s =
      quantize_rtn(w.data(), 1, 64, QuantSpec{.format = DType::W4, .group_size = 32, .symmetric = true}, "w");
  EXPECT_EQ(s.params(0, 1).zero, 8);
  EXPECT_EQ(s.params(0, 1).scale, f16_to_f32(f32_to_f16(32.0f / 15.0f)));
  EXPECT_EQ(s.code(0, 32), 0);
  EXPECT_EQ(s.code(0, 63), 15);
  EXPECT_EQ(s.params(0, 0).zero, 8);
}

// Groups of very different magnitudes side by side: each keeps its own scale, so each
// element's error is within its own group's step (a dequantizer that read the wrong group's
// parameters fails by orders of magnitude). Half a step is the rounding; the integer zero
// point and the F16 scale can push the extremes of a group up to half a step more.
TEST(W4, GroupBoundariesOnOddShapes) {
  for (int32_t g : {32, 64, 128}) {
    for (int64_t m : {1, 3, 7}) {
      const int64_t k = 4 * g;
      std::vector<float> w(static_cast<size_t>(m * k));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < k; ++j)
          w[size_t(i * k + j)] = std::cos(float(i * k + j)) * std::pow(10.0f, float(j / g) - 2.0f) + (j / g == 3 ? 0.3f : 0.0f);
      const QuantizedWeight q = quantize_rtn(w.data(), m, k, QuantSpec{.format = DType::W4, .group_size = g}, "w");
      const std::vector<float> d = dequantize(q.view());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < k; ++j) {
          const GroupParams p = q.params(i, j / g);
          EXPECT_LE(std::abs(d[size_t(i * k + j)] - w[size_t(i * k + j)]), p.scale * 1.001f)
              << "g=" << g << " row " << i << " col " << j;
        }
    }
  }
}

TEST(Fp8Weights, RoundTripWithinHalfAnUlp) {
  const int64_t m = 3, k = 37;
  std::vector<float> w(static_cast<size_t>(m * k));
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(float(i)) * std::pow(2.0f, float(i % 7) - 3.0f);
  const QuantizedWeight q = quantize_rtn(w.data(), m, k, QuantSpec{.format = DType::FP8}, "w");
  const std::vector<float> d = dequantize(q.view());
  for (int64_t i = 0; i < m; ++i) {
    const float s = q.params(i, 0).scale;
    for (int64_t j = 0; j < k; ++j) {
      const float x = w[size_t(i * k + j)] / s, err = std::abs(d[size_t(i * k + j)] - w[size_t(i * k + j)]) / s;
      // 3 mantissa bits: half an ulp is 2^-4 of |x| for normals, 2^-10 absolute below 2^-6
      EXPECT_LE(err, std::max(std::abs(x) * 0.0625f, std::ldexp(1.0f, -10)) * 1.0001f) << i << "," << j;
    }
    float amax = 0;
    for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::abs(w[size_t(i * k + j)]));
    EXPECT_EQ(s, amax / 448.0f);
  }
}

TEST(Gguf, Q8_0AndQ4_0DequantizeAndQ4_0RepacksExactly) {
  // one row of 64 = two blocks of each
  const int64_t k = 64;
  std::vector<uint8_t> q8(2 * 34), q4(2 * 18);
  const float d[2] = {0.5f, -0.25f};
  for (int b = 0; b < 2; ++b) {
    const uint16_t h = f32_to_f16(d[b]);
    std::memcpy(q8.data() + 34 * b, &h, 2);
    std::memcpy(q4.data() + 18 * b, &h, 2);
    for (int e = 0; e < 32; ++e) q8[size_t(34 * b + 2 + e)] = uint8_t(int8_t(e - 16));
    for (int e = 0; e < 16; ++e) q4[size_t(18 * b + 2 + e)] = uint8_t((e & 15) | ((15 - e) << 4));
  }
  const std::vector<float> w8 = dequantize(make_view(q8.data(), DType::Q8_0, {1, k}));
  const std::vector<float> w4 = dequantize(make_view(q4.data(), DType::Q4_0, {1, k}));
  for (int b = 0; b < 2; ++b)
    for (int e = 0; e < 32; ++e) {
      EXPECT_EQ(w8[size_t(32 * b + e)], d[b] * float(e - 16));
      const int code = e < 16 ? e : 15 - (e - 16);  // element e + 16 is the high nibble of byte e
      EXPECT_EQ(w4[size_t(32 * b + e)], d[b] * float(code - 8)) << b << "," << e;
    }
  const QuantizedWeight r = repack_q4_0_to_w4(make_view(q4.data(), DType::Q4_0, {1, k}));
  EXPECT_EQ(r.group_size, 32);
  EXPECT_EQ(dequantize(r.view()), w4);
}

// ---- errors a loader reports ----------------------------------------------------------------

struct Parts {
  std::vector<uint8_t> data, scales, zeros;
  QuantizedParts parts;
};
// Well-formed W4 parts of [m, k] with group size g (all zero bytes).
Parts w4_parts(int64_t m, int64_t k, int32_t g) {
  Parts p;
  p.data.resize(size_t(m * k / 2));
  p.scales.resize(size_t(m * (k / g) * 2));
  p.zeros.resize(size_t(m * (k / g)));
  p.parts = QuantizedParts{.name = "model.layers.3.mlp.down_proj.weight", .format = DType::W4, .m = m, .k = k,
                           .group_size = g,
                           .data = make_view(p.data.data(), DType::U8, {m, k / 2}),
                           .scales = make_view(p.scales.data(), DType::F16, {m, k / g}),
                           .zeros = make_view(p.zeros.data(), DType::U8, {m, k / g})};
  return p;
}

TEST(QuantizedParts, WellFormedPartsMakeAView) {
  Parts p = w4_parts(4, 256, 128);
  const TensorView v = make_quantized_view(p.parts);
  EXPECT_EQ(v.dtype, DType::W4);
  EXPECT_EQ(v.shape[0], 4);
  EXPECT_EQ(v.shape[1], 256);
  EXPECT_EQ(v.group_size, 128);
  EXPECT_EQ(v.scales, p.scales.data());
  EXPECT_EQ(v.nbytes(), 4u * 128u);
  std::vector<int8_t> q8(12);
  std::vector<float> s(3);
  const TensorView w8 = make_quantized_view(QuantizedParts{.name = "w8", .format = DType::W8, .m = 3, .k = 4,
                                                           .data = make_view(q8.data(), DType::I8, {3, 4}),
                                                           .scales = make_view(s.data(), DType::F32, {3})});
  EXPECT_EQ(w8.dtype, DType::W8);
}

TEST(QuantizedParts, ErrorsNameTheTensorAndThePart) {
  const std::string name = "model.layers.3.mlp.down_proj.weight";
  {
    Parts p = w4_parts(4, 256, 128);
    p.parts.group_size = 96;  // a multiple of 32 that does not divide 256
    const std::string e = test::error_of([&] { make_quantized_view(p.parts); });
    EXPECT_CONTAINS(e, name);
    EXPECT_CONTAINS(e, "group size 96 does not divide the input dimension 256");
  }
  {
    Parts p = w4_parts(4, 256, 128);
    p.parts.group_size = 100;
    EXPECT_CONTAINS(test::error_of([&] { make_quantized_view(p.parts); }), "not a positive multiple of 32");
  }
  {
    Parts p = w4_parts(4, 256, 128);
    p.parts.scales.shape[1] = 4;  // [4, 4] where [4, 2] belongs
    const std::string e = test::error_of([&] { make_quantized_view(p.parts); });
    EXPECT_CONTAINS(e, name);
    EXPECT_CONTAINS(e, "scales of shape [4, 4]");
    EXPECT_CONTAINS(e, "expected [4, 2]");
  }
  {
    Parts p = w4_parts(4, 256, 128);
    p.parts.data.shape[1] = 256;  // unpacked size: one byte per element
    const std::string e = test::error_of([&] { make_quantized_view(p.parts); });
    EXPECT_CONTAINS(e, name);
    EXPECT_CONTAINS(e, "packed values of shape [4, 256] (1024 bytes), expected [4, 128] (512 bytes)");
  }
  {
    Parts p = w4_parts(4, 256, 128);
    p.parts.zeros = {};
    EXPECT_CONTAINS(test::error_of([&] { make_quantized_view(p.parts); }), "zero points are missing");
  }
  {
    Parts p = w4_parts(4, 256, 128);
    p.parts.scales.dtype = DType::F32;
    EXPECT_CONTAINS(test::error_of([&] { make_quantized_view(p.parts); }), "scales of dtype F32, expected F16");
  }
  {
    Parts p = w4_parts(4, 256, 128);
    p.parts.format = DType::BF16;
    const std::string e = test::error_of([&] { make_quantized_view(p.parts); });
    EXPECT_CONTAINS(e, name);
    EXPECT_CONTAINS(e, "unknown quantized format BF16");
  }
  EXPECT_CONTAINS(test::error_of([] { parse_quant_format("int3", "config.json quantization_config.format"); }),
                  "config.json quantization_config.format: unknown quantization format 'int3'");
  EXPECT_EQ(parse_quant_format("int4", "x"), DType::W4);
}

TEST(QuantizerInput, ErrorsNameTheTensor) {
  std::vector<float> w(2 * 96, 1.0f);
  EXPECT_CONTAINS(test::error_of([&] {
                    quantize_rtn(w.data(), 2, 96, QuantSpec{.format = DType::W4, .group_size = 64}, "blk.0.attn_q");
                  }),
                  "blk.0.attn_q: int4 group size 64 does not divide the input dimension 96");
  w[5] = std::nanf("");
  EXPECT_CONTAINS(test::error_of([&] { quantize_rtn(w.data(), 2, 96, QuantSpec{.format = DType::W8}, "blk.0.attn_q"); }),
                  "blk.0.attn_q: element [0, 5] is nan");
  w[5] = 1e9f;  // a W4 group spanning 1e9: its scale overflows F16
  EXPECT_CONTAINS(test::error_of([&] {
                    quantize_rtn(w.data(), 2, 96, QuantSpec{.format = DType::W4, .group_size = 32}, "blk.0.attn_q");
                  }),
                  "blk.0.attn_q: the scale of row 0 group 0 is beyond the F16 range");
}

}  // namespace
}  // namespace tf

// CpuBackend::matmul_quant_fast (the integer kernels of quantized weights) against the
// reference backend's F32 matmul over the dequantized weights, for W8, W4 (group sizes 32,
// 64, 128), Q8_0, Q4_0, Q4_1, Q4_K, Q5_K and Q6_K, over shapes that hit every tail: tokens n
// around the 4-token tile, output rows m around the 4-row block, k from one block of 32 (one
// super-block of 256 for the K types, whose rows hold whole super-blocks) up past several (odd
// counts: 3 and 5 blocks); with and without bias; at every ISA level (isa_test_main.cpp).
//
// Each weight runs as given and uploaded through the backend (CpuBackend::upload repacks
// Q4_0, Q4_1, W4 and Q4_K as U4x4, Q8_0, W8, Q6_K and Q5_K as U8x4, for its AVX2/AVX-512 kernels:
// backend/cpu/quant_pack.h; uploaded, 4 tokens or more run on the prefill GEMM; the last
// tests here check the U8x4 bytes and that the uploaded 8-bit weights run on them). Weights are random bytes in each layout
// (every nibble and byte value, random scales, zeros, minimums and 6-bit sub-scales) and are
// dequantized here by scalar code written from the layout definitions (src/quant/formats.h
// and ggml's block formats), independently of the kernels. For the GGUF types that
// dequantization is checked against quant/gguf_dequant.h's, which tests/quant/
// test_gguf_dequant.cpp holds bit for bit to the `gguf` package's gguf.quants.dequantize: the
// reference is the matmul over gguf.quants.dequantize's weights.
//
// Each shape runs with both activation precisions (backend/cpu/kernels/kernels.h): 16-bit
// (the default; two int8 planes) and 8-bit (BackendOptions::int8_activations). Two
// comparisons per shape and precision:
//  1. Exactness of the kernel: the reference gets the activations as the kernel sees them,
//     quantized per block of 32 (d = max|x| / 127 or / 32258, q = nearbyint(x * (1 / d))) by
//     scalar code here, then dequantized. Both sides then sum the same products and differ only in the
//     order of float additions: tolerance 1e-5 of each output's natural scale (as the float
//     matmul test; an indexing, scale or tail mistake gives errors of order 1).
//  2. The kernel's error against the reference matmul over the unquantized activations:
//     rounding x to INT8 per block errs by at most d / 2 = max|x| / 254 per element, about
//     d / sqrt(12) in RMS; relative to the output's natural scale that is
//     (max|x| / 127) / sqrt(12) / rms(x), about 0.005 for normal activations in blocks of 32
//     (max|x| ~ 2.1 rms, up to ~3.5 in an unlucky block), and an output of one block (the
//     smallest shapes here) can read 3-4 times its RMS error by chance. Tolerance 0.03 for
//     8 bits; 16-bit steps are 254 times finer: tolerance 0.03 / 100.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/quant_pack.h"
#include "core/huge_pages.h"
#include "op_test_util.h"
#include "quant/gguf_dequant.h"

namespace tf {
namespace {

using test::GuardedOut;
using test::Rng;

constexpr double kExactTol = 1e-5;
constexpr double kQuantTol8 = 0.03, kQuantTol16 = kQuantTol8 / 100;

// A quantized weight in host memory: packed values, and the scale/zero arrays of W8/W4.
struct QWeight {
  DType dtype;
  int64_t m = 0, k = 0;
  int32_t group = 0;
  std::vector<uint8_t> data, scales, zeros;
  std::vector<float> dequant;  // [m, k]

  TensorView view() {
    TensorView v = make_view(data.data(), dtype, {m, k});
    v.scales = scales.empty() ? nullptr : scales.data();
    v.zeros = zeros.empty() ? nullptr : zeros.data();
    v.group_size = group;
    return v;
  }
};

uint16_t random_half(Rng& rng, double lo, double hi) { return f32_to_f16(float(lo + (hi - lo) * rng.uniform())); }
void put_half(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }
float get_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// The 6-bit scale and min of sub-block `sub` of a Q4_K / Q5_K super-block, as ggml packs them
// in 12 bytes.
void k_scale_min(const uint8_t* sc, int sub, int* s, int* mn) {
  if (sub < 4) {
    *s = sc[sub] & 63;
    *mn = sc[sub + 4] & 63;
  } else {
    *s = (sc[sub + 4] & 0xF) | ((sc[sub - 4] >> 6) << 4);
    *mn = (sc[sub + 4] >> 4) | ((sc[sub] >> 6) << 4);
  }
}

// Random weights of one layout, with their dequantized values (scalar, from the layout).
// fill >= 0: every byte of the layout's data is fill instead of random (the scales the
// layouts keep in their blocks are then written over it as for random bytes).
QWeight make_weight(Rng& rng, DType dtype, int64_t m, int64_t k, int32_t group, int fill = -1) {
  QWeight w{.dtype = dtype, .m = m, .k = k, .group = group};
  w.data.resize(dtype_row_bytes(dtype, k) * size_t(m));
  w.dequant.resize(size_t(m * k));
  for (auto& b : w.data) b = uint8_t(fill >= 0 ? fill : rng.uniform_int(0, 255));
  float* out = w.dequant.data();
  switch (dtype) {
    case DType::W8: {  // q I8 [m, k] in -127..127; scales F32 [m]
      w.scales.resize(size_t(m) * 4);
      for (int64_t i = 0; i < m; ++i) {
        const float s = float(0.001 + 0.02 * rng.uniform());
        std::memcpy(w.scales.data() + i * 4, &s, 4);
        for (int64_t j = 0; j < k; ++j) {
          const int8_t q = int8_t(rng.uniform_int(-127, 127));
          w.data[size_t(i * k + j)] = uint8_t(q);
          out[i * k + j] = s * float(q);
        }
      }
      break;
    }
    case DType::W4: {  // q U8 [m, k / 2] (low nibble = even j); scales F16 [m, k / G]; zeros U8 [m, k / G]
      const int64_t groups = k / group;
      w.scales.resize(size_t(m * groups) * 2);
      w.zeros.resize(size_t(m * groups));
      for (int64_t g = 0; g < m * groups; ++g) {
        put_half(w.scales.data() + 2 * g, random_half(rng, 0.001, 0.05));
        w.zeros[size_t(g)] = uint8_t(rng.uniform_int(0, 15));
      }
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < k; ++j) {
          const uint8_t byte = w.data[size_t(i * (k / 2) + j / 2)];
          const int q = j % 2 == 0 ? byte & 0xF : byte >> 4;
          const int64_t g = i * groups + j / group;
          out[i * k + j] = get_half(w.scales.data() + 2 * g) * float(q - int(w.zeros[size_t(g)]));
        }
      break;
    }
    case DType::Q8_0: {  // blocks of {f16 d, int8 qs[32]}
      for (int64_t i = 0; i < m; ++i)
        for (int64_t b = 0; b < k / 32; ++b) {
          uint8_t* p = w.data.data() + (i * (k / 32) + b) * 34;
          put_half(p, random_half(rng, 0.0005, 0.02));
          for (int j = 0; j < 32; ++j) out[i * k + b * 32 + j] = get_half(p) * float(int8_t(p[2 + j]));
        }
      break;
    }
    case DType::Q4_0: {  // blocks of {f16 d, uint8 qs[16]}: element j < 16 low nibble of qs[j], j >= 16 high of qs[j - 16]
      for (int64_t i = 0; i < m; ++i)
        for (int64_t b = 0; b < k / 32; ++b) {
          uint8_t* p = w.data.data() + (i * (k / 32) + b) * 18;
          put_half(p, random_half(rng, 0.001, 0.05));
          for (int j = 0; j < 32; ++j) {
            const int q = j < 16 ? p[2 + j] & 0xF : p[2 + j - 16] >> 4;
            out[i * k + b * 32 + j] = get_half(p) * float(q - 8);
          }
        }
      break;
    }
    case DType::Q4_1: {  // blocks of {f16 d, f16 m, uint8 qs[16]}: nibbles as Q4_0, w = d q + m
      for (int64_t i = 0; i < m; ++i)
        for (int64_t b = 0; b < k / 32; ++b) {
          uint8_t* p = w.data.data() + (i * (k / 32) + b) * 20;
          put_half(p, random_half(rng, 0.001, 0.05));
          put_half(p + 2, random_half(rng, -0.4, 0.1));
          for (int j = 0; j < 32; ++j) {
            const int q = j < 16 ? p[4 + j] & 0xF : p[4 + j - 16] >> 4;
            out[i * k + b * 32 + j] = get_half(p) * float(q) + get_half(p + 2);
          }
        }
      break;
    }
    case DType::Q4_K: {  // super-blocks of {f16 d, f16 dmin, uint8 scales[12], uint8 qs[128]}
      for (int64_t i = 0; i < m; ++i)
        for (int64_t sb = 0; sb < k / 256; ++sb) {
          uint8_t* p = w.data.data() + (i * (k / 256) + sb) * 144;
          put_half(p, random_half(rng, 0.0001, 0.002));
          put_half(p + 2, random_half(rng, 0.0001, 0.002));
          const uint8_t* sc = p + 4;
          const uint8_t* qs = p + 16;
          for (int sub = 0; sub < 8; ++sub) {
            int s, mn;
            k_scale_min(sc, sub, &s, &mn);
            for (int l = 0; l < 32; ++l) {  // sub-block 2c: low nibbles of qs[32c ..]; 2c + 1: high
              const uint8_t byte = qs[32 * (sub / 2) + l];
              const int q = sub % 2 == 0 ? byte & 0xF : byte >> 4;
              out[i * k + sb * 256 + sub * 32 + l] = get_half(p) * float(s) * float(q) - get_half(p + 2) * float(mn);
            }
          }
        }
      break;
    }
    case DType::Q5_K: {  // super-blocks of {f16 d, f16 dmin, uint8 scales[12], uint8 qh[32], uint8 qs[128]}
      for (int64_t i = 0; i < m; ++i)
        for (int64_t sb = 0; sb < k / 256; ++sb) {
          uint8_t* p = w.data.data() + (i * (k / 256) + sb) * 176;
          put_half(p, random_half(rng, 0.0001, 0.002));
          put_half(p + 2, random_half(rng, 0.0001, 0.002));
          const uint8_t* sc = p + 4;
          const uint8_t* qh = p + 16;
          const uint8_t* qs = p + 48;
          // ggml's loop: 64 elements per step, the low then the high nibbles of 32 bytes of qs,
          // their fifth bits at bits u1 = 2 step and u2 = 2 step + 1 of qh[l].
          for (int step = 0; step < 4; ++step) {
            for (int half_i = 0; half_i < 2; ++half_i) {
              const int sub = 2 * step + half_i;
              int s, mn;
              k_scale_min(sc, sub, &s, &mn);
              for (int l = 0; l < 32; ++l) {
                const uint8_t byte = qs[32 * step + l];
                const int q = (half_i == 0 ? byte & 0xF : byte >> 4) + ((qh[l] & (1 << sub)) ? 16 : 0);
                out[i * k + sb * 256 + sub * 32 + l] = get_half(p) * float(s) * float(q) - get_half(p + 2) * float(mn);
              }
            }
          }
        }
      break;
    }
    case DType::Q6_K: {  // super-blocks of {uint8 ql[128], uint8 qh[64], int8 scales[16], f16 d}
      for (int64_t i = 0; i < m; ++i)
        for (int64_t sb = 0; sb < k / 256; ++sb) {
          uint8_t* p = w.data.data() + (i * (k / 256) + sb) * 210;
          put_half(p + 208, random_half(rng, 0.0001, 0.002));
          const float d = get_half(p + 208);
          // ggml's loop: two halves of 128, each from ql[64], qh[32] and scales[8].
          for (int h = 0; h < 2; ++h) {
            const uint8_t* ql = p + 64 * h;
            const uint8_t* qh = p + 128 + 32 * h;
            const int8_t* sc = reinterpret_cast<const int8_t*>(p + 192 + 8 * h);
            float* y = out + i * k + sb * 256 + 128 * h;
            for (int l = 0; l < 32; ++l) {
              const int is = l / 16;
              const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
              const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
              const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
              const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
              y[l] = d * float(sc[is]) * float(q1);
              y[l + 32] = d * float(sc[is + 2]) * float(q2);
              y[l + 64] = d * float(sc[is + 4]) * float(q3);
              y[l + 96] = d * float(sc[is + 6]) * float(q4);
            }
          }
        }
      break;
    }
    default: ADD_FAILURE() << "no test layout for " << dtype_name(dtype);
  }
  return w;
}

// x as the kernel quantizes it (per block of 32, to 8 or 16 bits), dequantized.
std::vector<float> quantize_dequantize(const std::vector<float>& x, bool wide) {
  const float q_max = wide ? 127.0f * 254.0f : 127.0f;
  std::vector<float> out(x.size());
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + size_t(i)]));
    const float d = amax / q_max, inv = d > 0 ? 1.0f / d : 0.0f;
    for (int i = 0; i < 32; ++i) out[b * 32 + size_t(i)] = std::nearbyint(x[b * 32 + size_t(i)] * inv) * d;
  }
  return out;
}

// w.dequant against gguf_dequant.h's rows (gguf.quants.dequantize's values): within float
// rounding (the products here may be summed in another order or fused).
void expect_gguf_dequant(const QWeight& w) {
  std::vector<float> row(size_t(w.k));
  const size_t row_bytes = dtype_row_bytes(w.dtype, w.k);
  double worst = 0, scale = 1e-30;
  for (int64_t i = 0; i < w.m; ++i) {
    dequantize_row(w.dtype, w.data.data() + size_t(i) * row_bytes, row.data(), w.k);
    for (int64_t j = 0; j < w.k; ++j) {
      worst = std::max(worst, std::fabs(double(row[size_t(j)]) - double(w.dequant[size_t(i * w.k + j)])));
      scale = std::max(scale, std::fabs(double(row[size_t(j)])));
    }
  }
  EXPECT_LE(worst, 1e-6 * scale) << dtype_name(w.dtype) << ": the test's dequantization differs from gguf_dequant.h";
}

struct Format {
  DType dtype;
  int32_t group;  // W4 only
};
void PrintTo(const Format& f, std::ostream* os) {
  *os << dtype_name(f.dtype);
  if (f.group) *os << " G" << f.group;
}

class QuantMatmulSweep : public ::testing::TestWithParam<Format> {};

TEST_P(QuantMatmulSweep, CpuMatchesRefOverDequantizedWeights) {
  const Format f = GetParam();
  const int64_t unit = dtype_block_elems(f.dtype) == 256 ? 256 : f.dtype == DType::W4 ? std::max<int64_t>(32, f.group) : 32;
  constexpr int64_t kRowsN[] = {1, 2, 3, 4, 5, 7, 9};
  constexpr int64_t kOutM[] = {1, 3, 4, 5, 9, 33};
  const int64_t ks[] = {unit, 2 * unit, 3 * unit, 5 * unit};
  auto ref = make_backend(BackendKind::Ref);
  CpuBackend cpu16, cpu8(BackendOptions{.int8_activations = true});
  double worst_exact = 0, worst_quant[2] = {0, 0};
  for (int64_t n : kRowsN) {
    for (int64_t k : ks) {
      for (int64_t m : kOutM) {
        for (bool with_bias : {false, true}) {
          SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k) + " m=" + std::to_string(m) +
                       (with_bias ? " bias" : ""));
          Rng rng(test::seed_of({n, k, m, int64_t(f.dtype), f.group, with_bias}));
          const std::vector<float> x = test::randn(rng, n * k);
          QWeight w = make_weight(rng, f.dtype, m, k, f.group);
          if (dtype_is_gguf_block(f.dtype)) expect_gguf_dequant(w);
          const std::vector<float> bias = with_bias ? test::randn(rng, m) : std::vector<float>{};
          const TensorView bias_view =
              with_bias ? make_view(const_cast<float*>(bias.data()), DType::F32, {m}) : TensorView{};

          for (const bool wide : {true, false}) {
            SCOPED_TRACE(wide ? "16-bit activations" : "8-bit activations");
            CpuBackend& cpu = wide ? cpu16 : cpu8;
            GuardedOut out(cpu, n, m);
            std::vector<float> x_copy = x;
            ASSERT_TRUE(cpu.matmul_quant_fast(make_view(x_copy.data(), DType::F32, {n, k}), w.view(), bias_view,
                                              out.view()));
            EXPECT_TRUE(out.guard_intact()) << "wrote past its output";
            const std::vector<float> got = out.values();

            const auto ref_matmul = [&](std::vector<float> xs) {
              std::vector<float> wf = w.dequant, y(size_t(n * m));
              ref->matmul(make_view(xs.data(), DType::F32, {n, k}), make_view(wf.data(), DType::F32, {m, k}),
                          bias_view, make_view(y.data(), DType::F32, {n, m}));
              return y;
            };
            // Prefill where the level dequantizes the weights instead: the activations exact.
            const std::vector<float> xq = cpu.prefill_dequantizes(w.view(), n) ? x : quantize_dequantize(x, wide);
            const std::vector<double> scale_q = test::matmul_output_scale(xq, w.dequant, bias, n, k, m);
            EXPECT_TRUE(test::close_scaled_l2(got, ref_matmul(xq), scale_q, kExactTol));
            worst_exact = std::max(worst_exact, test::scaled_l2(got, ref_matmul(xq), scale_q));

            // The same weight uploaded: 4-bit types then run on their repacked copy (AVX2 and up).
            const TensorView up = cpu.upload(w.view(), f.dtype);
            GuardedOut out_up(cpu, n, m);
            ASSERT_TRUE(
                cpu.matmul_quant_fast(make_view(x_copy.data(), DType::F32, {n, k}), up, bias_view, out_up.view()));
            EXPECT_TRUE(out_up.guard_intact()) << "uploaded: wrote past its output";
            const std::vector<float> got_up = out_up.values();
            EXPECT_TRUE(test::close_scaled_l2(got_up, ref_matmul(xq), scale_q, kExactTol)) << "uploaded";
            worst_exact = std::max(worst_exact, test::scaled_l2(got_up, ref_matmul(xq), scale_q));
            cpu.release(up);  // w's memory goes at the end of this iteration
            const std::vector<double> scale = test::matmul_output_scale(x, w.dequant, bias, n, k, m);
            EXPECT_TRUE(test::close_scaled_l2(got, ref_matmul(x), scale, wide ? kQuantTol16 : kQuantTol8));
            worst_quant[wide] = std::max(worst_quant[wide], test::scaled_l2(got, ref_matmul(x), scale));
          }
        }
      }
    }
  }
  std::printf("worst scaled L2 error: %.3g vs quantized activations (tolerance %.0e); vs F32 activations %.3g "
              "with 16-bit (tolerance %.0e), %.3g with 8-bit (tolerance %.0e)\n",
              worst_exact, kExactTol, worst_quant[1], kQuantTol16, worst_quant[0], kQuantTol8);
}

INSTANTIATE_TEST_SUITE_P(Ops, QuantMatmulSweep,
                         ::testing::Values(Format{DType::W8, 0}, Format{DType::W4, 32}, Format{DType::W4, 64},
                                           Format{DType::W4, 128}, Format{DType::Q8_0, 0}, Format{DType::Q4_0, 0},
                                           Format{DType::Q4_1, 0}, Format{DType::Q4_K, 0}, Format{DType::Q5_K, 0},
                                           Format{DType::Q6_K, 0}),
                         [](const auto& info) {
                           std::string s(dtype_name(info.param.dtype));
                           if (info.param.group) s += "_G" + std::to_string(info.param.group);
                           return s;
                         });

// The integer GEMM of prefill (kernels/qgemm_packed.cpp: 4 tokens or more on uploaded
// weights, AVX2 and up; below that level the few-token kernels take them): tokens around
// its token tiles (8 with AVX-512, 4 with AVX2), output rows around its strips (16 rows with
// AVX-512, 8 with AVX2) and their 4-row groups, k of one and of several blocks; both
// activation precisions, against the reference over the activations as quantized. Below
// VNNI, 16-bit activations from a float GEMM tile of tokens (16 with AVX2, 32 with AVX-512)
// take the float GEMM over the dequantized weights instead (exact activations).
TEST_P(QuantMatmulSweep, PrefillGemmMatchesRef) {
  const Format f = GetParam();
  const int64_t unit = dtype_block_elems(f.dtype) == 256 ? 256 : f.dtype == DType::W4 ? std::max<int64_t>(32, f.group) : 32;
  constexpr int64_t kTokensN[] = {7, 12, 16, 21, 40};
  constexpr int64_t kOutM[] = {1, 7, 16, 17, 40};
  auto ref = make_backend(BackendKind::Ref);
  CpuBackend cpu16, cpu8(BackendOptions{.int8_activations = true});
  double worst = 0;
  for (int64_t n : kTokensN) {
    for (int64_t k : {unit, 3 * unit}) {
      for (int64_t m : kOutM) {
        const bool with_bias = m % 2 == 1;
        SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k) + " m=" + std::to_string(m));
        Rng rng(test::seed_of({n, k, m, int64_t(f.dtype), f.group, 17}));
        const std::vector<float> x = test::randn(rng, n * k);
        QWeight w = make_weight(rng, f.dtype, m, k, f.group);
        const std::vector<float> bias = with_bias ? test::randn(rng, m) : std::vector<float>{};
        const TensorView bias_view = with_bias ? make_view(const_cast<float*>(bias.data()), DType::F32, {m}) : TensorView{};
        for (const bool wide : {true, false}) {
          SCOPED_TRACE(wide ? "16-bit activations" : "8-bit activations");
          CpuBackend& cpu = wide ? cpu16 : cpu8;
          const TensorView up = cpu.upload(w.view(), f.dtype);
          GuardedOut out(cpu, n, m);
          std::vector<float> x_copy = x;
          ASSERT_TRUE(cpu.matmul_quant_fast(make_view(x_copy.data(), DType::F32, {n, k}), up, bias_view, out.view()));
          EXPECT_TRUE(out.guard_intact()) << "wrote past its output";
          std::vector<float> xq = cpu.prefill_dequantizes(up, n) ? x : quantize_dequantize(x, wide), wf = w.dequant,
                             want(size_t(n * m));
          ref->matmul(make_view(xq.data(), DType::F32, {n, k}), make_view(wf.data(), DType::F32, {m, k}), bias_view,
                      make_view(want.data(), DType::F32, {n, m}));
          const std::vector<double> scale = test::matmul_output_scale(xq, w.dequant, bias, n, k, m);
          EXPECT_TRUE(test::close_scaled_l2(out.values(), want, scale, kExactTol));
          worst = std::max(worst, test::scaled_l2(out.values(), want, scale));
          cpu.release(up);
        }
      }
    }
  }
  std::printf("worst scaled L2 error: %.3g (tolerance %.0e)\n", worst, kExactTol);
}

// The float GEMM over quantized weights dequantized chunk by chunk (KernelTable::gemm_blocks
// with MatmulArgs::wq; kernels/dequant.h), called directly so that every level runs it,
// whether or not its prefill takes it: every format with integer kernels (W4 with groups of
// 32, 64 and 128), tokens around the token tile, output rows around the block (a tail block),
// k of one block (super-block), several, and past the 512-element chunk (a partial last
// chunk); with and without bias. Against the reference over the exact activations and the
// test's dequantized weights: the same products summed in another order (Q4_1's and the K
// types' multiply-add may round once, not twice).
TEST(OpsMatmulQuantFast, DequantGemmKernelMatchesRef) {
  const cpu::KernelTable& kt = cpu::kernels();
  const int64_t tile = kt.gemm_tile_tokens, rows = kt.gemm_block_rows;
  auto ref = make_backend(BackendKind::Ref);
  double worst = 0;
  for (const Format f : {Format{DType::W8, 0}, Format{DType::W4, 32}, Format{DType::W4, 64}, Format{DType::W4, 128},
                         Format{DType::Q8_0, 0}, Format{DType::Q4_0, 0}, Format{DType::Q4_1, 0}, Format{DType::Q4_K, 0},
                         Format{DType::Q5_K, 0}, Format{DType::Q6_K, 0}}) {
    const bool k_type = dtype_block_elems(f.dtype) == 256;  // rows of whole super-blocks
    for (const int64_t n : {tile, tile + 5, 2 * tile + 3}) {
      for (const int64_t k : k_type ? std::vector<int64_t>{256, 768, 1280} : std::vector<int64_t>{128, 384, 640, 1152}) {
        for (const int64_t m : {int64_t(1), rows - 1, rows, 2 * rows + 1}) {
          if (m < 1) continue;
          const bool with_bias = (n + m) % 2 == 1;
          SCOPED_TRACE(std::string(dtype_name(f.dtype)) + " G" + std::to_string(f.group) + " n=" + std::to_string(n) +
                       " k=" + std::to_string(k) + " m=" + std::to_string(m));
          Rng rng(test::seed_of({n, k, m, int64_t(f.dtype), f.group, 29}));
          const std::vector<float> x = test::randn(rng, n * k);
          QWeight w = make_weight(rng, f.dtype, m, k, f.group);
          const std::vector<float> bias = with_bias ? test::randn(rng, m) : std::vector<float>{};
          const TensorView wv = w.view();
          const int64_t n_tiles = (n + tile - 1) / tile, n_blocks = (m + rows - 1) / rows;
          std::vector<float> xt(size_t(n_tiles * k * tile)), scratch(size_t(kt.gemm_scratch_floats(n)));
          kt.gemm_pack_x(x.data(), n, k, 0, n_tiles, xt.data());
          std::vector<float> got(size_t(n * m + 16), 7.0f);
          const cpu::MatmulArgs a{.x = x.data(), .w = wv.data, .w_dtype = f.dtype, .wq = &wv,
                                  .bias = with_bias ? bias.data() : nullptr, .out = got.data(), .n = n, .k = k, .m = m};
          kt.gemm_blocks(a, xt.data(), 0, n_blocks, scratch.data());
          for (size_t i = size_t(n * m); i < got.size(); ++i) EXPECT_EQ(got[i], 7.0f) << "wrote past its output";
          got.resize(size_t(n * m));
          std::vector<float> xs = x, wf = w.dequant, want(size_t(n * m)), bs = bias;
          ref->matmul(make_view(xs.data(), DType::F32, {n, k}), make_view(wf.data(), DType::F32, {m, k}),
                      with_bias ? make_view(bs.data(), DType::F32, {m}) : TensorView{},
                      make_view(want.data(), DType::F32, {n, m}));
          const std::vector<double> scale = test::matmul_output_scale(x, w.dequant, bias, n, k, m);
          EXPECT_TRUE(test::close_scaled_l2(got, want, scale, kExactTol));
          worst = std::max(worst, test::scaled_l2(got, want, scale));
        }
      }
    }
  }
  std::printf("%s: worst scaled L2 error %.3g (tolerance %.0e)\n", std::string(cpu::isa_name(kt.isa)).c_str(), worst,
              kExactTol);
}

// The largest integer sums the kernels form: every weight code at its maximum (bytes 0xFF:
// nibbles 15, Q5_K's 31, Q6_K's 63; 0x80: Q8_0's -128; W8 keeps make_weight's random codes
// in -127..127) against blocks of equal activations, whose 16-bit values Q = 32258 split
// into the planes q = 127, q2 = 0 (odd rows: all negative). A lane's dot product of the
// first plane then reaches its bound
// (8 x 15 x 127 in the packed 4-bit kernel, 4 x 128 x 127 in the packed 8-bit one, 4 x 63 x
// 127 or 4 x 128 x 127 in the canonical one; 32 x 15 x 127 a block in the prefill GEMM), which
// the join 254 hi + lo must take exactly (qmatmul.cpp, qmatmul_packed.cpp, qgemm_packed.cpp).
TEST_P(QuantMatmulSweep, ExtremeCodesAndActivationsJoinExactly) {
  const Format f = GetParam();
  const int64_t unit = dtype_block_elems(f.dtype) == 256 ? 256 : f.dtype == DType::W4 ? std::max<int64_t>(32, f.group) : 32;
  const int64_t m = 5, k = 2 * unit;
  auto ref = make_backend(BackendKind::Ref);
  CpuBackend cpu;
  // n = 3: the few-token kernels also once uploaded; n = 12 and 19: the prefill GEMM once
  // uploaded (19: the float GEMM over dequantized weights with AVX2, exact activations).
  for (const int64_t n : {int64_t(3), int64_t(12), int64_t(19)}) {
    for (const int fill : {0xFF, 0x80}) {
      SCOPED_TRACE("n " + std::to_string(n) + " fill " + std::to_string(fill));
      Rng rng(test::seed_of({int64_t(f.dtype), f.group, fill}));
      QWeight w = make_weight(rng, f.dtype, m, k, f.group, fill);
      std::vector<float> x(size_t(n * k));
      for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < k; ++j) x[size_t(t * k + j)] = (t % 2 ? -1.0f : 1.0f) * float(1 + t);
      const bool dequant = cpu.prefill_dequantizes(w.view(), n);
      const std::vector<float> xq = dequant ? x : quantize_dequantize(x, true);
      std::vector<float> wf = w.dequant, want(size_t(n * m));
      std::vector<float> xr = xq;
      ref->matmul(make_view(xr.data(), DType::F32, {n, k}), make_view(wf.data(), DType::F32, {m, k}), {},
                  make_view(want.data(), DType::F32, {n, m}));
      std::vector<double> scale = test::matmul_output_scale(xq, w.dequant, {}, n, k, m);
      if (dequant) {
        // F32 sums of k terms of one sign (no integer join here): their rounding grows with
        // the sum of the terms' magnitudes, not with their root-sum-square.
        for (int64_t t = 0; t < n; ++t)
          for (int64_t j = 0; j < m; ++j) {
            double sum = 0;
            for (int64_t i = 0; i < k; ++i) sum += std::fabs(double(x[size_t(t * k + i)]) * w.dequant[size_t(j * k + i)]);
            scale[size_t(t * m + j)] = sum;
          }
      }
      for (const bool uploaded : {false, true}) {
        SCOPED_TRACE(uploaded ? "uploaded" : "as given");
        const TensorView wv = uploaded ? cpu.upload(w.view(), f.dtype) : w.view();
        GuardedOut out(cpu, n, m);
        std::vector<float> x_copy = x;
        ASSERT_TRUE(cpu.matmul_quant_fast(make_view(x_copy.data(), DType::F32, {n, k}), wv, {}, out.view()));
        EXPECT_TRUE(out.guard_intact());
        EXPECT_TRUE(test::close_scaled_l2(out.values(), want, scale, kExactTol));
        if (uploaded) cpu.release(wv);
      }
    }
  }
}

// The activations' quantization (KernelTable::quantize_row; vectorized from AVX2) against
// kernels.h's definition written out here in scalar code, bit for bit: both planes or the
// 8-bit one, the lanes' d and sums, the blocks' d and d sum(Q), in element and in W4 order;
// over normal rows, a zero block, a block of equal values (every Q at its bound), multiples of
// a step (ties after scaling), and values of several magnitudes.
TEST(OpsMatmulQuantFast, QuantizeRowIsTheDefinitionBitForBit) {
  constexpr int64_t k = 32 * 12;
  Rng rng(test::seed_of({k, 7}));
  std::vector<float> x = test::randn(rng, k);
  for (int i = 32; i < 64; ++i) x[size_t(i)] = 0.0f;
  for (int i = 64; i < 96; ++i) x[size_t(i)] = -2.5f;
  for (int i = 96; i < 128; ++i) x[size_t(i)] = float(i - 112) * 0.25f;
  for (int i = 128; i < 160; ++i) x[size_t(i)] *= i % 3 == 0 ? 1e4f : 1e-3f;
  struct Out {
    std::vector<int8_t> q, q2;
    std::vector<float> dl, xs, db, sb;
    explicit Out(int64_t k) : q(size_t(k)), q2(size_t(k)), dl(size_t(k / 4)), xs(size_t(k / 4)), db(size_t(k / 32)), sb(size_t(k / 32)) {}
  };
  for (const bool wide : {true, false}) {
    for (const bool w4_order : {false, true}) {
      SCOPED_TRACE(std::string(wide ? "16-bit" : "8-bit") + (w4_order ? ", W4 order" : ""));
      Out got(k), want(k);
      cpu::kernels().quantize_row(x.data(), k, w4_order,
                                  {.q = got.q.data(), .q2 = wide ? got.q2.data() : nullptr, .dl = got.dl.data(),
                                   .xs = got.xs.data(), .db = got.db.data(), .sb = got.sb.data()});
      const int32_t bound = wide ? 127 * 254 : 127;
      for (int64_t b = 0; b < k / 32; ++b) {
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[size_t(b * 32 + i)]));
        const float d = amax / float(bound), inv = d > 0 ? 1.0f / d : 0.0f;
        int32_t Q[32];
        for (int i = 0; i < 32; ++i) {
          const int src = w4_order ? (i < 16 ? 2 * i : 2 * (i - 16) + 1) : i;  // evens first, then odds
          Q[i] = std::clamp(int32_t(std::nearbyint(x[size_t(b * 32 + src)] * inv)), -bound, bound);
        }
        int32_t sum = 0;
        for (int i = 0; i < 32; ++i) {
          if (wide) {
            const int32_t hi = (std::abs(Q[i]) + 126) / 254, q1 = Q[i] < 0 ? -hi : hi;
            want.q[size_t(b * 32 + i)] = int8_t(q1);
            want.q2[size_t(b * 32 + i)] = int8_t(Q[i] - 254 * q1);
          } else {
            want.q[size_t(b * 32 + i)] = int8_t(Q[i]);
          }
          sum += Q[i];
        }
        for (int l = 0; l < 8; ++l) {
          want.dl[size_t(b * 8 + l)] = d;
          want.xs[size_t(b * 8 + l)] = float(Q[4 * l] + Q[4 * l + 1] + Q[4 * l + 2] + Q[4 * l + 3]);
        }
        want.db[size_t(b)] = d;
        want.sb[size_t(b)] = d * float(sum);
      }
      EXPECT_EQ(got.q, want.q);
      if (wide) {
        EXPECT_EQ(got.q2, want.q2);
      }
      EXPECT_EQ(got.dl, want.dl);
      EXPECT_EQ(got.xs, want.xs);
      EXPECT_EQ(got.db, want.db);
      EXPECT_EQ(got.sb, want.sb);
    }
  }
}

TEST(OpsMatmulQuantFast, DeclinesWhatItDoesNotCover) {
  CpuBackend cpu;
  std::vector<float> x(2 * 64), y(2 * 4);
  std::vector<uint8_t> q(4 * 64 * 2);
  const TensorView xv = make_view(x.data(), DType::F32, {2, 64}), yv = make_view(y.data(), DType::F32, {2, 4});
  for (DType t : {DType::FP8, DType::BF16})
    EXPECT_FALSE(cpu.matmul_quant_fast(xv, make_view(q.data(), t, {4, 64}), {}, yv)) << dtype_name(t);
  EXPECT_FALSE(cpu.matmul_quant_fast(xv, make_view(q.data(), DType::W8, {4, 64}), {}, yv)) << "W8 without scales";
  TensorView w4 = make_view(q.data(), DType::W4, {4, 64});
  w4.scales = q.data();
  w4.zeros = q.data();
  w4.group_size = 48;  // not a multiple of 32
  EXPECT_FALSE(cpu.matmul_quant_fast(xv, w4, {}, yv));
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K})
    EXPECT_FALSE(cpu.matmul_quant_fast(xv, make_view(q.data(), t, {4, 64}), {}, yv)) << dtype_name(t) << ": k % 256 != 0";
}

// U8x4 (quant_pack.h) byte by byte from its definition: groups of 4 rows (the last padded with
// zero rows); Q8_0 in segments of one block, {F16 d[4], int8 codes[4][32]}; W8 one segment a
// group, {F32 scale[4], then per block int8 codes[4][32]}.
TEST(OpsMatmulQuantFast, U8x4HoldsTheCanonicalCodesAndScales) {
  for (const DType dtype : {DType::Q8_0, DType::W8}) {
    for (const int64_t m : {1, 4, 5, 9}) {
      for (const int64_t k : {32, 96}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " m=" + std::to_string(m) + " k=" + std::to_string(k));
        Rng rng(test::seed_of({int64_t(dtype), m, k}));
        QWeight w = make_weight(rng, dtype, m, k, 0);
        const int64_t groups = (m + 3) / 4, nb = k / 32;
        const int64_t group_bytes = dtype == DType::Q8_0 ? nb * (8 + 128) : 16 + nb * 128;
        ASSERT_EQ(cpu::u8x4_bytes(w.view()), groups * group_bytes);
        std::vector<uint8_t> packed(size_t(groups * group_bytes), 0xAB);
        cpu::pack_u8x4(w.view(), packed.data());
        int64_t mismatches = 0;
        for (int64_t g = 0; g < groups; ++g)
          for (int64_t r = 0; r < 4; ++r) {
            const int64_t row = 4 * g + r;
            const uint8_t* grp = packed.data() + g * group_bytes;
            for (int64_t b = 0; b < nb; ++b) {
              const uint8_t* seg = dtype == DType::Q8_0 ? grp + b * 136 : grp;
              const uint8_t* codes = dtype == DType::Q8_0 ? seg + 8 + 32 * r : grp + 16 + b * 128 + 32 * r;
              const uint8_t* want_codes = row >= m                ? nullptr
                                          : dtype == DType::Q8_0 ? w.data.data() + (row * nb + b) * 34 + 2
                                                                 : w.data.data() + row * k + b * 32;
              for (int j = 0; j < 32; ++j) mismatches += codes[j] != (want_codes ? want_codes[j] : 0);
              const int scale_bytes = dtype == DType::Q8_0 ? 2 : 4;
              const uint8_t* scale = seg + scale_bytes * r;
              const uint8_t* want_scale = row >= m                ? nullptr
                                          : dtype == DType::Q8_0 ? w.data.data() + (row * nb + b) * 34
                                                                 : w.scales.data() + 4 * row;
              for (int j = 0; j < scale_bytes; ++j) mismatches += scale[j] != (want_scale ? want_scale[j] : 0);
            }
          }
        EXPECT_EQ(mismatches, 0);
      }
    }
  }
}

// Packs random m x k weights of a K type (m 1, 4, 6; k 256, 512) into U8x4 and counts, over
// every segment (one super-block of 4 rows) and row r of it, mismatches(w, seg, r, row, s):
// row is -1 for a padding row.
template <typename Mismatches>
void expect_u8x4_segments(DType dtype, int64_t header_bytes, Mismatches&& mismatches_of) {
  for (const int64_t m : {1, 4, 6}) {
    for (const int64_t k : {256, 512}) {
      SCOPED_TRACE("m=" + std::to_string(m) + " k=" + std::to_string(k));
      Rng rng(test::seed_of({int64_t(dtype), m, k}));
      QWeight w = make_weight(rng, dtype, m, k, 0);
      const int64_t groups = (m + 3) / 4, n_seg = k / 256, seg_bytes = header_bytes + 8 * 128;
      ASSERT_EQ(cpu::u8x4_bytes(w.view()), groups * n_seg * seg_bytes);
      std::vector<uint8_t> packed(size_t(groups * n_seg * seg_bytes), 0xAB);
      cpu::pack_u8x4(w.view(), packed.data());
      int64_t mismatches = 0;
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t s = 0; s < n_seg; ++s)
          for (int64_t r = 0; r < 4; ++r)
            mismatches += mismatches_of(w, packed.data() + (g * n_seg + s) * seg_bytes, r,
                                        4 * g + r < m ? 4 * g + r : -1, s);
      EXPECT_EQ(mismatches, 0);
    }
  }
}

// U8x4's Q6_K segments (quant_pack.h) decoded from their definition: per group of 4 rows and
// super-block, {F16 d[4], int8 sc[8 blocks][4 rows][2 halves], then per block int8 codes[4][32]};
// d * sc of the code's 16 times the code is the weight the test's own ggml-order decoding of
// the canonical bytes gives, bit for bit (the same float products); padding rows are zero.
TEST(OpsMatmulQuantFast, U8x4HoldsQ6KCodesMinus32AndTheirScales) {
  expect_u8x4_segments(DType::Q6_K, 72, [](const QWeight& w, const uint8_t* seg, int64_t r, int64_t row, int64_t s) {
    const int64_t k = w.k;
    int64_t bad = 0;
    const float d = get_half(seg + 2 * r);
    for (int64_t i = 0; i < 8; ++i)
      for (int64_t j = 0; j < 32; ++j) {
        const int8_t sc = int8_t(seg[8 + 8 * i + 2 * r + j / 16]);
        const int8_t code = int8_t(seg[72 + i * 128 + 32 * r + j]);
        if (row < 0) bad += d != 0.0f || sc != 0 || code != 0;
        else bad += d * float(sc) * float(code) != w.dequant[size_t(row * k + s * 256 + 32 * i + j)];
      }
    return bad;
  });
}

// Q5_K in U8x4: per segment d and dmin, the unpacked 6-bit scales and mins per block and row,
// and codes q5 - 16, such that c * code + o with c = d * sc and o = 16 c - dmin * mn is each
// weight as dequantized here from the canonical block (up to float rounding: 16 c is added
// apart); padding rows all zero.
TEST(OpsMatmulQuantFast, U8x4HoldsQ5KCodesMinus16AndTheirScalesAndMins) {
  expect_u8x4_segments(DType::Q5_K, 80, [](const QWeight& w, const uint8_t* seg, int64_t r, int64_t row, int64_t s) {
    const int64_t k = w.k;
    int64_t bad = 0;
    const float d = get_half(seg + 2 * r), dmin = get_half(seg + 8 + 2 * r);
    for (int64_t i = 0; i < 8; ++i) {
      const int sc = seg[16 + 4 * i + r], mn = seg[48 + 4 * i + r];
      const float c = d * float(sc), o = 16.0f * c - dmin * float(mn);
      for (int64_t j = 0; j < 32; ++j) {
        const int8_t code = int8_t(seg[80 + i * 128 + 32 * r + j]);
        if (row < 0) {
          bad += d != 0.0f || dmin != 0.0f || sc != 0 || mn != 0 || code != 0;
          continue;
        }
        const float want = w.dequant[size_t(row * k + s * 256 + 32 * i + j)];
        bad += code < -16 || code > 15 || sc > 63 || mn > 63 ||
               std::fabs(c * float(code) + o - want) > 1e-6f * (std::fabs(c) * 32 + std::fabs(dmin) * 64);
      }
    }
    return bad;
  });
}

// At the levels with the packed kernels (AVX2 and up), an uploaded weight runs on its packed
// copy (U8x4 for Q8_0, W8, Q6_K and Q5_K, U4x4 for Q4_0 and W4), through the few-token kernels (3
// tokens) and the prefill GEMM (12; Q6_K and Q5_K have none: their prefill dequantizes the canonical
// bytes): with the uploaded canonical bytes (and the scales and zeros kept beside them)
// zeroed afterwards, the output is still the matmul of the weights as uploaded. Below AVX2
// the kernels read the canonical bytes: zeroed, every output is 0.
TEST(OpsMatmulQuantFast, UploadedWeightsRunOnTheirPackedCopy) {
  const bool packed_kernels = cpu::kernels().qmatmul_u8x4 != nullptr;
  const int64_t m = 7;
  auto ref = make_backend(BackendKind::Ref);
  for (const DType dtype : {DType::Q8_0, DType::W8, DType::Q4_0, DType::W4, DType::Q6_K, DType::Q5_K}) {
    const bool k_type = dtype == DType::Q6_K || dtype == DType::Q5_K;
    const int64_t k = k_type ? 512 : 96;
    for (const int64_t n : {int64_t(3), int64_t(12)}) {
      if (k_type && n > 3) continue;
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " n=" + std::to_string(n));
      CpuBackend cpu;
      Rng rng(test::seed_of({int64_t(dtype), n, m, k}));
      const std::vector<float> x = test::randn(rng, n * k);
      QWeight w = make_weight(rng, dtype, m, k, dtype == DType::W4 ? 32 : 0);
      const TensorView up = cpu.upload(w.view(), dtype);
      std::memset(up.data, 0, dtype_row_bytes(dtype, k) * size_t(m));
      if (up.scales) std::memset(up.scales, 0, w.scales.size());
      if (up.zeros) std::memset(up.zeros, 0, w.zeros.size());
      GuardedOut out(cpu, n, m);
      std::vector<float> x_copy = x;
      ASSERT_TRUE(cpu.matmul_quant_fast(make_view(x_copy.data(), DType::F32, {n, k}), up, {}, out.view()));
      std::vector<float> xq = quantize_dequantize(x, true), wf = w.dequant, want(size_t(n * m));
      ref->matmul(make_view(xq.data(), DType::F32, {n, k}), make_view(wf.data(), DType::F32, {m, k}), {},
                  make_view(want.data(), DType::F32, {n, m}));
      if (packed_kernels) {
        EXPECT_TRUE(test::close_scaled_l2(out.values(), want, test::matmul_output_scale(xq, w.dequant, {}, n, k, m),
                                          kExactTol));
      } else {
        EXPECT_EQ(out.values(), std::vector<float>(size_t(n * m), 0.0f));
      }
      cpu.release(up);
    }
  }
}

// CpuBackend::upload copies a weight it would keep in place (here BF16) onto huge pages when
// it is at least one huge page large and BackendOptions::huge_pages is on: the copy holds the
// same bytes, starts on a huge page, and the matmul over it gives the in-place weight's outputs
// bit for bit. A smaller weight, and any weight with the option off, stays in place.
TEST(OpsMatmulQuantFast, LargeInPlaceWeightsAreCopiedOntoHugePages) {
  const int64_t m = 1024, k = 1024, n = 3;  // 2 MiB of BF16: the smallest weight copied
  Rng rng(test::seed_of({m, k, n, 2}));
  std::vector<uint16_t> wb(size_t(m * k)), small(size_t(64 * k));
  for (uint16_t& v : wb) v = f32_to_bf16(float(rng.normal()));
  for (uint16_t& v : small) v = f32_to_bf16(float(rng.normal()));
  std::vector<float> x = test::randn(rng, n * k);
  const TensorView host = make_view(wb.data(), DType::BF16, {m, k});
  const TensorView host_small = make_view(small.data(), DType::BF16, {64, k});
  const TensorView xv = make_view(x.data(), DType::F32, {n, k});
  std::vector<float> in_place;
  for (const bool huge : {false, true}) {
    SCOPED_TRACE(huge ? "huge_pages on" : "huge_pages off");
    BackendOptions opt;
    opt.huge_pages = huge;
    CpuBackend cpu(opt);
    const TensorView up = cpu.upload(host, DType::BF16), up_small = cpu.upload(host_small, DType::BF16);
    EXPECT_EQ(up_small.data, host_small.data);
    if (huge) {
      ASSERT_NE(up.data, host.data) << "not copied (less than 1 GiB + 2 MiB of memory available?)";
      EXPECT_EQ(std::memcmp(up.data, host.data, host.nbytes()), 0);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(up.data) % HugePageBuffer::kHugePage, 0u);
    } else {
      EXPECT_EQ(up.data, host.data);
    }
    GuardedOut out(cpu, n, m);
    cpu.matmul(xv, up, {}, out.view());
    EXPECT_TRUE(out.guard_intact());
    if (huge) EXPECT_EQ(out.values(), in_place);
    else in_place = out.values();
    cpu.release(up);
    cpu.release(up_small);
  }
}

}  // namespace
}  // namespace tf

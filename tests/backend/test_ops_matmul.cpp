// matmul of the CPU backend against the reference, over a sweep of shapes that covers the
// GEMM's tails: n (tokens) around the 3- or 4-token tile, k around the vector width and the
// k chunks, m (output features) around the 4- or 6-row weight block; weights F32/BF16/F16,
// bias absent/F32/BF16; at every ISA level (isa_test_main.cpp). BF16 weights also with
// bf16_activations, where the CPU has AMX (the GEMM on tiles: token tiles of 16, blocks of 32
// weight rows; n 16 / 33 / 48, m 64 / 96).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>

#include "attention_history.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/kernels/kernels.h"
#include "core/batch.h"
#include "op_test_util.h"

namespace tf {
namespace {

using test::BackendPair;
using test::GuardedOut;
using test::HostTensor;
using test::Rng;

enum class BiasKind { None, F32, BF16 };
void PrintTo(BiasKind b, std::ostream* os) {
  *os << (b == BiasKind::None ? "no bias" : b == BiasKind::F32 ? "F32 bias" : "BF16 bias");
}

// n from 1 past the CPU backend's token tiles (3 or 4 tokens; more than one tile switches it
// from reading the weights as stored to widening them once per chunk); k below one vector
// (1, 3), around the vector width (8 or 16 lanes), and past one (576) and two (1100: two
// chunks, a partial third, a scalar tail) of the 512-element chunks the tiles walk k in.
constexpr int64_t kRowsN[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 33, 48};
constexpr int64_t kInK[] = {1, 3, 16, 17, 64, 100, 256, 576, 1100};
constexpr int64_t kOutM[] = {1, 3, 4, 5, 64, 96, 130};

// Whether a CPU backend with bf16_activations takes the GEMM on AMX tiles for this call
// (CpuBackend::gemm_amx), which rounds the activations to BF16 first: the reference then gets
// them rounded the same way, so the products are again identical and only the order of the
// sums differs.
bool amx_gemm(DType w_dtype, int64_t n, int64_t k, int64_t m) {
  return cpu::kernels().gemm_amx_blocks && cpu::amx_tiles_permitted() && w_dtype == DType::BF16 &&
         cpu::amx_gemm_shape(n, k, m);
}

// Metric and tolerance: both backends multiply the same F32 activations by the same weights
// (BF16/F16 widen to F32 exactly), so each product x_i * w_i is identical; they differ only
// in how the k products (and the bias) are summed: the reference in double with one final
// rounding, the CPU backend in F32 across vector lanes, then a horizontal sum, the scalar
// tail and the bias. That rounding error scales with the size of the terms, not with the
// result: when the terms of one output cancel (with n = m = 1 there is a single output, and
// at k = 576 it can be 0.07 where the terms are ~1), ||got - want|| / ||want|| reads 1e-4
// for a correct sum. So the error is taken relative to each output's natural scale,
// sqrt(sum_i (x_i w_i)^2 + bias^2), the size of a sum of random-sign terms (test::scaled_l2;
// it equals ||want|| in expectation). The F32 sum's error is about 2^-24 * sqrt(k) of that
// scale (~1.4e-6 at k = 576; measured worst 4.6e-7); 1e-5 leaves margin, and a real indexing,
// tail or conversion mistake gives errors of order 1.
constexpr double kTol = 1e-5;

class MatmulSweep : public ::testing::TestWithParam<std::tuple<DType, BiasKind>> {};

TEST_P(MatmulSweep, CpuMatchesRef) {
  const auto [w_dtype, bias_kind] = GetParam();
  double worst = 0;
  int amx_shapes = 0;
  for (const bool bf16_acts : {false, true}) {
  if (bf16_acts && w_dtype != DType::BF16) continue;
  for (int64_t n : kRowsN) {
    for (int64_t k : kInK) {
      for (int64_t m : kOutM) {
        SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k) + " m=" + std::to_string(m));
        Rng rng(test::seed_of({n, k, m, int64_t(w_dtype), int64_t(bias_kind)}));
        std::vector<float> x = test::randn(rng, n * k);
        const bool amx = bf16_acts && amx_gemm(w_dtype, n, k, m);
        amx_shapes += amx;
        if (amx)
          for (float& v : x) v = bf16_to_f32(f32_to_bf16(v));
        const HostTensor w = test::make_host(test::randn(rng, m * k), w_dtype, {m, k});
        HostTensor bias;
        if (bias_kind != BiasKind::None)
          bias = test::make_host(test::randn(rng, m), bias_kind == BiasKind::F32 ? DType::F32 : DType::BF16,
                                 {m});

        BackendPair be;
        be.cpu = make_backend(BackendKind::Cpu, BackendOptions{.bf16_activations = bf16_acts});
        std::vector<float> outs[2];
        int i = 0;
        for (Backend* b : {be.ref.get(), be.cpu.get()}) {
          const TensorView xd = test::to_device(*b, x, n, k);
          const TensorView wd = b->upload(w.view(), w_dtype);
          const TensorView bd =
              bias_kind == BiasKind::None ? TensorView{} : b->upload(bias.view(), bias.dtype);
          GuardedOut out(*b, n, m);
          b->matmul(xd, wd, bd, out.view());
          EXPECT_TRUE(out.guard_intact()) << b->name() << " wrote past its output";
          outs[i++] = out.values();
        }
        const std::vector<double> scale = test::matmul_output_scale(
            x, w.to_f32(), bias_kind == BiasKind::None ? std::vector<float>{} : bias.to_f32(), n, k, m);
        EXPECT_TRUE(test::close_scaled_l2(outs[1], outs[0], scale, kTol));
        worst = std::max(worst, test::scaled_l2(outs[1], outs[0], scale));
      }
    }
  }
  }
  std::printf("worst scaled L2 error over the sweep: %.3g (tolerance %.0e); shapes on AMX tiles: %d\n", worst, kTol,
              amx_shapes);
  if (w_dtype == DType::BF16 && cpu::kernels().gemm_amx_blocks && cpu::amx_tiles_permitted()) {
    EXPECT_GT(amx_shapes, 0);
  }
}

// The prefill GEMM takes token tiles in groups whose transposed activations fit L2 (kernels/
// gemm.cpp: 1 MiB, one tile at k = 8192); the sweep's k stays within one group, so a long k and
// enough tokens for several groups and a partial last tile are checked here.
TEST(OpsMatmul, CpuGemmOverSeveralTokenGroupsMatchesRef) {
  const int64_t n = 100, k = 8192, m = 37;
  Rng rng(test::seed_of({n, k, m}));
  const std::vector<float> x = test::randn(rng, n * k);
  const HostTensor w = test::make_host(test::randn(rng, m * k), DType::BF16, {m, k});
  BackendPair be;
  std::vector<float> outs[2];
  int i = 0;
  for (Backend* b : {be.ref.get(), be.cpu.get()}) {
    const TensorView xd = test::to_device(*b, x, n, k);
    const TensorView wd = b->upload(w.view(), DType::BF16);
    GuardedOut out(*b, n, m);
    b->matmul(xd, wd, {}, out.view());
    EXPECT_TRUE(out.guard_intact()) << b->name() << " wrote past its output";
    outs[i++] = out.values();
  }
  const std::vector<double> scale = test::matmul_output_scale(x, w.to_f32(), {}, n, k, m);
  EXPECT_TRUE(test::close_scaled_l2(outs[1], outs[0], scale, kTol));
}

// An independent check of the reference's matmul semantics (out = x @ w^T + bias, w stored
// [out_features, in_features]) on a hand-sized case, in double precision.
TEST(OpsMatmul, RefMatchesDirectFormula) {
  Rng rng(7);
  const int64_t n = 3, k = 5, m = 2;
  const std::vector<float> x = test::randn(rng, n * k), w = test::randn(rng, m * k),
                           bias = test::randn(rng, m);
  auto ref = make_backend(BackendKind::Ref);
  const TensorView xd = test::to_device(*ref, x, n, k), wd = test::to_device(*ref, w, m, k);
  TensorView bd = ref->alloc(DType::F32, {m});
  ref->copy_from_host(bias.data(), bd);
  TensorView out = ref->alloc(DType::F32, {n, m});
  ref->matmul(xd, wd, bd, out);
  std::vector<float> want(size_t(n * m));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < m; ++j) {
      double acc = bias[size_t(j)];
      for (int64_t i = 0; i < k; ++i) acc += double(x[size_t(r * k + i)]) * w[size_t(j * k + i)];
      want[size_t(r * m + j)] = float(acc);
    }
  }
  EXPECT_TRUE(test::close_rel_l2(test::to_host_f32(*ref, out), want, 1e-7));
}

// matmul_fused on the host backends (the default: the plain ops in turn, with add() for the
// residual) against its definition computed directly in double: in = rms_norm(x) * g or x,
// y = in @ w^T + bias, then out = y, out += y, or out = silu(y_gate) * y_up. F32 throughout,
// so the only differences are summation order: rel L2 1e-5.
TEST(OpsMatmulFused, EveryPrologueAndEpilogueMatchesItsDefinition) {
  using Epi = MatmulFusion::Epilogue;
  const int64_t n = 3, k = 64, m = 6;
  for (BackendKind kind : {BackendKind::Ref, BackendKind::Cpu}) {
    for (bool norm : {false, true}) {
      for (Epi epi : {Epi::Store, Epi::AddTo, Epi::Swiglu}) {
        SCOPED_TRACE(std::string(kind == BackendKind::Ref ? "ref" : "cpu") + (norm ? " norm" : "") + " epilogue " +
                     std::to_string(int(epi)));
        Rng rng(test::seed_of({21, norm, int64_t(epi)}));
        const std::vector<float> x = test::randn(rng, n * k, 2.0), g = test::randn(rng, k, 0.1),
                                 w = test::randn(rng, m * k, 0.125), bias = test::randn(rng, m);
        const int64_t m_out = epi == Epi::Swiglu ? m / 2 : m;
        const std::vector<float> resid = test::randn(rng, n * m_out);
        std::vector<float> gain(g);
        for (float& v : gain) v += 1.0f;
        // the definition
        std::vector<float> want(size_t(n * m_out));
        for (int64_t r = 0; r < n; ++r) {
          std::vector<double> in(static_cast<size_t>(k)), y(static_cast<size_t>(m));
          double ss = 0;
          for (int64_t i = 0; i < k; ++i) ss += double(x[size_t(r * k + i)]) * x[size_t(r * k + i)];
          const double inv = norm ? 1.0 / std::sqrt(ss / double(k) + 1e-5) : 1.0;
          for (int64_t i = 0; i < k; ++i) in[size_t(i)] = x[size_t(r * k + i)] * inv * (norm ? gain[size_t(i)] : 1.0);
          for (int64_t j = 0; j < m; ++j) {
            double acc = bias[size_t(j)];
            for (int64_t i = 0; i < k; ++i) acc += in[size_t(i)] * w[size_t(j * k + i)];
            y[size_t(j)] = acc;
          }
          for (int64_t j = 0; j < m_out; ++j) {
            const double v = epi == Epi::Swiglu ? y[size_t(j)] / (1.0 + std::exp(-y[size_t(j)])) * y[size_t(j + m_out)]
                                                : y[size_t(j)];
            want[size_t(r * m_out + j)] = float(epi == Epi::AddTo ? resid[size_t(r * m_out + j)] + v : v);
          }
        }
        auto be = make_backend(kind);
        TensorView out = epi == Epi::AddTo ? test::to_device(*be, resid, n, m_out) : be->alloc(DType::F32, {n, m_out});
        TensorView bd = be->alloc(DType::F32, {m});
        be->copy_from_host(bias.data(), bd);
        TensorView gd = be->alloc(DType::F32, {k});
        be->copy_from_host(gain.data(), gd);
        be->matmul_fused(test::to_device(*be, x, n, k), test::to_device(*be, w, m, k), bd, out,
                         MatmulFusion{.norm_w = norm ? gd : TensorView{}, .eps = 1e-5f,
                                      .h = be->alloc(DType::F32, {n, k}), .epilogue = epi,
                                      .y = be->alloc(DType::F32, {n, m})});
        EXPECT_TRUE(test::close_rel_l2(test::to_host_f32(*be, out), want, 1e-5));
      }
    }
  }
}

// RopeKv is the product, then rope_kv_write on it: the same qkv rows and KV pool bytes, bit
// for bit, as the two ops called in turn on a second backend of the same kind.
TEST(OpsMatmulFused, RopeKvIsTheProductThenRopeKvWrite) {
  using Epi = MatmulFusion::Epilogue;
  constexpr int64_t kHeads = 4, kKvHeads = 2, kHeadDim = 16, k = 32, m = (kHeads + 2 * kKvHeads) * kHeadDim;
  constexpr int kLayer = 1;
  const KvCacheSpec spec{.n_layers = 2, .n_blocks = 8, .block_size = 4, .n_kv_heads = kKvHeads,
                         .head_dim = kHeadDim, .dtype = DType::F32};
  const AttentionParams p{.n_heads = kHeads, .n_kv_heads = kKvHeads, .head_dim = kHeadDim, .scale = 0.25f};
  // three sequences, one new token each, at positions 5, 9 and 0
  const std::vector<std::vector<int32_t>> tables = {{5, 1}, {3, 0, 7}, {2}};
  const int32_t starts[] = {5, 9, 0};
  BatchBuilder builder(4, 3);
  const int32_t id = 42;
  for (size_t s = 0; s < tables.size(); ++s)
    builder.add(SeqChunk{.ids = &id, .n_ids = 1, .start_pos = starts[s], .blocks = tables[s].data(),
                         .n_blocks = int32_t(tables[s].size())});
  const Batch batch = builder.take();
  const int64_t n = batch.n_tokens();
  Rng rng(test::seed_of({22}));
  const std::vector<float> x = test::randn(rng, n * k, 1.0), w = test::randn(rng, m * k, 0.2),
                           bias = test::randn(rng, m), inv_freq_host = test::make_inv_freq(kHeadDim);
  for (BackendKind kind : {BackendKind::Ref, BackendKind::Cpu}) {
    std::unique_ptr<Backend> be[2] = {make_backend(kind), make_backend(kind)};
    SCOPED_TRACE(be[0]->name());
    std::vector<float> qkv[2];
    for (int i = 0; i < 2; ++i) {
      Backend& b = *be[i];
      b.init_kv_cache(spec);
      for (int il = 0; il < 2; ++il)  // known contents, so unwritten slots compare equal too
        for (const TensorView* pool : {&test::as_host(b).k_cache(il), &test::as_host(b).v_cache(il)}) {
          const std::vector<float> fill(size_t(pool->numel()), -7.0f);
          b.copy_from_host(fill.data(), *pool);
        }
      b.set_batch(batch);
      TensorView inv_freq = b.alloc(DType::F32, {kHeadDim / 2});
      b.copy_from_host(inv_freq_host.data(), inv_freq);
      TensorView bd = b.alloc(DType::F32, {m});
      b.copy_from_host(bias.data(), bd);
      const TensorView xd = test::to_device(b, x, n, k), wd = test::to_device(b, w, m, k);
      TensorView out = b.alloc(DType::F32, {n, m});
      if (i == 0) {
        b.matmul_fused(xd, wd, bd, out,
                       MatmulFusion{.epilogue = Epi::RopeKv, .rope_layer = kLayer, .rope = QkRope{.inv_freq = inv_freq}, .attn = p});
      } else {
        b.matmul(xd, wd, bd, out);
        b.rope_kv_write(kLayer, out, QkRope{.inv_freq = inv_freq}, p);
      }
      qkv[i] = test::to_host_f32(b, out);
    }
    EXPECT_TRUE(test::bitwise_equal(qkv[0], qkv[1])) << "qkv rows";
    for (int il = 0; il < 2; ++il)
      for (const bool v : {false, true}) {
        const TensorView& a = v ? test::as_host(*be[0]).v_cache(il) : test::as_host(*be[0]).k_cache(il);
        const TensorView& b = v ? test::as_host(*be[1]).v_cache(il) : test::as_host(*be[1]).k_cache(il);
        std::vector<float> pa(size_t(a.numel())), pb(size_t(b.numel()));
        be[0]->copy_to_host(a, pa.data());
        be[1]->copy_to_host(b, pb.data());
        EXPECT_EQ(std::memcmp(pa.data(), pb.data(), pa.size() * sizeof(float)), 0)
            << (v ? "V" : "K") << " pool of layer " << il;
        const int64_t written = std::count_if(pa.begin(), pa.end(), [](float e) { return e != -7.0f; });
        EXPECT_EQ(written, il == kLayer ? n * kKvHeads * kHeadDim : 0) << (v ? "V" : "K") << " pool of layer " << il;
      }
  }
}

std::string matmul_name(const ::testing::TestParamInfo<std::tuple<DType, BiasKind>>& info) {
  const auto [w, b] = info.param;
  const char* bias = b == BiasKind::None ? "NoBias" : b == BiasKind::F32 ? "BiasF32" : "BiasBF16";
  std::string name = "W";  // appended, not "W" + ...: GCC 12 warns falsely (-Wrestrict) on that
  name += dtype_name(w);
  return name + "_" + bias;
}

INSTANTIATE_TEST_SUITE_P(Ops, MatmulSweep,
                         ::testing::Combine(::testing::Values(DType::F32, DType::BF16, DType::F16),
                                            ::testing::Values(BiasKind::None, BiasKind::F32, BiasKind::BF16)),
                         matmul_name);

}  // namespace
}  // namespace tf

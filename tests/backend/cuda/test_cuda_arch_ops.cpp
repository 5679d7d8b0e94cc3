// The ops the newer architectures added (GeGLU, scale, the mixture-of-experts router and
// experts, q/k norms with partial and LongRoPE rotation in rope_kv_write, KV groups, head_dim
// 256 attention) on the CUDA backend against the reference backend, with the conventions and
// tolerance arithmetic of test_cuda_ops.cpp: inputs rounded to BF16 before either backend
// sees them, one BF16 rounding <= 2^-8 relative (~1.6e-3 rms for random mantissas).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "core/batch.h"
#include "cuda_test_report.h"
#include "attention_history.h"
#include "cuda_test_util.h"
#include "op_test_util.h"

namespace tf {
namespace {

using test::Rng;

// gelu_tanh(g) * u in FP32, rounded once: tol 4e-3 (as SwiGLU).
TEST(CudaArchOps, Geglu) {
  TF_REQUIRE_CUDA_DEVICE();
  for (int32_t rows : {1, 7, 64}) {
    for (int64_t d_ff : {64, 576}) {
      SCOPED_TRACE("rows=" + std::to_string(rows) + " d_ff=" + std::to_string(d_ff));
      test::Backends be;
      Rng rng(test::seed_of({31, rows, d_ff}));
      const std::vector<float> gu = test::round_bf16(test::randn(rng, rows * 2 * d_ff, 2.0));
      TensorView out_ref = be.ref->alloc(DType::F32, {rows, d_ff});
      be.ref->geglu(test::to_device(*be.ref, gu, rows, 2 * d_ff), out_ref);
      test::GuardedBf16 out(*be.cuda, rows, d_ff);
      be.cuda->geglu(test::to_cuda_bf16(*be.cuda, gu, rows, 2 * d_ff), out.view());
      test::expect_close("geglu", out.values(), test::to_host_f32(*be.ref, out_ref), 4e-3, out.guard_intact());
    }
  }
}

// x * s rounded once: tol 4e-3.
TEST(CudaArchOps, Scale) {
  TF_REQUIRE_CUDA_DEVICE();
  for (int32_t rows : {1, 7, 64}) {
    const int64_t d = 640;
    test::Backends be;
    Rng rng(test::seed_of({32, rows}));
    const std::vector<float> x = test::round_bf16(test::randn(rng, rows * d, 2.0));
    const float s = 45.25f;  // sqrt(2048) in BF16, as Gemma's embedding scale
    TensorView ref = test::to_device(*be.ref, x, rows, d);
    be.ref->scale(ref, s);
    TensorView got = test::to_cuda_bf16(*be.cuda, x, rows, d);
    be.cuda->scale(got, s);
    test::expect_close("scale", test::from_cuda(*be.cuda, got), test::to_host_f32(*be.ref, ref), 4e-3, true);
  }
}

// Router: the chosen experts must be the reference's exactly (logits N(0, 1) in F32 on both
// sides: a tie is a probability-zero event), their weights within 1e-6 relative L2 (softmax
// in double on both sides, rounded once to F32).
TEST(CudaArchOps, MoeRoute) {
  TF_REQUIRE_CUDA_DEVICE();
  for (int32_t rows : {1, 7, 300}) {
    for (const auto& [ne, k] : {std::pair<int64_t, int64_t>{8, 2}, {128, 8}, {4, 4}}) {
      for (bool renorm : {true, false}) {
        SCOPED_TRACE("rows=" + std::to_string(rows) + " experts=" + std::to_string(ne) + " top=" + std::to_string(k) +
                     " renormalize=" + std::to_string(renorm));
        test::Backends be;
        Rng rng(test::seed_of({33, rows, ne, k, renorm}));
        const std::vector<float> logits = test::randn(rng, rows * ne, 1.5);
        const MoeParams p{.n_experts = ne, .top_k = k, .renormalize = renorm};
        std::vector<int32_t> ids[2];
        std::vector<float> w[2];
        Backend* backends[2] = {be.ref.get(), be.cuda.get()};
        for (int ib = 0; ib < 2; ++ib) {
          Backend& b = *backends[ib];
          TensorView l = b.alloc(DType::F32, {rows, ne});
          b.copy_from_host(logits.data(), l);
          TensorView id = b.alloc(DType::I32, {rows, k}), wt = b.alloc(DType::F32, {rows, k});
          b.moe_route(l, p, id, wt);
          ids[ib].resize(size_t(rows * k));
          w[ib].resize(size_t(rows * k));
          b.copy_to_host(id, ids[ib].data());
          b.copy_to_host(wt, w[ib].data());
        }
        const bool same = ids[0] == ids[1];
        EXPECT_TRUE(same) << "chosen experts differ";
        test::record("moe_route ids", "mismatches", same ? 0 : 1, 0, same);
        test::expect_close("moe_route weights", w[1], w[0], 1e-6, true);
      }
    }
  }
}

// Experts: gate and up rounded to BF16 (as the dense path stores gate_up), the activation
// rounded, the output rounded: four roundings' worth as the fused SwiGLU matmul, tol 1.2e-2.
// Shapes include experts no token picks, d_ff and d_model not multiples of the 64-wide
// tiles, and more assignments per expert than one 16-row tile. The parity models' shapes
// (Mixtral: d_model 128, d_ff 128, 4 experts; Qwen3-MoE: d_ff 64, 8 experts; top 2) run at
// token counts on both sides of the boundaries the kernels and the engine have: one and
// several 16-row tiles per expert, 64 rows (where matmuls stop timing cuBLASLt), the golden
// prompts' 24, 31 and 88 tokens, and a decode batch of 8. Each shape on both GEMM kernels:
// tensor cores (moe_mma.cu, where the shape allows) and CUDA cores (BackendOptions::moe_mma).
TEST(CudaArchOps, MoeExperts) {
  TF_REQUIRE_CUDA_DEVICE();
  struct Shape {
    int32_t rows;
    int64_t d_model, d_ff, ne, k;
  };
  std::vector<Shape> shapes = {Shape{1, 128, 64, 8, 2}, Shape{3, 256, 96, 8, 2}, Shape{64, 128, 160, 4, 2},
                               Shape{200, 192, 64, 16, 4}, Shape{5, 128, 64, 64, 8},
                               // tensor-core kernel: k not a multiple of its 64-wide step
                               // (d_model 200, d_ff 136), m not a multiple of its 64 features,
                               // an expert with several 64-row tiles and a partial one (300
                               // rows x top 2 over 3 experts), and a shape the SIMT kernels take
                               // (d_model 130: rows of 130 BF16 are not 16-byte multiples)
                               Shape{97, 200, 136, 4, 2}, Shape{300, 128, 72, 4, 2}, Shape{7, 130, 64, 4, 2}};
  for (int32_t rows : {1, 8, 15, 16, 17, 24, 31, 32, 33, 63, 64, 65, 88, 89, 129}) {
    shapes.push_back(Shape{rows, 128, 128, 4, 2});
    shapes.push_back(Shape{rows, 128, 64, 8, 2});
  }
  for (const bool mma : {true, false}) {
    for (const Shape& s : shapes) {
      SCOPED_TRACE(std::string(mma ? "tensor cores" : "CUDA cores") + " rows=" + std::to_string(s.rows) +
                   " d_model=" + std::to_string(s.d_model) + " d_ff=" + std::to_string(s.d_ff) + " experts=" +
                   std::to_string(s.ne) + " top=" + std::to_string(s.k));
      test::Backends be(BackendOptions{.moe_mma = mma});
      Rng rng(test::seed_of({34, s.rows, s.d_model, s.d_ff, s.ne, s.k}));
      const std::vector<float> x = test::round_bf16(test::randn(rng, s.rows * s.d_model, 2.0));
      const test::HostTensor wgu = test::make_host(
          test::randn(rng, s.ne * 2 * s.d_ff * s.d_model, 1.0 / std::sqrt(double(s.d_model))), DType::BF16,
          {s.ne * 2 * s.d_ff, s.d_model});
      const test::HostTensor wd = test::make_host(test::randn(rng, s.ne * s.d_model * s.d_ff, 1.0 / std::sqrt(double(s.d_ff))),
                                                  DType::BF16, {s.ne * s.d_model, s.d_ff});
      // top-k distinct experts per row, drawn from the first ne - 1 (the last is never picked)
      std::vector<int32_t> ids;
      std::vector<float> wts;
      for (int32_t r = 0; r < s.rows; ++r) {
        std::vector<int32_t> e(size_t(s.ne - 1));
        std::iota(e.begin(), e.end(), 0);
        rng.shuffle(e);
        float sum = 0;
        for (int64_t j = 0; j < s.k; ++j) {
          ids.push_back(e[size_t(j)]);
          wts.push_back(float(0.1 + rng.uniform()));
          sum += wts.back();
        }
        for (int64_t j = 0; j < s.k; ++j) wts[wts.size() - size_t(s.k) + size_t(j)] /= sum;
      }
      const MoeParams p{.n_experts = s.ne, .top_k = s.k};
      auto ids_on = [&](Backend& b) {
        TensorView t = b.alloc(DType::I32, {s.rows, s.k});
        b.copy_from_host(ids.data(), t);
        return t;
      };
      auto wts_on = [&](Backend& b) {
        TensorView t = b.alloc(DType::F32, {s.rows, s.k});
        b.copy_from_host(wts.data(), t);
        return t;
      };
      TensorView out_ref = be.ref->alloc(DType::F32, {s.rows, s.d_model});
      be.ref->moe_experts(test::to_device(*be.ref, x, s.rows, s.d_model), ids_on(*be.ref), wts_on(*be.ref),
                          be.ref->upload(wgu.view(), DType::BF16), be.ref->upload(wd.view(), DType::BF16), p, out_ref);
      test::GuardedBf16 out(*be.cuda, s.rows, s.d_model);
      be.cuda->moe_experts(test::to_cuda_bf16(*be.cuda, x, s.rows, s.d_model), ids_on(*be.cuda), wts_on(*be.cuda),
                           be.cuda->upload(wgu.view(), DType::BF16), be.cuda->upload(wd.view(), DType::BF16), p,
                           out.view());
      test::expect_close("moe_experts", out.values(), test::to_host_f32(*be.ref, out_ref), 1.2e-2, out.guard_intact());
    }
  }
}

// rope_kv_write with what Qwen3, Gemma 3 and Phi-3 add, alone and together: q/k RMSNorms,
// partial rotation (n_rot < head_dim), LongRoPE (a second frequency table from long_from
// on, mscale), on KV groups (two layers in different groups with different pool sizes; each
// backend writes each layer at its own group's slots), over head_dim 32 to 256. Tolerances:
// qkv is the input rounded once more after the norm and rotation (and the norm weight
// rounded to BF16 on both sides), tol 8e-3; pools one more rounding, 1e-2. Pool elements
// written by one backend only fail.
TEST(CudaArchOps, RopeKvWriteNormsPartialLongRopeGroups) {
  TF_REQUIRE_CUDA_DEVICE();
  constexpr int32_t kBlockSize = 16;
  struct Case {
    const char* name;
    bool norms, partial, long_rope;
  };
  for (const Case& c : {Case{"norms", true, false, false}, Case{"partial", false, true, false},
                        Case{"longrope", false, false, true}, Case{"all", true, true, true}}) {
    for (int64_t hd : {32, 64, 128, 256}) {
      const int64_t nh = 4, nkv = 2, row = (nh + 2 * nkv) * hd;
      const int64_t n_rot = c.partial ? hd / 4 : hd;  // Phi-3-mini's factor is 0.75; 0.25 moves more dims
      SCOPED_TRACE(std::string(c.name) + " head_dim=" + std::to_string(hd));
      Rng rng(test::seed_of({35, c.norms, c.partial, c.long_rope, hd}));
      // two sequences prefilled, one decoded, in two KV groups of 40 and 24 blocks
      const std::vector<int32_t> lens = {37, 5, 70};
      const test::Tables t0 = test::make_tables(rng, kBlockSize, lens, 30);
      const test::Tables t1 = test::make_tables(rng, kBlockSize, lens, 15);
      const KvCacheSpec spec{.n_layers = 2, .n_blocks = t0.n_blocks, .block_size = kBlockSize, .n_kv_heads = nkv,
                             .head_dim = hd, .dtype = DType::BF16, .layer_group = {0, 1},
                             .group_blocks = {t0.n_blocks, t1.n_blocks}};
      BatchBuilder builder(kBlockSize, std::max(t0.max_blocks, t1.max_blocks), 2);
      std::vector<std::vector<int32_t>> tables[3];
      std::vector<int32_t> ids(200);
      for (int32_t& id : ids) id = int32_t(rng.uniform_int(0, 99));
      int32_t n_tokens = 0;
      for (size_t s = 0; s < lens.size(); ++s) {
        tables[s] = {t0.blocks[s], t1.blocks[s]};
        const int32_t n = s == 2 ? 1 : lens[s];  // sequence 2: a decode at position 69
        builder.add(SeqChunk{.ids = ids.data(), .n_ids = n, .start_pos = lens[s] - n, .tables = tables[s]});
        n_tokens += n;
      }
      const Batch batch = builder.take();
      const std::vector<float> qkv = test::round_bf16(test::randn(rng, n_tokens * row, 2.0));
      std::vector<float> qn = test::randn(rng, hd, 0.3), kn = test::randn(rng, hd, 0.3);
      for (float& v : qn) v = bf16_to_f32(f32_to_bf16(1.0f + v));
      for (float& v : kn) v = bf16_to_f32(f32_to_bf16(1.0f + v));
      const test::HostTensor qnh = test::make_host(qn, DType::BF16, {hd}), knh = test::make_host(kn, DType::BF16, {hd});

      test::Backends be;
      test::KvPools pools[2] = {test::KvPools(*be.ref, test::as_host(*be.ref)),
                                test::KvPools(*be.cuda, dynamic_cast<cuda::CudaBackend&>(*be.cuda))};
      Backend* backends[2] = {be.ref.get(), be.cuda.get()};
      std::vector<float> outs[2][2];
      for (int ib = 0; ib < 2; ++ib) {
        Backend& b = *backends[ib];
        b.init_kv_cache(spec);
        pools[ib].poison_all();
        b.set_batch(batch);
        const QkRope rope{.inv_freq = test::upload_f32(b, test::rope_freqs(n_rot, 1.0)),
                          .inv_freq_long = c.long_rope ? test::upload_f32(b, test::rope_freqs(n_rot, 3.0)) : TensorView{},
                          .long_from = c.long_rope ? 20 : 0,
                          .mscale = c.long_rope ? 1.19f : 1.0f,
                          .q_norm = c.norms ? b.upload(qnh.view(), DType::BF16) : TensorView{},
                          .k_norm = c.norms ? b.upload(knh.view(), DType::BF16) : TensorView{},
                          .eps = 1e-6f};
        const AttentionParams p{.n_heads = nh, .n_kv_heads = nkv, .head_dim = hd};
        for (int layer = 0; layer < 2; ++layer) {
          const TensorView x = ib == 0 ? test::to_device(b, qkv, n_tokens, row) : test::to_cuda_bf16(b, qkv, n_tokens, row);
          b.rope_kv_write(layer, x, rope, p);
          outs[ib][layer] = ib == 0 ? test::to_host_f32(b, x) : test::from_cuda(b, x);
        }
      }
      for (int layer = 0; layer < 2; ++layer) {
        test::expect_close(std::string("rope_kv_write ") + c.name + " qkv", outs[1][layer], outs[0][layer], 8e-3, true);
        for (int kv = 0; kv < 2; ++kv) {
          const std::vector<uint8_t> want_b = pools[0].bytes(layer, kv), got_b = pools[1].bytes(layer, kv);
          ASSERT_EQ(want_b.size(), got_b.size());
          std::vector<float> want, got;
          bool same_rows = true;
          for (int64_t i = 0; i < int64_t(want_b.size() / 2); ++i) {
            const float wv = load_f32(want_b.data(), DType::BF16, i), gv = load_f32(got_b.data(), DType::BF16, i);
            if (std::isnan(wv) != std::isnan(gv)) same_rows = false;
            if (std::isnan(wv)) continue;
            want.push_back(wv);
            got.push_back(gv);
          }
          EXPECT_TRUE(same_rows) << "layer " << layer << (kv ? " V" : " K") << ": elements written by one backend only";
          EXPECT_EQ(int64_t(want.size()), n_tokens * nkv * hd) << "layer " << layer << " elements written";
          test::expect_close(std::string("rope_kv_write ") + c.name + (kv ? " V pool" : " K pool"), got, want, 1e-2,
                             same_rows);
        }
      }
    }
  }
}

}  // namespace
}  // namespace tf

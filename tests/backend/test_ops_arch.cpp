// The ops the newer architectures added, CPU backend against the reference (geglu,
// moe_experts, rope_kv_write with q/k norms, partial rotation, LongRoPE and KV groups), and
// the semantics of the ops both host backends share (scale, moe_route) checked directly.
// F32 on both sides: the CPU backend computes in F32 where the reference uses double, so the
// tolerances are a few F32 roundings per output (~1e-6 relative).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>

#include "attention_history.h"
#include "core/batch.h"
#include "op_test_util.h"

namespace tf {
namespace {

using test::BackendPair;
using test::GuardedOut;
using test::Rng;

// gelu_tanh(g) * u: a tanh, a few multiplies and adds in F32 against double: 1e-6.
TEST(OpsArch, GegluCpuMatchesRef) {
  for (int64_t rows : {1, 3, 33}) {
    for (int64_t d_ff : {1, 17, 100}) {
      SCOPED_TRACE("rows=" + std::to_string(rows) + " d_ff=" + std::to_string(d_ff));
      Rng rng(test::seed_of({rows, d_ff, 41}));
      const std::vector<float> gu = test::randn(rng, rows * 2 * d_ff, 3.0);
      BackendPair be;
      Backend* backends[2] = {be.ref.get(), be.cpu.get()};
      std::vector<float> outs[2];
      for (int ib = 0; ib < 2; ++ib) {
        GuardedOut out(*backends[ib], rows, d_ff);
        backends[ib]->geglu(test::to_device(*backends[ib], gu, rows, 2 * d_ff), out.view());
        EXPECT_TRUE(out.guard_intact());
        outs[ib] = out.values();
      }
      EXPECT_TRUE(test::close_rel_l2(outs[1], outs[0], 1e-6));
    }
  }
  // geglu of (gate 1, up 2): 2 gelu_tanh(1) = 1 + tanh(sqrt(2/pi) 1.044715) = 2 * 0.8411920
  BackendPair be;
  for (Backend* b : {be.ref.get(), be.cpu.get()}) {
    GuardedOut one(*b, 1, 1);
    b->geglu(test::to_device(*b, {1.0f, 2.0f}, 1, 2), one.view());
    EXPECT_NEAR(one.values()[0], 2 * 0.8411920, 1e-6) << b->name();
  }
}

TEST(OpsArch, ScaleMultipliesInPlace) {
  BackendPair be;
  for (Backend* b : {be.ref.get(), be.cpu.get()}) {
    TensorView x = test::to_device(*b, {1.0f, -2.5f, 3.0f, 0.0f}, 2, 2);
    b->scale(x, 11.3125f);
    EXPECT_EQ(test::to_host_f32(*b, x), (std::vector<float>{11.3125f, -28.28125f, 33.9375f, 0.0f}));
  }
}

// Softmax, top-k by probability with ties to the lower id, renormalised or not.
TEST(OpsArch, MoeRouteSoftmaxTopKAndTies) {
  BackendPair be;
  for (Backend* b : {be.ref.get(), be.cpu.get()}) {
    // row 0: experts 2 and 0 tie below 3; row 1: all equal, the lowest ids win
    const std::vector<float> logits = {1.0f, -1.0f, 1.0f, 2.0f, 0.5f, 0.5f, 0.5f, 0.5f};
    TensorView l = test::to_device(*b, logits, 2, 4);
    for (bool renorm : {true, false}) {
      const MoeParams p{.n_experts = 4, .top_k = 2, .renormalize = renorm};
      TensorView ids = b->alloc(DType::I32, {2, 2}), w = b->alloc(DType::F32, {2, 2});
      b->moe_route(l, p, ids, w);
      std::vector<int32_t> got_ids(4);
      b->copy_to_host(ids, got_ids.data());
      EXPECT_EQ(got_ids, (std::vector<int32_t>{3, 0, 0, 1})) << b->name();
      const double z = std::exp(1.0) * 2 + std::exp(-1.0) + std::exp(2.0);
      const double p3 = std::exp(2.0) / z, p0 = std::exp(1.0) / z;
      const std::vector<float> got = test::to_host_f32(*b, w);
      EXPECT_NEAR(got[0], renorm ? p3 / (p3 + p0) : p3, 1e-7);
      EXPECT_NEAR(got[1], renorm ? p0 / (p3 + p0) : p0, 1e-7);
      EXPECT_NEAR(got[2], renorm ? 0.5 : 0.25, 1e-7);
      EXPECT_NEAR(got[3], renorm ? 0.5 : 0.25, 1e-7);
    }
  }
}

// The CPU backend groups the assignments by expert; the reference goes token by token. Each
// output is two F32 dot products of up to 96 terms against double: 1e-5.
TEST(OpsArch, MoeExpertsCpuMatchesRef) {
  struct Shape {
    int64_t rows, d_model, d_ff, ne, k;
  };
  for (const Shape& s : {Shape{1, 64, 32, 8, 2}, Shape{7, 96, 48, 4, 2}, Shape{24, 64, 96, 16, 4}}) {
    for (DType wdt : {DType::F32, DType::BF16}) {
      SCOPED_TRACE("rows=" + std::to_string(s.rows) + " experts=" + std::to_string(s.ne) + " " + std::string(dtype_name(wdt)));
      Rng rng(test::seed_of({s.rows, s.d_model, s.d_ff, s.ne, 42}));
      const std::vector<float> x = test::randn(rng, s.rows * s.d_model, 2.0);
      const test::HostTensor wgu = test::make_host(test::randn(rng, s.ne * 2 * s.d_ff * s.d_model, 0.1), DType::F32,
                                                   {s.ne * 2 * s.d_ff, s.d_model});
      const test::HostTensor wd =
          test::make_host(test::randn(rng, s.ne * s.d_model * s.d_ff, 0.1), DType::F32, {s.ne * s.d_model, s.d_ff});
      std::vector<int32_t> ids;
      std::vector<float> wts;
      for (int64_t r = 0; r < s.rows; ++r) {
        std::vector<int32_t> e(size_t(s.ne - 1));  // the last expert is never picked
        std::iota(e.begin(), e.end(), 0);
        rng.shuffle(e);
        for (int64_t j = 0; j < s.k; ++j) {
          ids.push_back(e[size_t(j)]);
          wts.push_back(float(rng.uniform()));
        }
      }
      const MoeParams p{.n_experts = s.ne, .top_k = s.k};
      BackendPair be;
      Backend* backends[2] = {be.ref.get(), be.cpu.get()};
      std::vector<float> outs[2];
      for (int ib = 0; ib < 2; ++ib) {
        Backend& b = *backends[ib];
        TensorView id = b.alloc(DType::I32, {s.rows, s.k}), w = b.alloc(DType::F32, {s.rows, s.k});
        b.copy_from_host(ids.data(), id);
        b.copy_from_host(wts.data(), w);
        GuardedOut out(b, s.rows, s.d_model);
        b.moe_experts(test::to_device(b, x, s.rows, s.d_model), id, w, b.upload(wgu.view(), wdt),
                      b.upload(wd.view(), wdt), p, out.view());
        EXPECT_TRUE(out.guard_intact());
        outs[ib] = out.values();
      }
      EXPECT_TRUE(test::close_rel_l2(outs[1], outs[0], 1e-5));
    }
  }
}

// rope_kv_write with q/k norms, partial rotation and LongRoPE (second table from position 20
// on, mscale), on two layers in two KV groups of different sizes: qkv and every pool of the
// CPU backend against the reference's, 1e-5 (F32 norm and rotation against double); a pool
// element written by one backend only fails (pools start NaN).
TEST(OpsArch, RopeKvWriteNormsPartialLongRopeGroupsCpuMatchesRef) {
  constexpr int32_t kBlockSize = 4;
  for (int64_t hd : {16, 64, 256}) {
    for (bool all : {false, true}) {
      SCOPED_TRACE("head_dim=" + std::to_string(hd) + (all ? " norms+partial+longrope" : " norms"));
      const int64_t nh = 4, nkv = 2, row = (nh + 2 * nkv) * hd, n_rot = all ? hd / 2 : hd;
      Rng rng(test::seed_of({hd, all, 43}));
      const std::vector<int32_t> lens = {23, 6, 30};
      const test::Tables t0 = test::make_tables(rng, kBlockSize, lens, 5), t1 = test::make_tables(rng, kBlockSize, lens, 2);
      const KvCacheSpec spec{.n_layers = 2, .n_blocks = t0.n_blocks, .block_size = kBlockSize, .n_kv_heads = nkv,
                             .head_dim = hd, .dtype = DType::F32, .layer_group = {0, 1},
                             .group_blocks = {t0.n_blocks, t1.n_blocks}};
      BatchBuilder builder(kBlockSize, std::max(t0.max_blocks, t1.max_blocks), 2);
      std::vector<std::vector<int32_t>> tables[3];
      std::vector<int32_t> ids(64, 1);
      int32_t n_tokens = 0;
      for (size_t s = 0; s < lens.size(); ++s) {
        tables[s] = {t0.blocks[s], t1.blocks[s]};
        const int32_t n = s == 2 ? 1 : lens[s];
        builder.add(SeqChunk{.ids = ids.data(), .n_ids = n, .start_pos = lens[s] - n, .tables = tables[s]});
        n_tokens += n;
      }
      const Batch batch = builder.take();
      const std::vector<float> qkv = test::randn(rng, n_tokens * row, 2.0);
      std::vector<float> qn = test::randn(rng, hd, 0.3), kn = test::randn(rng, hd, 0.3);
      BackendPair be;
      Backend* backends[2] = {be.ref.get(), be.cpu.get()};
      std::vector<float> outs[2][2], pools[2][2][2];
      for (int ib = 0; ib < 2; ++ib) {
        Backend& b = *backends[ib];
        HostBackend& h = test::as_host(b);
        b.init_kv_cache(spec);
        for (int il = 0; il < 2; ++il)
          for (const TensorView* pool : {&h.k_cache(il), &h.v_cache(il)})
            std::fill_n(pool->as<float>(), pool->numel(), std::nanf(""));
        b.set_batch(batch);
        const QkRope rope{.inv_freq = test::upload_f32(b, test::rope_freqs(n_rot, 1.0)),
                          .inv_freq_long = all ? test::upload_f32(b, test::rope_freqs(n_rot, 3.0)) : TensorView{},
                          .long_from = all ? 20 : 0,
                          .mscale = all ? 1.19f : 1.0f,
                          .q_norm = test::upload_f32(b, qn),
                          .k_norm = test::upload_f32(b, kn),
                          .eps = 1e-6f};
        const AttentionParams p{.n_heads = nh, .n_kv_heads = nkv, .head_dim = hd};
        for (int il = 0; il < 2; ++il) {
          const TensorView x = test::to_device(b, qkv, n_tokens, row);
          b.rope_kv_write(il, x, rope, p);
          outs[ib][il] = test::to_host_f32(b, x);
          pools[ib][il][0] = test::to_host_f32(b, h.k_cache(il));
          pools[ib][il][1] = test::to_host_f32(b, h.v_cache(il));
        }
      }
      for (int il = 0; il < 2; ++il) {
        EXPECT_TRUE(test::close_rel_l2(outs[1][il], outs[0][il], 1e-5)) << "layer " << il;
        for (int kv = 0; kv < 2; ++kv) {
          std::vector<float> want, got;
          int64_t one_sided = 0;
          for (size_t i = 0; i < pools[0][il][kv].size(); ++i) {
            const float w = pools[0][il][kv][i], g = pools[1][il][kv][i];
            one_sided += std::isnan(w) != std::isnan(g);
            if (std::isnan(w)) continue;
            want.push_back(w);
            got.push_back(g);
          }
          EXPECT_EQ(one_sided, 0) << "layer " << il << (kv ? " V" : " K");
          EXPECT_EQ(int64_t(want.size()), n_tokens * nkv * hd) << "layer " << il;
          EXPECT_TRUE(test::close_rel_l2(got, want, 1e-5)) << "layer " << il << (kv ? " V" : " K");
        }
      }
    }
  }
}

}  // namespace
}  // namespace tf

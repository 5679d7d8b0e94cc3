// Every op of the CUDA backend against the reference backend (ggml test-backend-ops style):
// the same random inputs (fixed seeds, never zeros) go to the reference backend in F32 and to
// the CUDA backend in BF16, and the outputs are compared with the tolerances stated next to
// each test. Inputs are rounded to BF16 *before* they reach either backend, so both compute
// on identical values and the comparisons measure only what the CUDA backend adds: FP32
// instead of double arithmetic (~1e-6 relative) and the rounding of its BF16 outputs.
//
// One BF16 rounding (8 significant bits, round to nearest) changes a value by at most 2^-8
// of its magnitude (half an ulp of 2^-7 relative at the bottom of a binade), so the relative
// L2 error of an array rounded once is at most 2^-8 = 3.9e-3 and about 1.6e-3 for random
// mantissas. That bound, not a loose 1e-2, is what each tolerance below is built from.
//
// The paged-attention histories mirror tests/backend/test_ops_attention.cpp: prefills,
// chunked prefills after cached prefixes, a new sequence and decodes over several sequences
// with shuffled, non-contiguous block ids; pools poisoned with NaN so a read of an unwritten
// slot fails; blocks outside a sliding window dropped (-1) and poisoned.
//
// main() is here: after gtest's summary it prints one line per op (cases, failures, worst
// error against its tolerance).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "core/batch.h"
#include "engine/forward_runner.h"
#include "model/arch/model.h"
#include "sample/sampler.h"
#include "cuda_test_report.h"
#include "attention_history.h"
#include "cuda_test_util.h"
#include "op_test_util.h"
#include "quant_test_util.h"

namespace tf {
namespace {

using test::Chunk;
using test::Rng;
using test::Steps;
using test::Tables;
using test::ceil_div;
using test::kLongSteps;
using test::make_inv_freq;
using test::make_tables;
using test::seq_lengths;

// ---- elementwise, norms, gather -----------------------------------------------------------

// Batch of one sequence per `lens` entry with token ids in [0, n_vocab); logits for the last
// token of each sequence.
Batch make_batch(Rng& rng, const std::vector<int32_t>& lens, int32_t n_vocab) {
  const int32_t block_size = 16;
  int32_t max_blocks = 1;
  for (int32_t len : lens) max_blocks = std::max(max_blocks, (len + block_size - 1) / block_size);
  BatchBuilder builder(block_size, max_blocks);
  int32_t next_block = 0;
  for (int32_t len : lens) {
    std::vector<int32_t> ids(static_cast<size_t>(len));
    std::vector<int32_t> blocks;
    for (int32_t& id : ids) id = int32_t(rng.uniform_int(0, n_vocab - 1));
    for (int32_t b = 0; b < (len + block_size - 1) / block_size; ++b) blocks.push_back(next_block++);
    builder.add(SeqChunk{.ids = ids.data(), .n_ids = len, .start_pos = 0, .blocks = blocks.data(),
                         .n_blocks = int32_t(blocks.size())});
  }
  return builder.take();
}

// n_tokens split into up to three sequences.
std::vector<int32_t> split_lens(int32_t n_tokens) {
  if (n_tokens < 3) return {n_tokens};
  return {n_tokens / 3, n_tokens / 3, n_tokens - 2 * (n_tokens / 3)};
}

const int32_t kRowSweep[] = {1, 7, 64};

// A copy: bit-exact.
TEST(CudaOps, Embedding) {
  TF_REQUIRE_CUDA_DEVICE();
  test::Backends be;
  for (int32_t n : kRowSweep) {
    for (int64_t d : {64, 256}) {
      SCOPED_TRACE("n_tokens=" + std::to_string(n) + " d=" + std::to_string(d));
      Rng rng(test::seed_of({1, n, d}));
      const int32_t n_vocab = 100;
      const test::HostTensor table = test::make_host(test::randn(rng, n_vocab * d), DType::BF16, {n_vocab, d});
      const Batch batch = make_batch(rng, split_lens(n), n_vocab);
      TensorView tables[2] = {be.ref->upload(table.view(), DType::BF16), be.cuda->upload(table.view(), DType::BF16)};
      be.ref->set_batch(batch);
      be.cuda->set_batch(batch);
      TensorView want = be.ref->alloc(DType::F32, {n, d});
      be.ref->embedding(tables[0], want);
      test::GuardedBf16 got(*be.cuda, n, d);
      be.cuda->embedding(tables[1], got.view());
      EXPECT_TRUE(got.guard_intact());
      const auto r = test::bitwise_equal(got.values(), test::to_host_f32(*be.ref, want));
      EXPECT_TRUE(r);
      test::record("embedding", "bit-exact", r ? 0 : 1, 0, r && got.guard_intact());
    }
  }
}

// A GGUF Q4_0 table uploaded as stored (held as W4 g32): each gathered element is the
// reference's F32 value d * (q - 8) (exact in F32) rounded once to BF16: bit-exact against the
// reference backend's rows (quant/gguf_dequant.h) rounded to BF16.
TEST(CudaOps, EmbeddingGgufQ4_0) {
  TF_REQUIRE_CUDA_DEVICE();
  test::Backends be;
  for (int32_t n : kRowSweep) {
    for (int64_t d : {64, 288}) {
      SCOPED_TRACE("n_tokens=" + std::to_string(n) + " d=" + std::to_string(d));
      Rng rng(test::seed_of({48, n, d}));
      const int32_t n_vocab = 100;
      std::vector<uint8_t> q = test::random_q4_0(rng, n_vocab, d);
      const TensorView host = make_view(q.data(), DType::Q4_0, {n_vocab, d});
      const Batch batch = make_batch(rng, split_lens(n), n_vocab);
      const TensorView table_ref = be.ref->upload(host, DType::Q4_0), table_cuda = be.cuda->upload(host, DType::Q4_0);
      ASSERT_EQ(table_cuda.dtype, DType::W4);
      be.ref->set_batch(batch);
      be.cuda->set_batch(batch);
      TensorView want = be.ref->alloc(DType::F32, {n, d});
      be.ref->embedding(table_ref, want);
      test::GuardedBf16 got(*be.cuda, n, d);
      be.cuda->embedding(table_cuda, got.view());
      EXPECT_TRUE(got.guard_intact());
      const auto r = test::bitwise_equal(got.values(), test::round_bf16(test::to_host_f32(*be.ref, want)));
      EXPECT_TRUE(r);
      test::record("embedding gguf Q4_0", "bit-exact", r ? 0 : 1, 0, r && got.guard_intact());
    }
  }
}

// x ~ N(0, 4), w ~ 1 + N(0, 0.01); eps 1e-5.
// rms_norm: the output is rounded once: rel L2 <= 2^-8 (+1e-6 of FP32 arithmetic); tol 4e-3.
// add (the residual add): the sum is rounded once: tol 4e-3.
TEST(CudaOps, RmsNormAndAdd) {
  TF_REQUIRE_CUDA_DEVICE();
  constexpr double kOnceTol = 4e-3;
  for (int32_t rows : kRowSweep) {
    for (int64_t d : {64, 100, 256, 576}) {  // 100: the scalar kernel (not a multiple of 8)
      SCOPED_TRACE("rows=" + std::to_string(rows) + " d=" + std::to_string(d));
      test::Backends be;
      Rng rng(test::seed_of({2, rows, d}));
      const std::vector<float> x = test::round_bf16(test::randn(rng, rows * d, 2.0));
      const std::vector<float> delta = test::round_bf16(test::randn(rng, rows * d, 2.0));
      std::vector<float> wv = test::randn(rng, d, 0.1);
      for (float& v : wv) v += 1.0f;
      const test::HostTensor w = test::make_host(wv, DType::BF16, {d});
      const TensorView w_ref = be.ref->upload(w.view(), DType::BF16), w_cuda = be.cuda->upload(w.view(), DType::BF16);

      // rms_norm
      TensorView x_ref = test::to_device(*be.ref, x, rows, d), out_ref = be.ref->alloc(DType::F32, {rows, d});
      be.ref->rms_norm(x_ref, w_ref, 1e-5f, out_ref);
      TensorView x_cuda = test::to_cuda_bf16(*be.cuda, x, rows, d);
      test::GuardedBf16 out(*be.cuda, rows, d);
      be.cuda->rms_norm(x_cuda, w_cuda, 1e-5f, out.view());
      test::expect_close("rms_norm", out.values(), test::to_host_f32(*be.ref, out_ref), kOnceTol,
                         out.guard_intact());

      // add
      TensorView d_ref = test::to_device(*be.ref, delta, rows, d);
      be.ref->add(x_ref, d_ref);
      TensorView d_cuda = test::to_cuda_bf16(*be.cuda, delta, rows, d);
      be.cuda->add(x_cuda, d_cuda);
      test::expect_close("add", test::from_cuda(*be.cuda, x_cuda), test::to_host_f32(*be.ref, x_ref), kOnceTol, true);
    }
  }
}

// silu(g) * u in FP32, rounded once: tol 4e-3.
TEST(CudaOps, Swiglu) {
  TF_REQUIRE_CUDA_DEVICE();
  for (int32_t rows : kRowSweep) {
    for (int64_t d_ff : {64, 576}) {
      SCOPED_TRACE("rows=" + std::to_string(rows) + " d_ff=" + std::to_string(d_ff));
      test::Backends be;
      Rng rng(test::seed_of({3, rows, d_ff}));
      const std::vector<float> gu = test::round_bf16(test::randn(rng, rows * 2 * d_ff, 2.0));
      TensorView out_ref = be.ref->alloc(DType::F32, {rows, d_ff});
      be.ref->swiglu(test::to_device(*be.ref, gu, rows, 2 * d_ff), out_ref);
      test::GuardedBf16 out(*be.cuda, rows, d_ff);
      be.cuda->swiglu(test::to_cuda_bf16(*be.cuda, gu, rows, 2 * d_ff), out.view());
      test::expect_close("swiglu", out.values(), test::to_host_f32(*be.ref, out_ref), 4e-3, out.guard_intact());
    }
  }
}

// matmul_fused (the decode GEMV with its norm prologue and add / SwiGLU epilogue in one
// kernel, or the plain kernels in turn) against the reference backend's plain ops in turn.
// x ~ N(0, 4) and norm weights 1 + N(0, 0.01) as in the norm test, w ~ N(0, 1/k), bias N(0, 1).
// Each BF16 rounding on the way adds ~2^-9 / sqrt(3) ~ 1.1e-3 rms relative error:
//   norm + product (Store): the normalized input and the output are rounded: two roundings'
//     worth, tol 8e-3;
//   AddTo: the product and the sum are rounded (relative to the residual's scale): tol 8e-3;
//   SwiGLU: gate and up are rounded, then the output (and the normalized input with a
//     norm): up to four roundings, tol 1.2e-2.
// "custom" forces the fused kernel wherever it applies (rows <= 8; the norm prologue up to 4
// rows), "cublas" the kernels in turn (cuBLAS summing into the residual for AddTo), "auto"
// whichever the per-shape timing picks.
class CudaMatmulFused : public ::testing::TestWithParam<std::string> {};

// The inputs of one fused-matmul case, drawn in this order: x ~ N(0, 4) rounded to BF16 [rows,
// k], norm weights 1 + N(0, 0.01) [k], w ~ N(0, 1/k) [m, k], bias N(0, 1) [m].
struct FusedInputs {
  std::vector<float> x;
  test::HostTensor nw, w, bias;
};
FusedInputs fused_inputs(Rng& rng, int64_t rows, int64_t k, int64_t m) {
  FusedInputs in;
  in.x = test::round_bf16(test::randn(rng, rows * k, 2.0));
  std::vector<float> nwv = test::randn(rng, k, 0.1);
  for (float& v : nwv) v += 1.0f;
  in.nw = test::make_host(nwv, DType::BF16, {k});
  in.w = test::make_host(test::randn(rng, m * k, 1.0 / std::sqrt(double(k))), DType::BF16, {m, k});
  in.bias = test::make_host(test::randn(rng, m), DType::BF16, {m});
  return in;
}

TEST_P(CudaMatmulFused, MatchesRefOpsInTurn) {
  TF_REQUIRE_CUDA_DEVICE();
  using Epi = MatmulFusion::Epilogue;
  const std::string mode = GetParam();
  test::Backends be(BackendOptions{.gemv = mode});
  struct Kind {
    const char* name;
    bool norm;
    Epi epi;
    bool bias;
    double tol;
  };
  const Kind kinds[] = {{"norm+matmul", true, Epi::Store, true, 8e-3},
                        {"matmul+add", false, Epi::AddTo, false, 8e-3},
                        {"matmul+add (bias)", false, Epi::AddTo, true, 8e-3},
                        {"norm+matmul+swiglu", true, Epi::Swiglu, false, 1.2e-2},
                        {"matmul+swiglu", false, Epi::Swiglu, false, 1.2e-2}};
  for (int32_t rows : {1, 2, 3, 4, 8, 16}) {
    for (int64_t k : {256, 1024}) {
      for (int64_t m : {64, 576}) {
        for (const Kind& kind : kinds) {
          SCOPED_TRACE(std::string(kind.name) + " rows=" + std::to_string(rows) + " k=" + std::to_string(k) +
                       " m=" + std::to_string(m));
          Rng rng(test::seed_of({11, rows, k, m, int64_t(kind.epi), kind.norm, kind.bias}));
          const int64_t m_out = kind.epi == Epi::Swiglu ? m / 2 : m;
          const auto [x, nw, w, bias] = fused_inputs(rng, rows, k, m);
          const std::vector<float> resid = test::round_bf16(test::randn(rng, rows * m_out, 2.0));
          const TensorView none{};
          auto fusion = [&](Backend& b, const TensorView& norm_w) {
            return MatmulFusion{.norm_w = kind.norm ? norm_w : none,
                                .eps = 1e-5f,
                                .h = kind.norm ? b.alloc(b.act_dtype(), {rows, k}) : none,
                                .epilogue = kind.epi,
                                .y = kind.epi != Epi::Store ? b.alloc(b.act_dtype(), {rows, m}) : none};
          };
          // reference: the plain ops in turn (Backend::matmul_fused's default)
          TensorView out_ref = kind.epi == Epi::AddTo ? test::to_device(*be.ref, resid, rows, m_out)
                                                      : be.ref->alloc(DType::F32, {rows, m_out});
          be.ref->matmul_fused(test::to_device(*be.ref, x, rows, k), be.ref->upload(w.view(), DType::BF16),
                               kind.bias ? be.ref->upload(bias.view(), DType::BF16) : none, out_ref,
                               fusion(*be.ref, be.ref->upload(nw.view(), DType::BF16)));
          const std::vector<float> want = test::to_host_f32(*be.ref, out_ref);
          test::GuardedBf16 got(*be.cuda, rows, m_out);
          if (kind.epi == Epi::AddTo) {
            std::vector<uint16_t> h(resid.size());
            for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_bf16(resid[i]);
            be.cuda->copy_from_host(h.data(), got.view());
          }
          be.cuda->matmul_fused(test::to_cuda_bf16(*be.cuda, x, rows, k), be.cuda->upload(w.view(), DType::BF16),
                                kind.bias ? be.cuda->upload(bias.view(), DType::BF16) : none, got.view(),
                                fusion(*be.cuda, be.cuda->upload(nw.view(), DType::BF16)));
          test::expect_close(std::string("matmul_fused ") + kind.name + " (" + mode + ")", got.values(), want,
                             kind.tol, got.guard_intact());
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaMatmulFused, ::testing::Values("cublas", "custom", "auto"));

// matmul_fused with the RoPE/KV epilogue (the decode QKV projection: the GEMV rotates q/k
// and writes k/v to the paged pools itself where it runs, else matmul then rope_kv_write)
// against the reference's ops in turn, for one decode token per sequence at scattered
// positions. Both qkv and the written pool rows are compared: the product and its rounding
// (as norm+matmul, tol 8e-3) plus the rotation and one more rounding to the pool dtype:
// tol 1e-2. Pool elements written by one backend only fail. In mode "auto" also with the
// weights quantized (test::kQuantFormats; they have no cuBLAS path, so the mode does not
// apply to them): the tensor-core kernel's RopeKv tiles at head_dim 64 and 128, and the CUDA-core
// GEMV for W8/FP8 at one row; W4 with groups of 32 rounds its weights to BF16 on the tensor
// cores (test_cuda_quant.cpp), 3e-3 more.
class CudaMatmulRopeKv : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaMatmulRopeKv, MatchesRefOpsInTurn) {
  TF_REQUIRE_CUDA_DEVICE();
  using Epi = MatmulFusion::Epilogue;
  const std::string mode = GetParam();
  constexpr int32_t kBlockSize = 16;
  constexpr int kLayer = 1;
  std::vector<const test::QuantFormat*> formats = {nullptr};  // nullptr: BF16 weights
  if (mode == "auto")
    for (const test::QuantFormat& f : test::kQuantFormats) formats.push_back(&f);
  for (const test::QuantFormat* qf : formats)
  for (DType kv_dtype : {DType::BF16, DType::F16}) {
    for (int32_t rows : {1, 3, 4, 6}) {
      for (bool norm : {true, false}) {
        for (const auto& [nh, nkv] : {std::pair<int64_t, int64_t>{4, 2}, {8, 1}}) {
          for (int64_t hd : {64, 128}) {
            const std::string name = std::string(norm ? "norm+" : "") + "matmul+rope/kv (" + mode +
                                     (qf ? std::string(", ") + qf->name : std::string()) + ")";
            SCOPED_TRACE(name + " kv=" + std::string(dtype_name(kv_dtype)) + " rows=" + std::to_string(rows) + " heads=" +
                         std::to_string(nh) + "/" + std::to_string(nkv) + " head_dim=" + std::to_string(hd));
            Rng rng(test::seed_of({13, int64_t(kv_dtype), rows, norm, nh, nkv, hd}));
            const int64_t k = 256, m = (nh + 2 * nkv) * hd;
            std::vector<int32_t> lens(static_cast<size_t>(rows));
            for (int32_t& len : lens) len = int32_t(rng.uniform_int(1, 300));
            const Tables tables = make_tables(rng, kBlockSize, lens, /*spare=*/3);
            const KvCacheSpec spec{.n_layers = 2, .n_blocks = tables.n_blocks, .block_size = kBlockSize,
                                   .n_kv_heads = nkv, .head_dim = hd, .dtype = kv_dtype};
            const AttentionParams p{.n_heads = nh, .n_kv_heads = nkv, .head_dim = hd,
                                    .scale = float(1.0 / std::sqrt(double(hd)))};
            BatchBuilder builder(kBlockSize, tables.max_blocks);
            std::vector<int32_t> ids(static_cast<size_t>(rows));
            for (int32_t r = 0; r < rows; ++r) {
              ids[size_t(r)] = int32_t(rng.uniform_int(0, 999));
              builder.add(SeqChunk{.ids = ids.data() + r, .n_ids = 1, .start_pos = lens[size_t(r)] - 1,
                                   .blocks = tables.blocks[size_t(r)].data(),
                                   .n_blocks = int32_t(tables.blocks[size_t(r)].size())});
            }
            const Batch batch = builder.take();
            const auto [x, nw, w, bias] = fused_inputs(rng, rows, k, m);
            const std::vector<float> inv_freq_host = make_inv_freq(hd);
            Rng qrng(test::seed_of({14, qf ? int64_t(qf->spec.format) : 0, qf ? qf->spec.group_size : 0, rows, hd}));
            const QuantizedWeight qw = qf ? test::random_quantized(qrng, m, k, qf->spec) : QuantizedWeight{};
            auto weights = [&](Backend& b) {
              return qf ? b.upload(qw.view(), qw.dtype) : b.upload(w.view(), DType::BF16);
            };
            const double extra = qf && qf->spec.format == DType::W4 && qf->spec.group_size % 128 != 0 ? 3e-3 : 0.0;

            test::Backends be(BackendOptions{.gemv = mode});
            test::KvPools pools[2] = {test::KvPools(*be.ref, test::as_host(*be.ref)),
                                      test::KvPools(*be.cuda, dynamic_cast<cuda::CudaBackend&>(*be.cuda))};
            Backend* backends[2] = {be.ref.get(), be.cuda.get()};
            std::vector<float> outs[2];
            for (int ib = 0; ib < 2; ++ib) {
              Backend& b = *backends[ib];
              b.init_kv_cache(spec);
              pools[ib].poison_all();
              b.set_batch(batch);
              TensorView inv_freq = b.alloc(DType::F32, {hd / 2});
              b.copy_from_host(inv_freq_host.data(), inv_freq);
              const TensorView none{};
              const MatmulFusion f{.norm_w = norm ? b.upload(nw.view(), DType::BF16) : none,
                                   .eps = 1e-5f,
                                   .h = norm ? b.alloc(b.act_dtype(), {rows, k}) : none,
                                   .epilogue = Epi::RopeKv,
                                   .rope_layer = kLayer,
                                   .rope = QkRope{.inv_freq = inv_freq},
                                   .attn = p};
              const TensorView xin = ib == 0 ? test::to_device(b, x, rows, k) : test::to_cuda_bf16(b, x, rows, k);
              if (ib == 0) {
                TensorView out = b.alloc(b.act_dtype(), {rows, m});
                b.matmul_fused(xin, weights(b), b.upload(bias.view(), DType::BF16), out, f);
                outs[0] = test::to_host_f32(b, out);
              } else {
                test::GuardedBf16 out(b, rows, m);
                b.matmul_fused(xin, weights(b), b.upload(bias.view(), DType::BF16), out.view(), f);
                EXPECT_TRUE(out.guard_intact()) << "qkv written out of bounds";
                outs[1] = out.values();
              }
            }
            test::expect_close("matmul_fused " + name + " qkv", outs[1], outs[0], 8e-3 + extra, true);
            for (int kv = 0; kv < 2; ++kv) {
              const std::vector<uint8_t> want_b = pools[0].bytes(kLayer, kv), got_b = pools[1].bytes(kLayer, kv);
              std::vector<float> want, got;
              bool same_rows = true;
              for (int64_t i = 0; i < int64_t(want_b.size() / dtype_size(kv_dtype)); ++i) {
                const float wv = load_f32(want_b.data(), kv_dtype, i), gv = load_f32(got_b.data(), kv_dtype, i);
                if (std::isnan(wv) != std::isnan(gv)) same_rows = false;
                if (std::isnan(wv)) continue;
                want.push_back(wv);
                got.push_back(gv);
              }
              EXPECT_TRUE(same_rows) << (kv ? "V" : "K") << " pool: elements written by one backend only";
              EXPECT_EQ(int64_t(want.size()), rows * nkv * hd) << (kv ? "V" : "K") << " pool: elements written";
              test::expect_close("matmul_fused " + name + (kv ? " V pool" : " K pool"), got, want, 1e-2 + extra,
                                 same_rows);
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaMatmulRopeKv, ::testing::Values("cublas", "custom", "auto"));

// A copy of whole rows: bit-exact.
TEST(CudaOps, GatherLogitRows) {
  TF_REQUIRE_CUDA_DEVICE();
  for (int32_t n : kRowSweep) {
    const int64_t d = 256;
    test::Backends be;
    Rng rng(test::seed_of({4, n}));
    const Batch batch = make_batch(rng, split_lens(n), 100);
    const std::vector<float> x = test::round_bf16(test::randn(rng, n * d));
    be.ref->set_batch(batch);
    be.cuda->set_batch(batch);
    TensorView want = be.ref->alloc(DType::F32, {batch.n_out(), d});
    be.ref->gather_logit_rows(test::to_device(*be.ref, x, n, d), want);
    test::GuardedBf16 got(*be.cuda, batch.n_out(), d);
    be.cuda->gather_logit_rows(test::to_cuda_bf16(*be.cuda, x, n, d), got.view());
    const auto r = test::bitwise_equal(got.values(), test::to_host_f32(*be.ref, want));
    EXPECT_TRUE(r) << "n_tokens=" << n;
    EXPECT_TRUE(got.guard_intact());
    test::record("gather_logit_rows", "bit-exact", r ? 0 : 1, 0, r && got.guard_intact());
  }
}

// ---- matmul ---------------------------------------------------------------------------------

// x ~ N(0, 1), w ~ N(0, 1/k), bias ~ N(0, 1), all BF16 values, so every product is exact in
// FP32 and the GEMM's only error is FP32 accumulation: ~sqrt(k) * 2^-24 ~ 1e-6 of the sum's
// natural scale (the root-sum-square of its terms, test::scaled_l2).
//   F32 output (the LM head): scaled L2 <= 1e-4, room for cuBLAS's choice of summation order
//     and tensor-core accumulation; a wrong transpose or leading dimension gives O(1).
//   BF16 output: one rounding of the FP32 result (the bias joins in FP32 through beta = 1,
//     see gemm.cu): rel L2 <= 2^-8 + 1e-6, tol 5e-3.
// Each shape runs with cuBLAS, with the GEMV kernel (rows <= 8; k = 1024 takes its unrolled
// loop) and with the automatic per-shape choice.
class CudaMatmul : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaMatmul, MatchesRef) {
  TF_REQUIRE_CUDA_DEVICE();
  const std::string mode = GetParam();
  test::Backends be(BackendOptions{.gemv = mode});
  const std::string tag = mode == "cublas" ? "" : ", gemv " + mode;
  for (int32_t rows : {1, 2, 7, 8, 64}) {
    for (int64_t k : {64, 256, 1024}) {
      for (int64_t m : {64, 576}) {
        for (bool with_bias : {false, true}) {
          for (DType out_dtype : {DType::BF16, DType::F32}) {
            SCOPED_TRACE("rows=" + std::to_string(rows) + " k=" + std::to_string(k) + " m=" + std::to_string(m) +
                         " bias=" + std::to_string(with_bias) + " out=" + std::string(dtype_name(out_dtype)));
            Rng rng(test::seed_of({5, rows, k, m, with_bias, int64_t(out_dtype)}));
            const std::vector<float> x = test::round_bf16(test::randn(rng, rows * k));
            const test::HostTensor w = test::make_host(test::randn(rng, m * k, 1.0 / std::sqrt(double(k))),
                                                       DType::BF16, {m, k});
            const test::HostTensor bias = test::make_host(test::randn(rng, m), DType::BF16, {m});
            const TensorView none{};
            TensorView want = be.ref->alloc(DType::F32, {rows, m});
            be.ref->matmul(test::to_device(*be.ref, x, rows, k), be.ref->upload(w.view(), DType::BF16),
                           with_bias ? be.ref->upload(bias.view(), DType::BF16) : none, want);
            const TensorView w_cuda = be.cuda->upload(w.view(), DType::BF16);
            const TensorView b_cuda = with_bias ? be.cuda->upload(bias.view(), DType::BF16) : none;
            const TensorView x_cuda = test::to_cuda_bf16(*be.cuda, x, rows, k);
            const std::vector<float> want_v = test::to_host_f32(*be.ref, want);
            if (out_dtype == DType::F32) {
              test::GuardedOut got(*be.cuda, rows, m);
              TensorView got_view = got.view();
              got_view.device = Device::Cuda;  // GuardedOut makes a plain (host-flagged) view
              be.cuda->matmul(x_cuda, w_cuda, b_cuda, got_view);
              // natural scale of each output: root-sum-square of its terms
              const std::vector<float> wf = w.to_f32(), bf = bias.to_f32();
              std::vector<double> scale(size_t(rows * m));
              for (int64_t r = 0; r < rows; ++r)
                for (int64_t j = 0; j < m; ++j) {
                  double s2 = with_bias ? double(bf[size_t(j)]) * bf[size_t(j)] : 0.0;
                  for (int64_t i = 0; i < k; ++i) {
                    const double t = double(x[size_t(r * k + i)]) * wf[size_t(j * k + i)];
                    s2 += t * t;
                  }
                  scale[size_t(r * m + j)] = std::sqrt(s2);
                }
              const std::vector<float> g = got.values();
              const auto ok = test::close_scaled_l2(g, want_v, scale, 1e-4);
              EXPECT_TRUE(ok);
              EXPECT_TRUE(got.guard_intact());
              test::record("matmul (F32 out" + tag + ")", "scaled L2", test::scaled_l2(g, want_v, scale), 1e-4,
                           ok && got.guard_intact());
            } else {
              test::GuardedBf16 got(*be.cuda, rows, m);
              be.cuda->matmul(x_cuda, w_cuda, b_cuda, got.view());
              test::expect_close("matmul (BF16 out" + tag + ")", got.values(), want_v, 5e-3, got.guard_intact());
            }
            be.cuda->synchronize();
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaMatmul, ::testing::Values("cublas", "custom", "auto"));

// ---- greedy sampling ------------------------------------------------------------------------

// argmax_rows against the host backend's: exact ids, including planted ties (lowest id wins)
// and rows whose maximum sits at the very start or end.
TEST(CudaOps, ArgmaxRows) {
  TF_REQUIRE_CUDA_DEVICE();
  test::Backends be;
  for (int64_t n_vocab : {1, 100, 5000, 128256}) {
    for (int64_t rows : {1, 5, 33}) {
      Rng rng(test::seed_of({9, n_vocab, rows}));
      std::vector<float> x = test::randn(rng, rows * n_vocab);
      for (int64_t r = 0; r < rows; ++r) {
        float* row = x.data() + r * n_vocab;
        const int64_t kind = r % 4;
        if (kind == 1 && n_vocab > 1) row[n_vocab - 1] = 100.0f;
        if (kind == 2) row[0] = 100.0f;
        if (kind == 3 && n_vocab > 10) row[7] = row[n_vocab / 2] = row[n_vocab - 3] = 50.0f;  // tie: 7 wins
      }
      TensorView lg_ref = test::to_device(*be.ref, x, rows, n_vocab);
      TensorView ids_ref = be.ref->alloc(DType::I32, {rows});
      be.ref->argmax_rows(lg_ref, ids_ref);
      TensorView lg = be.cuda->alloc(DType::F32, {rows, n_vocab});
      be.cuda->copy_from_host(x.data(), lg);
      TensorView ids = be.cuda->alloc(DType::I32, {rows});
      be.cuda->argmax_rows(lg, ids);
      const std::vector<int32_t> want(ids_ref.as<int32_t>(), ids_ref.as<int32_t>() + rows);
      std::vector<int32_t> got(want.size());
      be.cuda->copy_to_host(ids, got.data());
      EXPECT_EQ(got, want) << "n_vocab=" << n_vocab << " rows=" << rows;
      if (n_vocab > 10 && rows > 3) {
        EXPECT_EQ(got[3], 7) << "ties go to the lowest id";
      }
      test::record("argmax_rows", "wrong ids", got != want, 0, got == want);
    }
  }
}

// sample_rows against the host Sampler's distribution. One logits row (N(0, 2) logits, 5,000
// ids) is repeated kDraws times with stratified uniforms u_j = (j + 0.5) / kDraws; an inverse
// CDF then picks token i for a share of the u_j equal to its probability, so its count must
// be kDraws * p_i within 1 (plus 1 for FP32 mass sums), for every token at once. The one
// token on the top-p boundary may be in or out where the host and the GPU sum the mass in a
// different order; it is exempt. Greedy rows (temperature 0) must give the argmax.
TEST(CudaOps, SampleRowsMatchesHostDistribution) {
  TF_REQUIRE_CUDA_DEVICE();
  test::Backends be;
  constexpr int64_t kVocab = 5000, kDraws = 4000;
  struct Case {
    SamplingParams p;
    const char* name;
  };
  const Case cases[] = {
      {{.temperature = 1.0f}, "T=1"},
      {{.temperature = 0.7f, .top_k = 50}, "T=0.7 top_k=50"},
      {{.temperature = 1.3f, .top_p = 0.9f}, "T=1.3 top_p=0.9"},
      {{.temperature = 1.0f, .min_p = 0.05f}, "T=1 min_p=0.05"},
      {{.temperature = 0.8f, .top_k = 200, .top_p = 0.8f, .min_p = 0.01f}, "T=0.8 top_k=200 top_p=0.8 min_p=0.01"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Rng rng(test::seed_of({11, c.p.top_k, int64_t(c.p.top_p * 100)}));
    const std::vector<float> row = test::randn(rng, kVocab, 2.0);
    const std::vector<float> want = Sampler(c.p).distribution(row, {});
    std::vector<float> all(static_cast<size_t>(kDraws * kVocab));
    std::vector<Backend::SampleParams> sp(static_cast<size_t>(kDraws));
    for (int64_t j = 0; j < kDraws; ++j) {
      std::copy(row.begin(), row.end(), all.begin() + j * kVocab);
      sp[size_t(j)] = {.temperature = c.p.temperature, .top_k = c.p.top_k, .top_p = c.p.top_p, .min_p = c.p.min_p,
                       .u = float((double(j) + 0.5) / double(kDraws))};
    }
    TensorView lg = be.cuda->alloc(DType::F32, {kDraws, kVocab});
    be.cuda->copy_from_host(all.data(), lg);
    TensorView ids = be.cuda->alloc(DType::I32, {kDraws});
    ASSERT_TRUE(be.cuda->sample_rows(lg, sp, ids));
    std::vector<int32_t> got(static_cast<size_t>(kDraws));
    be.cuda->copy_to_host(ids, got.data());
    std::vector<int64_t> count(static_cast<size_t>(kVocab), 0);
    for (int32_t id : got) {
      ASSERT_TRUE(id >= 0 && id < kVocab);
      ++count[size_t(id)];
    }
    // the kept token with the smallest probability: the top-p boundary
    int32_t boundary = -1;
    for (int32_t i = 0; i < kVocab; ++i)
      if (want[size_t(i)] > 0 && (boundary < 0 || want[size_t(i)] < want[size_t(boundary)])) boundary = i;
    int64_t worst = 0;
    bool ok = true;
    for (int32_t i = 0; i < kVocab; ++i) {
      const double expected = double(kDraws) * want[size_t(i)];
      const double dev = std::abs(double(count[size_t(i)]) - expected);
      if (i == boundary && c.p.top_p < 1.0f) continue;
      worst = std::max<int64_t>(worst, int64_t(std::ceil(dev)));
      if (dev > 2.0) {
        ok = false;
        ADD_FAILURE() << "token " << i << ": " << count[size_t(i)] << " draws, expected " << expected;
      }
    }
    test::record("sample_rows (stratified)", "max count dev", double(worst), 2, ok);
  }
  // greedy rows next to sampled ones
  Rng rng(test::seed_of({12}));
  const std::vector<float> x = test::randn(rng, 3 * kVocab);
  TensorView lg = be.cuda->alloc(DType::F32, {3, kVocab});
  be.cuda->copy_from_host(x.data(), lg);
  TensorView ids = be.cuda->alloc(DType::I32, {3});
  ASSERT_TRUE(be.cuda->sample_rows(lg, {{}, {.temperature = 1.0f, .u = 0.5f}, {}}, ids));
  std::vector<int32_t> got(3);
  be.cuda->copy_to_host(ids, got.data());
  EXPECT_EQ(got[0], argmax({x.data(), size_t(kVocab)}));
  EXPECT_EQ(got[2], argmax({x.data() + 2 * kVocab, size_t(kVocab)}));
  test::record("sample_rows (greedy rows)", "wrong ids",
               (got[0] != argmax({x.data(), size_t(kVocab)})) + (got[2] != argmax({x.data() + 2 * kVocab, size_t(kVocab)})),
               0, got[0] == argmax({x.data(), size_t(kVocab)}) && got[2] == argmax({x.data() + 2 * kVocab, size_t(kVocab)}));
}

// ---- rope_kv_write + paged attention --------------------------------------------------------

// The shape of tests/backend/test_ops_attention.cpp's history (other lengths); kLongSteps
// (attention_history.h) reaches past one key tile of every kernel.
const Steps kSteps = {
    // prefill of four sequences (one of a single token)
    {{0, 9}, {1, 16}, {2, 1}, {3, 4}},
    // chunked prefill after cached prefixes (0, 1, 3), a new sequence (5), a decode (2)
    {{3, 17}, {2, 3}, {5, 1}, {0, 5}, {1, 21}},
    // decode: one token per sequence; sequence 4 starts with its first token
    {{4, 1}, {0, 1}, {1, 1}, {2, 1}, {3, 1}, {5, 1}},
    {{2, 1}, {3, 1}, {5, 1}, {4, 1}, {1, 1}, {0, 1}},
};
// Verification-shaped steps: prefills (one past a 64-key tile), then chunks of 2 to 8 rows
// beside one-token decodes, as speculative verifications of 1 to 7 proposals run. In "auto"
// mode every chunk here of up to kDecodeChunkMaxRows rows that the tiled kernel does not take
// runs on the decode kernel, one item per row, each row seeing the chunk's rows before it.
const Steps kShortChunkSteps = {
    {{0, 40}, {1, 9}, {2, 70}, {3, 1}},
    {{0, 5}, {1, 2}, {2, 8}, {3, 3}},
    {{0, 1}, {1, 7}, {2, 4}, {3, 6}},
    {{0, 3}, {1, 3}, {2, 3}, {3, 3}},
};
struct AttnCase {
  const Steps* steps = &kSteps;
  int32_t block_size = 16;
  int64_t n_heads = 4, n_kv_heads = 4, head_dim = 64, sliding_window = 0;
  DType kv_dtype = DType::BF16;
  int layer = 0;
  std::string attention = "auto";  // prefill chunks: plain or tiled (flash) kernel
  bool decode_mma = true;          // decodes: tensor-core kernel (BF16, INT8, FP8 pools) or the CUDA-core one
  int decode_splits = 0;           // key splits per decoded sequence (0: the backend's choice)
  bool decode_cluster = false;     // tensor-core kernel: splits merged in a cluster, else by the combine kernel
  bool decode_early_keys = true;   // tensor-core kernel: metadata and older keys before griddepcontrol.wait
  std::string str() const {
    return std::string(steps == &kLongSteps ? "long " : steps == &kShortChunkSteps ? "short chunks " : "") +
           "attention=" + attention +
           (decode_mma ? "" : " decode=cuda-cores") +
           (decode_splits ? " splits=" + std::to_string(decode_splits) : "") +
           (decode_cluster ? " cluster" : "") + (decode_early_keys ? "" : " no-early-keys") +
           " block_size=" + std::to_string(block_size) +
           " heads=" + std::to_string(n_heads) + "/" + std::to_string(n_kv_heads) +
           " head_dim=" + std::to_string(head_dim) + " window=" + std::to_string(sliding_window) +
           " kv=" + std::string(dtype_name(kv_dtype)) + " layer=" + std::to_string(layer);
  }
};

// Tolerances, given identical BF16 inputs:
//   rotated qkv: q/k rotated in FP32 (sincosf, <= 2 ulp) vs double, then one BF16 rounding:
//     rel L2 <= 2^-8 + 1e-6; tol 4e-3. (V is copied: exact.)
//   pools: both backends round values that differ by ~1e-7 relative to the pool dtype, so a
//     value next to a rounding boundary may land on the neighbouring storage value: each
//     element within one storage ulp, and at most 1 + 1% of the written elements different
//     (expected: ~1e-4 of them; truncating instead of rounding flips half of them).
//   attention, from identical rotated q and identical pools: FP32 scores, exp and sums over
//     <= 322 keys (~1e-6 relative) and one BF16 rounding of the output: tol 5e-3. A wrong key
//     range, GQA mapping or block lookup averages other keys: errors of 1e-2 or more.
//     The tiled (flash) kernel also rounds the softmax weights, and F16/F32/INT8/FP8 pool values,
//     to BF16 for its tensor-core products, and the tensor-core decode kernel rounds the weights
//     (times V's row scale for INT8/FP8 pools): ~2^-9 relative per term, averaging over the
//     keys, so they are held to the same tolerance.
constexpr double kRopeTol = 4e-3, kAttnTol = 5e-3, kFlipFraction = 0.01;

::testing::AssertionResult pools_match(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                                       DType dtype, double* flip_fraction) {
  const int64_t n = int64_t(want.size() / dtype_size(dtype));
  int64_t flips = 0, written = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float gv = load_f32(got.data(), dtype, i), wv = load_f32(want.data(), dtype, i);
    if (std::isnan(gv) != std::isnan(wv))
      return ::testing::AssertionFailure() << (std::isnan(wv) ? "element written only by CUDA" : "element not written by CUDA")
                                           << " at " << i << ": got " << gv << " want " << wv;
    if (std::isnan(wv)) continue;
    ++written;
    const double bound = std::max(test::ulp_of(dtype, gv), test::ulp_of(dtype, wv)) + 1e-6;
    if (std::abs(double(gv) - double(wv)) > bound)
      return ::testing::AssertionFailure() << "element " << i << ": got " << gv << " want " << wv
                                           << " (more than one storage ulp apart)";
    flips += gv != wv;
  }
  *flip_fraction = written ? double(flips) / double(written) : 0.0;
  if (double(flips) > 1 + kFlipFraction * double(written))
    return ::testing::AssertionFailure() << flips << " of " << written << " elements differ by one ulp";
  return ::testing::AssertionSuccess();
}

// I8 and FP8 pools: rows written by both (scale not NaN) must have scales equal up to the
// FP32 rotation's ~1e-7 (tol 1e-5 relative) and codes within one step, with at most 1 + 1% of
// the codes one step apart (a value next to a rounding boundary); rows written by one
// backend only fail.
::testing::AssertionResult scaled_pools_match(DType dtype, const std::vector<uint8_t>& got,
                                              const std::vector<uint8_t>& want, const std::vector<float>& got_scale,
                                              const std::vector<float>& want_scale, int64_t head_dim,
                                              double* flip_fraction) {
  int64_t flips = 0, written = 0;
  for (size_t r = 0; r < want_scale.size(); ++r) {
    const float gs = got_scale[r], ws = want_scale[r];
    if (std::isnan(gs) != std::isnan(ws))
      return ::testing::AssertionFailure() << "row " << r << (std::isnan(ws) ? " written only by CUDA" : " not written by CUDA");
    if (std::isnan(ws)) continue;
    if (std::abs(double(gs) - double(ws)) > 1e-5 * std::abs(double(ws)))
      return ::testing::AssertionFailure() << "row " << r << ": scale " << gs << " want " << ws;
    for (int64_t d = 0; d < head_dim; ++d) {
      const int gv = test::kv_code_ordinal(dtype, got[r * size_t(head_dim) + size_t(d)]),
                wv = test::kv_code_ordinal(dtype, want[r * size_t(head_dim) + size_t(d)]);
      if (std::abs(gv - wv) > 1)
        return ::testing::AssertionFailure() << "row " << r << " dim " << d << ": " << gv << " want " << wv;
      flips += gv != wv;
      ++written;
    }
  }
  *flip_fraction = written ? double(flips) / double(written) : 0.0;
  if (double(flips) > 1 + kFlipFraction * double(written))
    return ::testing::AssertionFailure() << flips << " of " << written << " codes differ by one";
  return ::testing::AssertionSuccess();
}

// The reference backend's side of a case, step by step: its rotated qkv, pools and attention
// output depend only on the case's data (the seed's fields), not on the CUDA kernels a variant
// takes, so consecutive variants of one case compute them once (the host reference is most of
// a long-context case's time).
struct RefStep {
  std::vector<float> rotated, q_in, out;  // q_in: rotated rounded to BF16, both sides' attention input
  std::vector<uint8_t> bytes[2][2];  // [layer][K, V]
  std::vector<float> scales[2][2];   // 8-bit pools
};
struct RefCache {
  uint64_t seed = 0;           // the case's data
  std::vector<RefStep> steps;  // complete when one per step of the case
};
RefCache& ref_cache() {
  static RefCache cache;
  return cache;
}

void run_attn_case(const AttnCase& c) {
  SCOPED_TRACE(c.str());
  const uint64_t seed = test::seed_of({6, c.block_size, c.n_heads, c.n_kv_heads, c.head_dim, c.sliding_window,
                                       int64_t(c.kv_dtype), c.layer, c.steps == &kLongSteps,
                                       c.steps == &kShortChunkSteps});
  Rng rng(seed);
  const Steps& steps = *c.steps;
  const Tables tables = make_tables(rng, c.block_size, seq_lengths(steps), /*spare=*/5);
  const KvCacheSpec spec{.n_layers = 2, .n_blocks = tables.n_blocks, .block_size = c.block_size,
                         .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim, .dtype = c.kv_dtype};
  const AttentionParams p{.n_heads = c.n_heads, .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim,
                          .scale = float(1.0 / std::sqrt(double(c.head_dim))), .sliding_window = c.sliding_window};
  const int64_t row = (c.n_heads + 2 * c.n_kv_heads) * c.head_dim;
  const std::vector<float> inv_freq_host = make_inv_freq(c.head_dim);

  test::Backends be(BackendOptions{.attention = c.attention, .decode_mma = c.decode_mma,
                                   .decode_cluster = c.decode_cluster, .decode_early_keys = c.decode_early_keys,
                                   .decode_splits = c.decode_splits});
  test::KvPools pools[2] = {test::KvPools(*be.ref, test::as_host(*be.ref)),
                            test::KvPools(*be.cuda, dynamic_cast<cuda::CudaBackend&>(*be.cuda))};
  TensorView inv_freq[2];
  Backend* backends[2] = {be.ref.get(), be.cuda.get()};
  for (int ib = 0; ib < 2; ++ib) {
    backends[ib]->init_kv_cache(spec);
    pools[ib].poison_all();
    inv_freq[ib] = backends[ib]->alloc(DType::F32, {c.head_dim / 2});
    backends[ib]->copy_from_host(inv_freq_host.data(), inv_freq[ib]);
  }

  RefCache& cache = ref_cache();
  const bool cached = cache.seed == seed && cache.steps.size() == steps.size();
  if (!cached) cache = RefCache{.seed = seed, .steps = {}};

  std::vector<int32_t> n_computed(tables.blocks.size(), 0);
  std::set<int32_t> dropped;
  for (size_t step = 0; step < steps.size(); ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    BatchBuilder builder(c.block_size, tables.max_blocks);
    for (const Chunk& ch : steps[step]) {
      const int32_t start = n_computed[size_t(ch.seq)];
      std::vector<int32_t> blocks = tables.blocks[size_t(ch.seq)];
      blocks.resize(size_t(ceil_div(start + ch.n, c.block_size)));
      if (c.sliding_window > 0) {
        const int64_t first_key = std::max<int64_t>(0, start - c.sliding_window + 1);
        for (size_t b = 0; b < blocks.size(); ++b) {
          if (int64_t(b + 1) * c.block_size > first_key) break;
          if (dropped.insert(blocks[b]).second)
            for (auto& pl : pools) pl.poison_block(blocks[b]);
          blocks[b] = -1;
        }
      }
      std::vector<int32_t> ids(size_t(ch.n));
      for (int32_t& id : ids) id = int32_t(rng.uniform_int(0, 999));
      builder.add(SeqChunk{.ids = ids.data(), .n_ids = ch.n, .start_pos = start, .blocks = blocks.data(),
                           .n_blocks = int32_t(blocks.size())});
      n_computed[size_t(ch.seq)] += ch.n;
    }
    const Batch batch = builder.take();
    const int64_t n = batch.n_tokens();
    const std::vector<float> qkv_host = test::round_bf16(test::randn(rng, n * row));

    // ---- rope_kv_write
    if (!cached) {
      RefStep& rs = cache.steps.emplace_back();
      be.ref->set_batch(batch);
      TensorView qkv_ref = test::to_device(*be.ref, qkv_host, n, row);
      be.ref->rope_kv_write(c.layer, qkv_ref, QkRope{.inv_freq = inv_freq[0]}, p);
      rs.rotated = test::to_host_f32(*be.ref, qkv_ref);
      for (int il = 0; il < 2; ++il)
        for (int kv = 0; kv < 2; ++kv) {
          rs.bytes[il][kv] = pools[0].bytes(il, kv);
          if (kv_dtype_scaled(c.kv_dtype)) rs.scales[il][kv] = pools[0].scales(il, kv);
        }
      rs.q_in = test::round_bf16(rs.rotated);
      be.ref->copy_from_host(rs.q_in.data(), qkv_ref);
      TensorView out_ref = be.ref->alloc(DType::F32, {n, c.n_heads * c.head_dim});
      be.ref->attention(c.layer, qkv_ref, p, out_ref);
      rs.out = test::to_host_f32(*be.ref, out_ref);
    }
    const RefStep& rs = cache.steps[step];
    be.cuda->set_batch(batch);
    TensorView qkv_cuda = test::to_cuda_bf16(*be.cuda, qkv_host, n, row);
    be.cuda->rope_kv_write(c.layer, qkv_cuda, QkRope{.inv_freq = inv_freq[1]}, p);
    test::expect_close("rope_kv_write qkv", test::from_cuda(*be.cuda, qkv_cuda), rs.rotated, kRopeTol, true);
    for (int il = 0; il < 2; ++il) {
      for (int kv = 0; kv < 2; ++kv) {
        const std::vector<uint8_t>& want = rs.bytes[il][kv];
        const std::vector<uint8_t> got = pools[1].bytes(il, kv);
        double flip_fraction = 0;
        if (kv_dtype_scaled(c.kv_dtype)) {
          const std::vector<float>& want_scale = rs.scales[il][kv];
          const auto ok = scaled_pools_match(c.kv_dtype, got, want, pools[1].scales(il, kv), want_scale, c.head_dim,
                                             &flip_fraction);
          EXPECT_TRUE(ok) << (kv ? "V" : "K") << " pool of layer " << il;
          test::record("rope_kv_write pools (" + std::string(dtype_name(c.kv_dtype)) + ")", "1-step flips",
                       flip_fraction, kFlipFraction, bool(ok));
          pools[1].set_scales(il, kv, want_scale);
        } else {
          const auto ok = pools_match(got, want, c.kv_dtype, &flip_fraction);
          EXPECT_TRUE(ok) << (kv ? "V" : "K") << " pool of layer " << il;
          test::record("rope_kv_write pools", "1-ulp flips", flip_fraction, kFlipFraction, bool(ok));
        }
        pools[1].set_bytes(il, kv, want);  // attention is compared from identical pools
      }
    }

    // ---- attention, from the reference's rotated qkv rounded to BF16 on both sides
    const std::vector<float>& q_in = rs.q_in;
    const TensorView q_cuda = test::to_cuda_bf16(*be.cuda, q_in, n, row);
    test::GuardedBf16 out(*be.cuda, n, c.n_heads * c.head_dim);
    be.cuda->attention(c.layer, q_cuda, p, out.view());
    test::expect_close("attention (" + c.attention + ")", out.values(), rs.out, kAttnTol, out.guard_intact());
    EXPECT_TRUE(test::bitwise_equal(test::from_cuda(*be.cuda, q_cuda), q_in)) << "attention changed qkv";
  }
}

// Pools the tensor-core decode kernel reads (the others take the CUDA-core kernel only).
bool has_decode_mma(DType kv_dtype) { return kv_dtype != DType::F16; }

using HeadsParam = std::pair<int64_t, int64_t>;
class CudaAttention : public ::testing::TestWithParam<std::tuple<DType, HeadsParam>> {};

TEST_P(CudaAttention, MatchesRef) {
  TF_REQUIRE_CUDA_DEVICE();
  const auto [kv_dtype, heads] = GetParam();
  // The kernel choices innermost: they share the reference's side (run_attn_case).
  for (int32_t block_size : {1, 16}) {
    for (int64_t head_dim : {64, 128, 256}) {  // 256: Gemma 3
      for (int64_t window : {0, 5}) {
        for (const char* attention : {"plain", "flash"}) {
          // BF16, INT8 and FP8 pools: decodes on the tensor-core kernel, and (with the plain
          // prefill) on the CUDA-core kernel as well; F16 pools always take the CUDA-core kernel.
          for (bool mma : {true, false}) {
            if (!mma && (!has_decode_mma(kv_dtype) || std::string(attention) != "plain")) continue;
            run_attn_case(AttnCase{.block_size = block_size, .n_heads = heads.first, .n_kv_heads = heads.second,
                                   .head_dim = head_dim, .sliding_window = window, .kv_dtype = kv_dtype,
                                   .layer = int((block_size + head_dim / 64 + window) % 2), .attention = attention,
                                   .decode_mma = mma});
          }
        }
      }
    }
  }
}

// Several key tiles per query (contexts up to 322 keys, the kernel's tile is 128), head_dim 128
// and 256 (Gemma 3: the WMMA tiled kernel for every pool).
TEST_P(CudaAttention, MatchesRefLongContext) {
  TF_REQUIRE_CUDA_DEVICE();
  const auto [kv_dtype, heads] = GetParam();
  for (int64_t head_dim : {256, 128}) {  // 128 with window 100 last: the splits cases below share it
    for (int64_t window : {0, 100}) {
      for (const char* attention : {"plain", "flash"}) {
        for (bool mma : {true, false}) {
          if (!mma && (!has_decode_mma(kv_dtype) || std::string(attention) != "plain")) continue;
          run_attn_case(AttnCase{.steps = &kLongSteps, .block_size = 16, .n_heads = heads.first,
                                 .n_kv_heads = heads.second, .head_dim = head_dim, .sliding_window = window,
                                 .kv_dtype = kv_dtype, .layer = int(window / 100), .attention = attention,
                                 .decode_mma = mma});
        }
      }
    }
  }
  // Few splits, so one split holds many key tiles (up to 322 keys: six tiles of the
  // tensor-core kernel, double-buffered) and a split starts mid-block; 3 splits merged in a
  // cluster and by the combine kernel (3 first: its data is the last case's above).
  for (int splits : {3, 1}) {
    for (bool cluster : {true, false}) {
      if (!cluster && splits != 3) continue;
      run_attn_case(AttnCase{.steps = &kLongSteps, .block_size = 16, .n_heads = heads.first,
                             .n_kv_heads = heads.second, .head_dim = 128, .sliding_window = splits == 3 ? 100 : 0,
                             .kv_dtype = kv_dtype, .layer = 1, .decode_splits = splits, .decode_cluster = cluster});
    }
  }
}

// Chunks of 2-8 rows (speculative verifications) in "auto" mode: on the decode kernel where
// the tiled kernel does not take them (BF16 pools at head_dim 64 and 128: 2-7 rows; other
// pools, and head_dim 256: 2-8), with the backend's splits and with 3 (a row's split range ends at its own position),
// the 3 also merged in a cluster on the tensor-core kernel; the backend's splits also with the
// tensor-core kernel's reads all after griddepcontrol.wait (no-decode-early-keys).
TEST_P(CudaAttention, MatchesRefShortChunks) {
  TF_REQUIRE_CUDA_DEVICE();
  const auto [kv_dtype, heads] = GetParam();
  for (int64_t head_dim : {64, 128, 256}) {
    for (int64_t window : {0, 5}) {
      for (bool mma : {true, false}) {
        if (!mma && !has_decode_mma(kv_dtype)) continue;
        for (int splits : {0, 3}) {
          for (bool cluster : {false, true}) {  // 3 splits: some of a short row's are empty
            if (cluster && (!mma || splits != 3)) continue;
            for (bool early : {true, false}) {  // the tensor-core kernel's reads all after the wait, once
              if (!early && (!mma || splits != 0)) continue;
              run_attn_case(AttnCase{.steps = &kShortChunkSteps, .block_size = 16, .n_heads = heads.first,
                                     .n_kv_heads = heads.second, .head_dim = head_dim, .sliding_window = window,
                                     .kv_dtype = kv_dtype, .layer = int(window > 0), .attention = "auto",
                                     .decode_mma = mma, .decode_splits = splits, .decode_cluster = cluster,
                                     .decode_early_keys = early});
            }
          }
        }
      }
    }
  }
}

std::string attn_name(const ::testing::TestParamInfo<std::tuple<DType, HeadsParam>>& info) {
  const auto [dtype, heads] = info.param;
  return "KV" + std::string(dtype_name(dtype)) + "_H" + std::to_string(heads.first) + "_KVH" +
         std::to_string(heads.second);
}

// heads: MHA 4/4, GQA 4/2 and 8/2, MQA 4/1 and 8/1 (the decode kernel's groups 1, 2, 4, 8),
// and 16/1 (a group the decode kernel does not cover: decodes take the plain kernel); KV
// pool BF16, F16, I8 and FP8.
INSTANTIATE_TEST_SUITE_P(Ops, CudaAttention,
                         ::testing::Combine(::testing::Values(DType::BF16, DType::F16, DType::I8, DType::FP8),
                                            ::testing::Values(HeadsParam{4, 4}, HeadsParam{4, 2}, HeadsParam{8, 2},
                                                              HeadsParam{4, 1}, HeadsParam{8, 1}, HeadsParam{16, 1})),
                         attn_name);

// ---- CUDA Graphs ------------------------------------------------------------------------------

// tiny-main's decode steps through run_forward on two CUDA backends: one records and replays
// (after one eager warm-up per key), the other drops every recording before each step so it
// always runs the same padded shapes eagerly. Both use the GEMV kernel (not the timed choice,
// which may differ between two backends), so the logits must agree bit for bit. Four
// sequences, then three (the same bucket of 4: the recording made for four is replayed with
// a padding row), across a block boundary (a new block-table entry). Padding rows write to
// the pool's padding block only: the real blocks no sequence owns keep the NaN they were
// set to.
TEST(CudaGraphs, ReplayEqualsEagerBitwise) {
  TF_REQUIRE_CUDA_DEVICE();
  test::RecordedAndEager two(std::string(TF_SOURCE_DIR) + "/models/tiny-main", 64);
  const int64_t n_vocab = two.model[0]->config().n_vocab;
  cuda::CudaBackend& rec = two.recording();
  const test::KvPools pools(*two.be[0], rec);
  pools.poison_all();
  Rng rng(test::seed_of({10}));
  const int32_t lens[4] = {20, 33, 7, 12};
  std::vector<std::vector<int32_t>> seqs(4), tables(4);
  int32_t next_block = 0;
  for (int s = 0; s < 4; ++s) {
    for (int32_t i = 0; i < lens[s]; ++i) seqs[size_t(s)].push_back(int32_t(rng.uniform_int(0, n_vocab - 1)));
    for (int b = 0; b < 4; ++b) tables[size_t(s)].push_back(next_block++);  // 64 tokens each
  }
  auto run = [&](int i, const Batch& batch) { return two.run(i, batch); };
  // prefill (not a decode batch: eager on both)
  {
    BatchBuilder bb(16, 4);
    for (int s = 0; s < 4; ++s)
      bb.add(SeqChunk{.ids = seqs[size_t(s)].data(), .n_ids = lens[s], .start_pos = 0,
                      .blocks = tables[size_t(s)].data(), .n_blocks = 4});
    const Batch batch = bb.take();
    EXPECT_TRUE(test::bitwise_equal(run(0, batch), run(1, batch)));
  }
  int n_steps_equal = 0;
  for (int step = 0; step < 12; ++step) {
    const int n_seqs = step < 6 ? 4 : 3;
    BatchBuilder bb(16, 4);
    std::vector<int32_t> last(4);
    for (int s = 0; s < n_seqs; ++s) {
      const auto& q = seqs[size_t(s)];
      last[size_t(s)] = q.back();
      bb.add(SeqChunk{.ids = &last[size_t(s)], .n_ids = 1, .start_pos = int32_t(q.size()) - 1,
                      .blocks = tables[size_t(s)].data(), .n_blocks = 4});
    }
    const Batch batch = bb.take();
    const std::vector<float> got = run(0, batch), want = run(1, batch);
    const auto eq = test::bitwise_equal(got, want);
    EXPECT_TRUE(eq) << "decode step " << step;
    n_steps_equal += bool(eq);
    for (int s = 0; s < n_seqs; ++s)
      seqs[size_t(s)].push_back(argmax({want.data() + s * n_vocab, size_t(n_vocab)}));
  }
  EXPECT_GE(rec.n_graphs(), 1) << "no decode step was recorded";
  // blocks 16..63 belong to nobody
  const KvCacheSpec& spec = two.be[0]->kv_spec();
  const size_t block_bytes = size_t(spec.n_kv_heads * spec.block_size * spec.head_dim) * 2;
  bool untouched = true;
  for (int il = 0; il < int(spec.n_layers); ++il)
    for (int kv = 0; kv < 2; ++kv) {
      const std::vector<uint8_t> b = pools.bytes(il, kv);
      for (size_t i = 16 * block_bytes; i < b.size(); i += 2) untouched &= b[i] == 0xc1 && b[i + 1] == 0x7f;
    }
  EXPECT_TRUE(untouched) << "a padding row wrote into a real KV block";
  test::record("graphs: replay vs eager", "unequal steps", 12 - n_steps_equal, 0, n_steps_equal == 12);
}
}  // namespace

// ---- the report -----------------------------------------------------------------------------

namespace test {
namespace {

struct OpRow {
  std::string metric;
  int n_cases = 0, n_failed = 0;
  double worst = 0, tol = 0;
};
std::map<std::string, OpRow>& rows() {
  static std::map<std::string, OpRow> r;
  return r;
}

}  // namespace

void record(const std::string& op, const std::string& metric, double err, double tol, bool passed) {
  OpRow& r = rows()[op];
  r.metric = metric;
  r.tol = tol;
  ++r.n_cases;
  r.n_failed += !passed;
  r.worst = std::max(r.worst, err);
}

bool have_cuda_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

void print_report() {
  std::printf("\n%-28s %-14s %7s %7s %12s %12s  %s\n", "op", "metric", "cases", "failed", "worst", "tolerance",
              "result");
  if (rows().empty()) std::printf("(nothing ran%s)\n", have_cuda_device() ? "" : ": no usable CUDA device");
  for (const auto& [op, r] : rows())
    std::printf("%-28s %-14s %7d %7d %12.3g %12.3g  %s\n", op.c_str(), r.metric.c_str(), r.n_cases, r.n_failed,
                r.worst, r.tol, r.n_failed ? "FAIL" : "pass");
}

}  // namespace test
}  // namespace tf

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  tf::test::print_report();
  return rc;
}

// Row-wise ops of the CPU backend against the reference: swiglu, embedding and
// gather_logit_rows. The last two only move (and widen) data, so they must match exactly,
// both each other and a host-side computation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "core/batch.h"
#include "op_test_util.h"

namespace tf {
namespace {

using test::BackendPair;
using test::GuardedOut;
using test::HostTensor;
using test::Rng;

// A batch of sequences with the given token ids, all starting at position 0, each with its
// own blocks (block size 16); `logits` per sequence: 0 none, 1 last token, 2 every token.
Batch make_batch(const std::vector<std::vector<int32_t>>& seqs, const std::vector<int>& logits) {
  const int32_t bs = 16, max_blocks = 4;
  BatchBuilder builder(bs, max_blocks);
  std::vector<int32_t> blocks(static_cast<size_t>(max_blocks));
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int32_t b = 0; b < max_blocks; ++b) blocks[size_t(b)] = int32_t(s) * max_blocks + b;
    builder.add(SeqChunk{.ids = seqs[s].data(),
                         .n_ids = int32_t(seqs[s].size()),
                         .start_pos = 0,
                         .blocks = blocks.data(),
                         .n_blocks = max_blocks,
                         .want_logits = logits[s] >= 1,
                         .all_logits = logits[s] == 2});
  }
  return builder.take();
}

// ---- swiglu ---------------------------------------------------------------------------------

// Tolerance: per element both compute silu(g) * u = g / (1 + exp(-g)) * u, the reference in
// double, the CPU backend in F32: an exp (correctly rounded to within 1 ulp), an add, a divide
// and a multiply, i.e. a relative error of a few 2^-24 ~ 3e-7 per element (measured worst
// 1e-7 in L2). 1e-6 bounds that;
// swapping gate and up, or an off-by-one in the row stride, gives O(1) errors.
constexpr double kSwigluTol = 1e-6;

TEST(OpsSwiglu, CpuMatchesRef) {
  double worst = 0;
  for (int64_t rows : {1, 2, 3, 9, 33}) {
    for (int64_t d_ff : {1, 3, 16, 17, 64, 100, 1000}) {
      SCOPED_TRACE("rows=" + std::to_string(rows) + " d_ff=" + std::to_string(d_ff));
      Rng rng(test::seed_of({rows, d_ff, 3}));
      // Gates with standard deviation 4 reach the saturated ends of silu (|g| up to ~15).
      std::vector<float> gate_up = test::randn(rng, rows * 2 * d_ff);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < d_ff; ++i) gate_up[size_t(r * 2 * d_ff + i)] *= 4.0f;
      BackendPair be;
      std::vector<float> outs[2];
      int j = 0;
      for (Backend* b : {be.ref.get(), be.cpu.get()}) {
        const TensorView gu = test::to_device(*b, gate_up, rows, 2 * d_ff);
        GuardedOut out(*b, rows, d_ff);
        b->swiglu(gu, out.view());
        EXPECT_TRUE(out.guard_intact()) << b->name() << " wrote past its output";
        outs[j++] = out.values();
      }
      EXPECT_TRUE(test::close_rel_l2(outs[1], outs[0], kSwigluTol));
      worst = std::max(worst, test::error_stats(outs[1], outs[0]).rel_l2);
      // Independent of both backends: gate first, then up, silu(g) = g * sigmoid(g).
      std::vector<float> want(size_t(rows * d_ff));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < d_ff; ++i) {
          const double g = gate_up[size_t(r * 2 * d_ff + i)], u = gate_up[size_t(r * 2 * d_ff + d_ff + i)];
          want[size_t(r * d_ff + i)] = float(g / (1.0 + std::exp(-g)) * u);
        }
      }
      EXPECT_TRUE(test::close_rel_l2(outs[0], want, 1e-7));
    }
  }
  std::printf("worst rel L2 error over the sweep: %.3g (tolerance %.0e)\n", worst, kSwigluTol);
}

// ---- embedding ------------------------------------------------------------------------------

TEST(OpsEmbedding, CpuAndRefCopyTableRows) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    for (int64_t d : {1, 3, 64, 100}) {
      const int64_t n_vocab = 50;
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " d=" + std::to_string(d));
      Rng rng(test::seed_of({d, int64_t(dtype), 4}));
      const HostTensor table = test::make_host(test::randn(rng, n_vocab * d), dtype, {n_vocab, d});
      // Ids drawn from a small range so they repeat within and across sequences, plus the
      // first and last rows of the table.
      std::vector<std::vector<int32_t>> seqs = {{}, {}, {}};
      for (auto& s : seqs)
        for (int64_t i = 0, n = rng.uniform_int(1, 9); i < n; ++i)
          s.push_back(int32_t(rng.uniform_int(0, 6)));
      seqs[1].push_back(0);
      seqs[2].push_back(int32_t(n_vocab - 1));
      seqs[2].push_back(seqs[0][0]);
      const Batch batch = make_batch(seqs, {1, 1, 1});
      const int64_t n = batch.n_tokens();

      const std::vector<float> rows = table.to_f32();
      std::vector<float> want(size_t(n * d));
      for (int64_t t = 0; t < n; ++t)
        for (int64_t i = 0; i < d; ++i)
          want[size_t(t * d + i)] = rows[size_t(batch.token_ids[size_t(t)] * d + i)];

      BackendPair be;
      for (Backend* b : {be.ref.get(), be.cpu.get()}) {
        b->set_batch(batch);
        GuardedOut out(*b, n, d);
        b->embedding(b->upload(table.view(), dtype), out.view());
        EXPECT_TRUE(out.guard_intact()) << b->name() << " wrote past its output";
        EXPECT_TRUE(test::bitwise_equal(out.values(), want)) << b->name();
      }
    }
  }
}

// ---- gather_logit_rows ----------------------------------------------------------------------

TEST(OpsGatherLogitRows, CpuAndRefPickRows) {
  // Sequences asking for the last token's logits, for none, for all tokens (speculative
  // verification), and a hand-made row list in no particular order, with repeats.
  const std::vector<std::vector<int32_t>> seqs = {{1, 2, 3}, {4, 5}, {6, 7, 8, 9}, {10}};
  Batch built = make_batch(seqs, {1, 0, 2, 1});
  ASSERT_EQ(built.logits_rows, (std::vector<int32_t>{2, 5, 6, 7, 8, 9}));
  Batch manual = built;
  manual.logits_rows = {9, 0, 4, 4, 7};
  for (const Batch* batch : {&built, &manual}) {
    for (int64_t d : {1, 5, 64, 130}) {
      SCOPED_TRACE("n_out=" + std::to_string(batch->n_out()) + " d=" + std::to_string(d));
      Rng rng(test::seed_of({d, batch->n_out(), 5}));
      const int64_t n = batch->n_tokens();
      const std::vector<float> x = test::randn(rng, n * d);
      std::vector<float> want;
      for (int32_t r : batch->logits_rows)
        want.insert(want.end(), x.begin() + r * d, x.begin() + (r + 1) * d);
      BackendPair be;
      for (Backend* b : {be.ref.get(), be.cpu.get()}) {
        b->set_batch(*batch);
        GuardedOut out(*b, batch->n_out(), d);
        b->gather_logit_rows(test::to_device(*b, x, n, d), out.view());
        EXPECT_TRUE(out.guard_intact()) << b->name() << " wrote past its output";
        EXPECT_TRUE(test::bitwise_equal(out.values(), want)) << b->name();
      }
    }
  }
}

}  // namespace
}  // namespace tf

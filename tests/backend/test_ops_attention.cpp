// rope_kv_write + attention over the paged KV pool: the CPU backend against the reference,
// and the reference against a direct double-precision computation.
//
// Each case replays a small serving history (kSteps) over several sequences: a first batch of
// prefills, a second batch of chunked prefills after cached prefixes (positions not starting
// at 0) mixed with a new sequence and a decode, then two decode batches of one token per
// sequence. Every sequence's blocks are drawn from a shuffled pool with spare blocks, so
// block ids are neither contiguous nor increasing, and the sequences appear in a different
// order in each batch (batch row != sequence id). With a sliding window, blocks that fall
// wholly outside the window are dropped from the tables (-1, as the KV manager does) and
// their contents overwritten with NaN, as if they had been handed to another sequence.
//
// The pool starts as NaN everywhere: a backend that reads a slot this history never wrote
// (past a sequence's context, another sequence's block, a dropped block) produces a NaN,
// which the comparisons reject. (This is why vLLM's paged kernels zero V rows past the
// context length instead of multiplying them by a zero probability.) I8 storage cannot hold
// a NaN: there the row scales start as NaN (and the int8 values as -128, which quantization
// never produces), so an unwritten row still dequantizes to NaN; FP8 rows likewise (NaN
// scales, the codes the E4M3 NaN 0x7f, which quantization never produces either).
//
// A second, longer history (kLongSteps: contexts of a few hundred tokens) runs the same
// comparison over many key tiles and query tiles of the CPU kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <tuple>

#include "attention_history.h"
#include "core/batch.h"
#include "op_test_util.h"

namespace tf {
namespace {

using test::BackendPair;
using test::Chunk;
using test::GuardedOut;
using test::Rng;
using test::Steps;
using test::Tables;
using test::ceil_div;
using test::kLongSteps;
using test::make_inv_freq;
using test::make_tables;
using test::nan_bytes;
using test::num_seqs;
using test::seq_lengths;

// ---- the serving history ------------------------------------------------------------------

const Steps kSteps = {
    // prefill: four sequences start; sequence 3 with a single-token prompt
    {{0, 7}, {1, 13}, {3, 1}, {5, 4}},
    // chunked prefill after cached prefixes (0, 1, 3), a new sequence (2), a decode (5)
    {{3, 17}, {2, 3}, {5, 1}, {0, 5}, {1, 21}},
    // decode: one token per sequence; sequence 4 starts with its first token
    {{4, 1}, {0, 1}, {1, 1}, {2, 1}, {3, 1}, {5, 1}},
    {{2, 1}, {3, 1}, {5, 1}, {4, 1}, {1, 1}, {0, 1}},
};

// ---- the KV pool ----------------------------------------------------------------------------

// Elements of one block (all kv heads) in a layer's K or V pool.
int64_t block_numel(const KvCacheSpec& s) { return s.n_kv_heads * s.block_size * s.head_dim; }

void poison_pools(Backend& be) {
  HostBackend& hb = test::as_host(be);
  const KvCacheSpec& s = hb.kv_spec();
  const std::vector<uint8_t> nan = nan_bytes(s.dtype, s.n_blocks * block_numel(s));
  const std::vector<uint8_t> nan_scales = nan_bytes(DType::F32, s.n_blocks * s.n_kv_heads * s.block_size);
  for (int il = 0; il < int(s.n_layers); ++il) {
    be.copy_from_host(nan.data(), hb.k_cache(il));
    be.copy_from_host(nan.data(), hb.v_cache(il));
    if (kv_dtype_scaled(s.dtype)) {
      be.copy_from_host(nan_scales.data(), hb.k_scale(il));
      be.copy_from_host(nan_scales.data(), hb.v_scale(il));
    }
  }
}

// Overwrites block `block` of every layer with NaN (a dropped block reused by someone else).
void poison_block(Backend& be, int32_t block) {
  HostBackend& hb = test::as_host(be);
  const KvCacheSpec& s = hb.kv_spec();
  const int64_t n = block_numel(s);
  const std::vector<uint8_t> nan = nan_bytes(s.dtype, n);
  for (int il = 0; il < int(s.n_layers); ++il) {
    for (const TensorView* pool : {&hb.k_cache(il), &hb.v_cache(il)}) {
      const TensorView blk =
          make_view(pool->as<uint8_t>() + block * n * int64_t(dtype_size(s.dtype)), s.dtype, {n});
      be.copy_from_host(nan.data(), blk);
    }
    if (kv_dtype_scaled(s.dtype)) {
      const int64_t rows = s.n_kv_heads * s.block_size;
      const std::vector<uint8_t> nan_scales = nan_bytes(DType::F32, rows);
      for (const TensorView* scales : {&hb.k_scale(il), &hb.v_scale(il)})
        be.copy_from_host(nan_scales.data(), make_view(scales->as<float>() + block * rows, DType::F32, {rows}));
    }
  }
}

// Where element i of a layer's pool lives, for failure messages.
std::string pool_position(const KvCacheSpec& s, int64_t i) {
  const int64_t row = i / s.head_dim;
  return "block " + std::to_string(row / (s.n_kv_heads * s.block_size)) + " kv_head " +
         std::to_string(row / s.block_size % s.n_kv_heads) + " offset " + std::to_string(row % s.block_size) +
         " dim " + std::to_string(i % s.head_dim);
}

// Tolerance for the rotated qkv and an F32 pool: RoPE is per element a*cos - b*sin; the
// reference takes cos/sin in double of the same F32 angle, the CPU backend in F32, so each
// rotated value carries a few 2^-24 of relative error (the angle itself is the same F32
// number on both sides; measured worst 4.4e-8 in L2). 1e-6 is ~3x the worst single element
// and far below the O(1) errors of a wrong pair, position or slot.
constexpr double kRopeTol = 1e-6;

// Compares a layer's pool written by the backend under test with the reference's. Written
// and unwritten (NaN) slots must coincide. F32 storage: relative L2 error <= kRopeTol. BF16
// and F16 storage: both backends round values that differ by ~1e-7 relative, so a value that
// lies next to a rounding boundary may round to neighbouring storage values: each element
// must lie within one storage ulp of the reference's (plus 1e-6 absolute for values that
// cancelled to near zero, where the ulp is smaller than the F32 error before rounding). Such
// a flip needs the F32 value within ~1e-7 relative of a rounding boundary, a chance of about
// 1e-7 / 2^-8 ~ 3e-5 per element (measured: 0 to 11 per sweep); allowing 1 + 0.1% of the
// written elements catches a systematic rounding difference (truncating instead of rounding
// to nearest even differs in half of all elements) that the one-ulp bound alone would pass.
::testing::AssertionResult pools_match(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                                       const KvCacheSpec& s, int64_t* n_rounding_flips, int64_t* n_written) {
  const int64_t n = int64_t(want.size() / dtype_size(s.dtype));
  std::vector<float> g, w;
  int64_t flips = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float gv = load_f32(got.data(), s.dtype, i), wv = load_f32(want.data(), s.dtype, i);
    if (std::isnan(gv) != std::isnan(wv))
      return ::testing::AssertionFailure()
             << (std::isnan(wv) ? "slot written only by the backend under test"
                                : "slot not written by the backend under test")
             << " at " << pool_position(s, i) << ": got " << gv << " want " << wv;
    if (std::isnan(wv)) continue;
    if (s.dtype != DType::F32) {
      const double bound = std::max(test::ulp_of(s.dtype, gv), test::ulp_of(s.dtype, wv)) + 1e-6;
      if (std::abs(double(gv) - double(wv)) > bound)
        return ::testing::AssertionFailure() << "element at " << pool_position(s, i) << ": got " << gv
                                             << " want " << wv << " (more than one storage ulp apart)";
      flips += gv != wv;
    }
    g.push_back(gv);
    w.push_back(wv);
  }
  *n_rounding_flips += flips;
  *n_written += int64_t(w.size());
  if (s.dtype == DType::F32) return test::close_rel_l2(g, w, kRopeTol);
  if (flips > 1 + int64_t(w.size()) / 1000)
    return ::testing::AssertionFailure()
           << flips << " of " << w.size()
           << " written elements differ by one storage ulp: a systematic rounding difference";
  return ::testing::AssertionSuccess();
}

// The same for I8 and FP8 storage, whose rows are codes q and a scale each. Written rows
// (scale not NaN) and unwritten ones (scale NaN, q the poison) must coincide. A written row's
// scale is max|row| / 127 (I8) or / 448 (FP8) of values that differ between the backends by
// the RoPE rounding above, a few 2^-24 relative for the largest element of a row, so scales
// must agree to 1e-6 relative. Each q may then land on the neighbouring code when x / scale
// lies within ~1e-7 relative of a rounding boundary, a chance of ~3e-5 per element for I8
// (127 * 1e-7) and less for FP8 (1e-7 / 2^-4 relative spacing) (measured: at most 1 per sweep
// of 0.25-3.4 million written elements); so codes differ by at most one step everywhere,
// with differences in at most 1 + 0.1% of the written elements (a wrong rounding mode, e.g.
// truncation, differs in half of them).
::testing::AssertionResult scaled_pools_match(const std::vector<uint8_t>& got_q, const std::vector<uint8_t>& want_q,
                                            const std::vector<float>& got_scale,
                                            const std::vector<float>& want_scale, const KvCacheSpec& s,
                                            int64_t* n_rounding_flips, int64_t* n_written) {
  int64_t flips = 0, written = 0;
  for (size_t row = 0; row < want_scale.size(); ++row) {
    const float gs = got_scale[row], ws = want_scale[row];
    const std::string where = pool_position(s, int64_t(row) * s.head_dim);
    if (std::isnan(gs) != std::isnan(ws))
      return ::testing::AssertionFailure() << (std::isnan(ws) ? "row written only by the backend under test"
                                                               : "row not written by the backend under test")
                                           << " at " << where << ": scale got " << gs << " want " << ws;
    const int poison = test::kv_code_ordinal(s.dtype, nan_bytes(s.dtype, 1)[0]);
    for (int64_t i = 0; i < s.head_dim; ++i) {
      const size_t at = row * size_t(s.head_dim) + size_t(i);
      const int gq = test::kv_code_ordinal(s.dtype, got_q[at]), wq = test::kv_code_ordinal(s.dtype, want_q[at]);
      if (std::isnan(ws)) {
        if (gq != poison || wq != poison)
          return ::testing::AssertionFailure() << "unwritten row with a written value at " << where << " dim "
                                               << i << ": got " << gq << " want " << wq;
        continue;
      }
      if (std::abs(gq - wq) > 1 || gq == poison)
        return ::testing::AssertionFailure() << dtype_name(s.dtype) << " code at " << where << " dim " << i << ": got " << gq
                                             << " want " << wq;
      flips += gq != wq;
      ++written;
    }
    if (!std::isnan(ws) && !(std::abs(double(gs) - double(ws)) <= 1e-6 * std::abs(double(ws))))
      return ::testing::AssertionFailure() << "scale at " << where << ": got " << gs << " want " << ws;
  }
  *n_rounding_flips += flips;
  *n_written += written;
  if (flips > 1 + written / 1000)
    return ::testing::AssertionFailure() << flips << " of " << written
                                         << " written codes differ by one: a systematic rounding difference";
  return ::testing::AssertionSuccess();
}

// Tolerance for the attention output (given identical rotated q and identical pools): the
// reference accumulates q.k, the softmax and the weighted sum of V in double; the CPU backend
// in F32: a dot product of head_dim terms (relative error ~2^-24 * sqrt(head_dim) of a score
// of size ~1), an F32 exp, a sum over at most 36 keys and the final division. That is ~1e-6
// relative at most (measured worst 1.7e-7); 1e-5 leaves margin. A wrong key range (window,
// causal edge), GQA head mapping or block lookup changes which keys are averaged and gives
// errors of 1e-2 or more. The same tolerance holds for I8 and FP8 storage (both backends
// dequantize the same codes and scales with the same F32 product) and for the long history (sums
// over up to 320 keys: ~2^-24 * sqrt(320) ~ 1e-6; measured worst 3.6e-7).
constexpr double kAttnTol = 1e-5;

// ---- CPU against the reference --------------------------------------------------------------

struct AttnCase {
  const Steps* steps = &kSteps;
  int32_t block_size = 16;
  int64_t n_heads = 4, n_kv_heads = 4, head_dim = 32, sliding_window = 0;
  DType kv_dtype = DType::F32;
  int layer = 0;  // the layer written and read (the pool has two)

  std::string str() const {
    return std::string(steps == &kLongSteps ? "long history " : "") + "block_size=" + std::to_string(block_size) + " heads=" + std::to_string(n_heads) + "/" +
           std::to_string(n_kv_heads) + " head_dim=" + std::to_string(head_dim) +
           " window=" + std::to_string(sliding_window) + " kv=" + std::string(dtype_name(kv_dtype)) +
           " layer=" + std::to_string(layer);
  }
};

struct WorstErrors {
  double rope = 0, pool = 0, attn = 0;
  int64_t rounding_flips = 0, written_elements = 0;
};

void run_case(const AttnCase& c, WorstErrors& worst) {
  SCOPED_TRACE(c.str());
  Rng rng(test::seed_of(
      {c.block_size, c.n_heads, c.n_kv_heads, c.head_dim, c.sliding_window, int64_t(c.kv_dtype), c.layer}));
  const Steps& steps = *c.steps;
  const Tables tables = make_tables(rng, c.block_size, seq_lengths(steps), /*spare=*/5);
  const KvCacheSpec spec{.n_layers = 2,
                         .n_blocks = tables.n_blocks,
                         .block_size = c.block_size,
                         .n_kv_heads = c.n_kv_heads,
                         .head_dim = c.head_dim,
                         .dtype = c.kv_dtype};
  const AttentionParams p{.n_heads = c.n_heads,
                          .n_kv_heads = c.n_kv_heads,
                          .head_dim = c.head_dim,
                          .scale = float(1.0 / std::sqrt(double(c.head_dim))),
                          .sliding_window = c.sliding_window};
  const int64_t row = (c.n_heads + 2 * c.n_kv_heads) * c.head_dim;
  const std::vector<float> inv_freq_host = make_inv_freq(c.head_dim);

  BackendPair be;
  Backend* const backends[2] = {be.ref.get(), be.cpu.get()};
  TensorView inv_freq[2];
  for (int ib = 0; ib < 2; ++ib) {
    backends[ib]->init_kv_cache(spec);
    poison_pools(*backends[ib]);
    inv_freq[ib] = backends[ib]->alloc(DType::F32, {c.head_dim / 2});
    backends[ib]->copy_from_host(inv_freq_host.data(), inv_freq[ib]);
  }

  std::vector<int32_t> n_computed(size_t(num_seqs(steps)), 0);
  std::set<int32_t> dropped;
  for (size_t step = 0; step < steps.size(); ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    // ---- the batch
    BatchBuilder builder(c.block_size, tables.max_blocks);
    for (const Chunk& ch : steps[step]) {
      const int32_t start = n_computed[size_t(ch.seq)];
      std::vector<int32_t> blocks = tables.blocks[size_t(ch.seq)];
      blocks.resize(size_t(ceil_div(start + ch.n, c.block_size)));
      if (c.sliding_window > 0) {
        // keys this step can see start at start - window + 1 (for its first token)
        const int64_t first_key = std::max<int64_t>(0, start - c.sliding_window + 1);
        for (size_t b = 0; b < blocks.size(); ++b) {
          if (int64_t(b + 1) * c.block_size > first_key) break;
          if (dropped.insert(blocks[b]).second)
            for (Backend* bk : backends) poison_block(*bk, blocks[b]);
          blocks[b] = -1;
        }
      }
      std::vector<int32_t> ids(size_t(ch.n));
      for (int32_t& id : ids) id = int32_t(rng.uniform_int(0, 999));
      builder.add(SeqChunk{.ids = ids.data(),
                           .n_ids = ch.n,
                           .start_pos = start,
                           .blocks = blocks.data(),
                           .n_blocks = int32_t(blocks.size())});
      n_computed[size_t(ch.seq)] += ch.n;
    }
    const Batch batch = builder.take();
    const int64_t n = batch.n_tokens();
    const std::vector<float> qkv_host = test::randn(rng, n * row);

    // ---- rope_kv_write: rotated qkv and both layers' pools
    TensorView qkv[2];
    for (int ib = 0; ib < 2; ++ib) {
      backends[ib]->set_batch(batch);
      qkv[ib] = test::to_device(*backends[ib], qkv_host, n, row);
      backends[ib]->rope_kv_write(c.layer, qkv[ib], inv_freq[ib], p);
    }
    const std::vector<float> qkv_ref = test::to_host_f32(*be.ref, qkv[0]);
    EXPECT_TRUE(test::close_rel_l2(test::to_host_f32(*be.cpu, qkv[1]), qkv_ref, kRopeTol)) << "rotated qkv";
    worst.rope = std::max(worst.rope, test::error_stats(test::to_host_f32(*be.cpu, qkv[1]), qkv_ref).rel_l2);
    HostBackend& ref_host = test::as_host(*be.ref);
    HostBackend& cpu_host = test::as_host(*be.cpu);
    for (int il = 0; il < 2; ++il) {
      for (int kv = 0; kv < 2; ++kv) {
        const TensorView& ref_pool = kv ? ref_host.v_cache(il) : ref_host.k_cache(il);
        const TensorView& cpu_pool = kv ? cpu_host.v_cache(il) : cpu_host.k_cache(il);
        const std::vector<uint8_t> want = test::to_host_bytes(*be.ref, ref_pool);
        const std::vector<uint8_t> got = test::to_host_bytes(*be.cpu, cpu_pool);
        if (kv_dtype_scaled(spec.dtype)) {
          const TensorView& ref_scale = kv ? ref_host.v_scale(il) : ref_host.k_scale(il);
          const TensorView& cpu_scale = kv ? cpu_host.v_scale(il) : cpu_host.k_scale(il);
          const std::vector<float> want_scale = test::to_host_f32(*be.ref, ref_scale);
          EXPECT_TRUE(scaled_pools_match(got, want, test::to_host_f32(*be.cpu, cpu_scale), want_scale, spec,
                                       &worst.rounding_flips, &worst.written_elements))
              << (kv ? "V" : "K") << " pool of layer " << il;
          be.cpu->copy_from_host(want_scale.data(), cpu_scale);
        } else {
          EXPECT_TRUE(pools_match(got, want, spec, &worst.rounding_flips, &worst.written_elements))
              << (kv ? "V" : "K") << " pool of layer " << il;
        }
        if (spec.dtype == DType::F32) {
          std::vector<float> g(size_t(ref_pool.numel())), w(g.size());
          std::memcpy(g.data(), got.data(), got.size());
          std::memcpy(w.data(), want.data(), want.size());
          for (size_t i = 0; i < g.size(); ++i)
            if (std::isnan(w[i])) g[i] = w[i] = 0;  // unwritten on both (checked above)
          worst.pool = std::max(worst.pool, test::error_stats(g, w).rel_l2);
        }
        // Attention is compared from identical inputs: rope differences (and BF16/F16
        // rounding flips caused by them) are checked above and not compounded below.
        be.cpu->copy_from_host(want.data(), cpu_pool);
      }
    }
    be.cpu->copy_from_host(qkv_ref.data(), qkv[1]);

    // ---- attention
    std::vector<float> outs[2];
    for (int ib = 0; ib < 2; ++ib) {
      GuardedOut out(*backends[ib], n, c.n_heads * c.head_dim);
      backends[ib]->attention(c.layer, qkv[ib], p, out.view());
      EXPECT_TRUE(out.guard_intact()) << backends[ib]->name() << " wrote past its output";
      outs[ib] = out.values();
      EXPECT_TRUE(test::bitwise_equal(test::to_host_f32(*backends[ib], qkv[ib]), qkv_ref))
          << backends[ib]->name() << " attention changed qkv";
    }
    EXPECT_TRUE(test::close_rel_l2(outs[1], outs[0], kAttnTol)) << "attention output";
    worst.attn = std::max(worst.attn, test::error_stats(outs[1], outs[0]).rel_l2);
  }
}

class PagedAttentionSweep : public ::testing::TestWithParam<std::tuple<DType, std::pair<int64_t, int64_t>>> {
};

TEST_P(PagedAttentionSweep, CpuMatchesRef) {
  const auto [kv_dtype, heads] = GetParam();
  WorstErrors worst;
  for (int32_t block_size : {1, 4, 16}) {
    for (int64_t head_dim : {32, 64}) {
      for (int64_t window : {0, 5}) {
        run_case(AttnCase{.block_size = block_size,
                          .n_heads = heads.first,
                          .n_kv_heads = heads.second,
                          .head_dim = head_dim,
                          .sliding_window = window,
                          .kv_dtype = kv_dtype,
                          // both layers with and without a window
                          .layer = int((block_size + head_dim / 32 + window) % 2)},
                 worst);
      }
    }
  }
  std::printf(
      "worst rel L2: rope %.3g, F32 pool %.3g, attention %.3g; BF16/F16/I8/FP8 rounding flips in %lld of %lld "
      "comparisons of written elements\n",
      worst.rope, worst.pool, worst.attn, (long long)worst.rounding_flips, (long long)worst.written_elements);
}

// The long history: fewer shapes (the reference is slow), several key tiles per query.
TEST_P(PagedAttentionSweep, CpuMatchesRefLongContext) {
  const auto [kv_dtype, heads] = GetParam();
  WorstErrors worst;
  for (int64_t head_dim : {64, 128}) {
    for (int64_t window : {0, 100}) {
      run_case(AttnCase{.steps = &kLongSteps,
                        .block_size = 16,
                        .n_heads = heads.first,
                        .n_kv_heads = heads.second,
                        .head_dim = head_dim,
                        .sliding_window = window,
                        .kv_dtype = kv_dtype,
                        .layer = int(head_dim / 64 + window / 100) % 2},
               worst);
    }
  }
  std::printf("worst rel L2: rope %.3g, attention %.3g; rounding flips in %lld of %lld written elements\n",
              worst.rope, worst.attn, (long long)worst.rounding_flips, (long long)worst.written_elements);
}

std::string attn_name(const ::testing::TestParamInfo<std::tuple<DType, std::pair<int64_t, int64_t>>>& info) {
  const auto [dtype, heads] = info.param;
  return "KV" + std::string(dtype_name(dtype)) + "_H" + std::to_string(heads.first) + "_KVH" +
         std::to_string(heads.second);
}

// heads: MHA 4/4, GQA 4/2 and 8/2, MQA 4/1
INSTANTIATE_TEST_SUITE_P(Ops, PagedAttentionSweep,
                         ::testing::Combine(::testing::Values(DType::F32, DType::BF16, DType::F16, DType::I8, DType::FP8),
                                            ::testing::Values(std::pair<int64_t, int64_t>{4, 4},
                                                              std::pair<int64_t, int64_t>{4, 2},
                                                              std::pair<int64_t, int64_t>{8, 2},
                                                              std::pair<int64_t, int64_t>{4, 1})),
                         attn_name);

// ---- the reference against a direct computation -------------------------------------------

// Causal softmax attention computed here in double from the unrotated q/k/v, with RoPE done
// here (rotate-half: dims i and i + head_dim/2 rotated by pos * inv_freq[i]) and GQA as in
// Hugging Face's repeat_kv (query head h reads kv head h / (n_heads / n_kv_heads)). Also
// checks the pool layout [n_blocks, n_kv_heads, block_size, head_dim] slot by slot, that
// unwritten slots and the other layer are untouched, and that V is stored unrotated.
//
// Tolerance 1e-5: the backends compute the angle pos * inv_freq[i] in F32 (rounding error
// up to 2^-24 * 11 rad at the largest position here) and store F32 K, so rotated values
// differ from this double computation by ~1e-6 relative at most; everything else agrees to
// ~1e-7. A wrong rotation pairing, sign, head mapping or key range gives O(0.1) errors.
TEST(OpsAttentionSemantics, BackendsMatchDirectComputation) {
  constexpr int64_t kHeads = 4, kKvHeads = 2, kHeadDim = 16, kBlockSize = 4, kNBlocks = 8;
  constexpr int kLayer = 1;
  constexpr double kTol = 1e-5;
  const int64_t row = (kHeads + 2 * kKvHeads) * kHeadDim, half = kHeadDim / 2;
  // Two sequences: prefill, then a chunk after the cached prefix (and a decode), then decodes.
  const std::vector<std::vector<Chunk>> steps = {{{0, 6}, {1, 3}}, {{1, 1}, {0, 5}}, {{0, 1}, {1, 1}}};
  const std::vector<std::vector<int32_t>> tables = {{5, 1, 7}, {3, 0}};  // 12 and 5 tokens
  const std::vector<float> inv_freq_host = make_inv_freq(kHeadDim);

  for (int64_t window : {0, 3}) {
    for (BackendKind kind : {BackendKind::Ref, BackendKind::Cpu}) {
      auto be = make_backend(kind);
      SCOPED_TRACE(be->name() + " window=" + std::to_string(window));
      const KvCacheSpec spec{.n_layers = 2,
                             .n_blocks = kNBlocks,
                             .block_size = kBlockSize,
                             .n_kv_heads = kKvHeads,
                             .head_dim = kHeadDim,
                             .dtype = DType::F32};
      be->init_kv_cache(spec);
      poison_pools(*be);
      TensorView inv_freq = be->alloc(DType::F32, {half});
      be->copy_from_host(inv_freq_host.data(), inv_freq);
      const AttentionParams p{.n_heads = kHeads,
                              .n_kv_heads = kKvHeads,
                              .head_dim = kHeadDim,
                              .scale = 0.3f,
                              .sliding_window = window};
      Rng rng(99);
      // history[s][pos]: rotated k and unrotated v of every kv head, [n_kv_heads * head_dim]
      std::vector<std::vector<std::vector<double>>> hist_k(2), hist_v(2);
      auto rotate = [&](const float* x, int32_t pos, double* outv) {
        for (int64_t i = 0; i < half; ++i) {
          const double angle = double(pos) * double(inv_freq_host[size_t(i)]);
          const double a = x[i], b = x[i + half];
          outv[i] = a * std::cos(angle) - b * std::sin(angle);
          outv[i + half] = b * std::cos(angle) + a * std::sin(angle);
        }
      };

      for (const auto& step : steps) {
        BatchBuilder builder(int32_t(kBlockSize), 3);
        std::vector<int> seq_of_row;
        for (const Chunk& ch : step) {
          const int32_t start = int32_t(hist_k[size_t(ch.seq)].size());
          const std::vector<int32_t> ids(size_t(ch.n), 42);
          builder.add(SeqChunk{.ids = ids.data(),
                               .n_ids = ch.n,
                               .start_pos = start,
                               .blocks = tables[size_t(ch.seq)].data(),
                               .n_blocks = int32_t(tables[size_t(ch.seq)].size())});
          for (int32_t i = 0; i < ch.n; ++i) seq_of_row.push_back(ch.seq);
        }
        const Batch batch = builder.take();
        const int64_t n = batch.n_tokens();
        const std::vector<float> qkv_host = test::randn(rng, n * row);

        // expected rotated qkv, and the history after this step's K/V are appended
        std::vector<float> want_qkv(qkv_host.size());
        for (int64_t t = 0; t < n; ++t) {
          const float* x = qkv_host.data() + t * row;
          const int32_t pos = batch.positions[size_t(t)];
          std::vector<double> rot(static_cast<size_t>(row));
          for (int64_t h = 0; h < kHeads + kKvHeads; ++h)
            rotate(x + h * kHeadDim, pos, rot.data() + h * kHeadDim);
          for (int64_t i = (kHeads + kKvHeads) * kHeadDim; i < row; ++i) rot[size_t(i)] = x[i];
          for (int64_t i = 0; i < row; ++i) want_qkv[size_t(t * row + i)] = float(rot[size_t(i)]);
          auto& hk = hist_k[size_t(seq_of_row[size_t(t)])];
          auto& hv = hist_v[size_t(seq_of_row[size_t(t)])];
          ASSERT_EQ(int64_t(hk.size()), pos);
          hk.emplace_back(rot.begin() + kHeads * kHeadDim, rot.begin() + (kHeads + kKvHeads) * kHeadDim);
          hv.emplace_back(rot.begin() + (kHeads + kKvHeads) * kHeadDim, rot.end());
        }

        be->set_batch(batch);
        const TensorView qkv = test::to_device(*be, qkv_host, n, row);
        be->rope_kv_write(kLayer, qkv, inv_freq, p);
        EXPECT_TRUE(test::close_rel_l2(test::to_host_f32(*be, qkv), want_qkv, kTol)) << "rotated qkv";

        // the pool, slot by slot: K rotated, V bit-exact, everything else still NaN
        HostBackend& hb = test::as_host(*be);
        const std::vector<float> k_pool = test::to_host_f32(*be, hb.k_cache(kLayer));
        const std::vector<float> v_pool = test::to_host_f32(*be, hb.v_cache(kLayer));
        std::vector<float> got_k, want_k;
        std::vector<bool> written(k_pool.size(), false);
        for (int s = 0; s < 2; ++s) {
          for (size_t pos = 0; pos < hist_k[size_t(s)].size(); ++pos) {
            const int64_t block = tables[size_t(s)][pos / kBlockSize], off = int64_t(pos) % kBlockSize;
            for (int64_t h = 0; h < kKvHeads; ++h) {
              for (int64_t i = 0; i < kHeadDim; ++i) {
                const size_t at = size_t(((block * kKvHeads + h) * kBlockSize + off) * kHeadDim + i);
                written[at] = true;
                got_k.push_back(k_pool[at]);
                want_k.push_back(float(hist_k[size_t(s)][pos][size_t(h * kHeadDim + i)]));
                EXPECT_EQ(v_pool[at], float(hist_v[size_t(s)][pos][size_t(h * kHeadDim + i)]))
                    << "V of sequence " << s << " position " << pos << " kv_head " << h << " dim " << i;
              }
            }
          }
        }
        EXPECT_TRUE(test::close_rel_l2(got_k, want_k, kTol)) << "K pool";
        int64_t stray = 0;
        for (size_t i = 0; i < written.size(); ++i)
          stray += !written[i] && !(std::isnan(k_pool[i]) && std::isnan(v_pool[i]));
        EXPECT_EQ(stray, 0) << "pool elements written outside this history's slots";
        for (const TensorView* other : {&hb.k_cache(1 - kLayer), &hb.v_cache(1 - kLayer)}) {
          int64_t touched = 0;
          for (float v : test::to_host_f32(*be, *other)) touched += !std::isnan(v);
          EXPECT_EQ(touched, 0) << "the other layer's pool was written";
        }

        // attention: softmax(scale * q.k) over keys [max(0, pos - window + 1), pos]
        TensorView out = be->alloc(DType::F32, {n, kHeads * kHeadDim});
        be->attention(kLayer, qkv, p, out);
        std::vector<float> want_out(size_t(n * kHeads * kHeadDim));
        for (int64_t t = 0; t < n; ++t) {
          const int32_t qpos = batch.positions[size_t(t)];
          const int32_t first = window > 0 ? std::max<int32_t>(0, qpos - int32_t(window) + 1) : 0;
          const auto& hk = hist_k[size_t(seq_of_row[size_t(t)])];
          const auto& hv = hist_v[size_t(seq_of_row[size_t(t)])];
          std::vector<double> q(static_cast<size_t>(kHeadDim));
          for (int64_t h = 0; h < kHeads; ++h) {
            rotate(qkv_host.data() + t * row + h * kHeadDim, qpos, q.data());
            const int64_t kvh = h / (kHeads / kKvHeads);
            std::vector<double> w;
            double mx = -INFINITY, sum = 0;
            for (int32_t kp = first; kp <= qpos; ++kp) {
              double dot = 0;
              for (int64_t i = 0; i < kHeadDim; ++i)
                dot += q[size_t(i)] * hk[size_t(kp)][size_t(kvh * kHeadDim + i)];
              w.push_back(double(p.scale) * dot);
              mx = std::max(mx, w.back());
            }
            for (double& x : w) sum += (x = std::exp(x - mx));
            for (int64_t i = 0; i < kHeadDim; ++i) {
              double acc = 0;
              for (int32_t kp = first; kp <= qpos; ++kp)
                acc += w[size_t(kp - first)] * hv[size_t(kp)][size_t(kvh * kHeadDim + i)];
              want_out[size_t(t * kHeads * kHeadDim + h * kHeadDim + i)] = float(acc / sum);
            }
          }
        }
        EXPECT_TRUE(test::close_rel_l2(test::to_host_f32(*be, out), want_out, kTol)) << "attention output";
      }
    }
  }
}

}  // namespace
}  // namespace tf

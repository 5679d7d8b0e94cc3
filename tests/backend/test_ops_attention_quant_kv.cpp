// Quantized KV storage, INT8 and FP8 (E4M3), checked independently of the reference backend:
//  - what rope_kv_write stores (codes and one scale per token and KV head, for K and for V)
//    against a quantization done here, from the definition, of the rotated K and the
//    unrotated V; and attention over the quantized cache against a double-precision
//    computation over those dequantized values;
//  - that attention with a quantized cache stays close to attention with an F32 cache;
//  - kv_bytes_per_token against what the host backends allocate.
// (The CPU backend against the reference with I8 and FP8 storage is part of the sweep in
// test_ops_attention.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "attention_history.h"
#include "core/batch.h"
#include "op_test_util.h"
#include "quant/fp8.h"

namespace tf {
namespace {

using test::Chunk;
using test::Rng;
using test::Steps;
using test::make_inv_freq;

// A serving history over a small pool: block tables fixed per sequence, steps of chunks.
struct Scenario {
  int64_t n_heads = 4, n_kv_heads = 2, head_dim = 32;
  int32_t block_size = 4;
  int64_t n_blocks = 8;
  int64_t sliding_window = 0;
  std::vector<std::vector<int32_t>> tables;  // [n_seqs][blocks]
  Steps steps;

  int64_t row() const { return (n_heads + 2 * n_kv_heads) * head_dim; }
  KvCacheSpec spec(DType dtype) const {
    return KvCacheSpec{.n_layers = 2,
                       .n_blocks = n_blocks,
                       .block_size = block_size,
                       .n_kv_heads = n_kv_heads,
                       .head_dim = head_dim,
                       .dtype = dtype};
  }
  AttentionParams params() const {
    return AttentionParams{.n_heads = n_heads,
                           .n_kv_heads = n_kv_heads,
                           .head_dim = head_dim,
                           .scale = float(1.0 / std::sqrt(double(head_dim))),
                           .sliding_window = sliding_window};
  }
  // The batch of step `step`; n_computed[s] advances by the chunk of sequence s.
  Batch batch(size_t step, std::vector<int32_t>& n_computed, std::vector<int>* seq_of_row) const {
    int32_t max_blocks = 0;
    for (const auto& t : tables) max_blocks = std::max(max_blocks, int32_t(t.size()));
    BatchBuilder builder(block_size, max_blocks);
    for (const Chunk& ch : steps[step]) {
      const std::vector<int32_t> ids(size_t(ch.n), 7);
      const auto& blocks = tables[size_t(ch.seq)];
      builder.add(SeqChunk{.ids = ids.data(),
                           .n_ids = ch.n,
                           .start_pos = n_computed[size_t(ch.seq)],
                           .blocks = blocks.data(),
                           .n_blocks = int32_t(blocks.size())});
      n_computed[size_t(ch.seq)] += ch.n;
      if (seq_of_row) seq_of_row->insert(seq_of_row->end(), size_t(ch.n), ch.seq);
    }
    return builder.take();
  }
};

// The quantization by its definition (written here, not taken from src/quant's KV code):
// I8: scale = max|x| / 127 in F32, q = round-half-even(x / scale) clamped to [-127, 127];
// FP8: scale = max|x| / 448 in F32, q = the E4M3 encoding of x / scale (quant/fp8.h's codec,
// itself checked against ml_dtypes in tests/quant/test_fp8.cpp); zeros for scale 0.
float quantize_here(DType dtype, const float* x, int64_t n, uint8_t* q) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::abs(x[i]));
  const float scale = amax / (dtype == DType::I8 ? 127.0f : 448.0f);
  for (int64_t i = 0; i < n; ++i) {
    if (scale == 0)
      q[i] = 0;
    else if (dtype == DType::I8)
      q[i] = uint8_t(int8_t(std::max(-127.0f, std::min(127.0f, std::nearbyint(x[i] / scale)))));
    else
      q[i] = f32_to_e4m3(x[i] / scale);
  }
  return scale;
}
double dequantize_here(DType dtype, uint8_t q, float scale) {
  return double((dtype == DType::I8 ? float(int8_t(q)) : e4m3_to_f32(q)) * scale);
}

class QuantKv : public ::testing::TestWithParam<DType> {};

// ---- what is stored, and what attention reads ----------------------------------------------

// Two sequences (prefill, a chunk after a cached prefix beside a decode, then decodes) over
// shuffled blocks, on both backends. After every rope_kv_write, each written row of the layer
// must hold exactly quantize_here(rotated K) and quantize_here(V): bit-equal int8 values and
// scales, since the rotated K is read back from the backend's own rotated qkv and V is
// stored unrotated, so both sides quantize the same F32 numbers. Rows not written keep the
// poison (q = I8 -128 or the E4M3 NaN, scale NaN), and the other layer stays untouched.
//
// Attention is then compared with softmax attention computed here in double over the
// dequantized rows q * scale (the values the cache holds), from the backend's rotated q.
// Tolerance 1e-5 as for the F32 cache (BackendsMatchDirectComputation): only the backends'
// F32 accumulation differs (~1e-7). Reading the int8 values without their scale, a wrong
// row's scale, or the wrong rounding gives errors of 1e-2 or more.
TEST_P(QuantKv, StoresQuantizedRowsAndAttendsOverThem) {
  const DType dtype = GetParam();
  Scenario sc;
  sc.steps = {{{0, 6}, {1, 3}}, {{1, 1}, {0, 5}}, {{0, 1}, {1, 1}}};
  sc.tables = {{5, 1, 7}, {3, 0}};  // 12 and 5 tokens
  constexpr int kLayer = 1;
  constexpr double kTol = 1e-5;
  const int64_t hd = sc.head_dim, row = sc.row(), n_rows = sc.n_blocks * sc.n_kv_heads * sc.block_size;
  const std::vector<float> inv_freq_host = make_inv_freq(hd);

  for (int64_t window : {0, 3}) {
    sc.sliding_window = window;
    for (BackendKind kind : {BackendKind::Ref, BackendKind::Cpu}) {
      auto be = make_backend(kind);
      SCOPED_TRACE(be->name() + " window=" + std::to_string(window));
      be->init_kv_cache(sc.spec(dtype));
      HostBackend& hb = test::as_host(*be);
      const std::vector<uint8_t> poison_q = test::nan_bytes(dtype, n_rows * hd);
      const std::vector<float> poison_scale(size_t(n_rows), std::numeric_limits<float>::quiet_NaN());
      for (int il = 0; il < 2; ++il) {
        be->copy_from_host(poison_q.data(), hb.k_cache(il));
        be->copy_from_host(poison_q.data(), hb.v_cache(il));
        be->copy_from_host(poison_scale.data(), hb.k_scale(il));
        be->copy_from_host(poison_scale.data(), hb.v_scale(il));
      }
      TensorView inv_freq = be->alloc(DType::F32, {hd / 2});
      be->copy_from_host(inv_freq_host.data(), inv_freq);
      const AttentionParams p = sc.params();
      Rng rng(2024);
      // expected contents of every pool row of the layer: codes and scale, K and V
      std::vector<uint8_t> want_kq(poison_q), want_vq(poison_q);
      std::vector<float> want_ks(poison_scale), want_vs(poison_scale);
      // history[s][pos]: the dequantized K and V of each kv head, [n_kv_heads * head_dim]
      std::vector<std::vector<std::vector<double>>> hist_k(2), hist_v(2);
      std::vector<int32_t> n_computed(2, 0);

      for (size_t step = 0; step < sc.steps.size(); ++step) {
        SCOPED_TRACE("step " + std::to_string(step));
        std::vector<int> seq_of_row;
        const Batch batch = sc.batch(step, n_computed, &seq_of_row);
        const int64_t n = batch.n_tokens();
        const std::vector<float> qkv_host = test::randn(rng, n * row);
        be->set_batch(batch);
        const TensorView qkv = test::to_device(*be, qkv_host, n, row);
        be->rope_kv_write(kLayer, qkv, inv_freq, p);
        const std::vector<float> rotated = test::to_host_f32(*be, qkv);

        for (int64_t t = 0; t < n; ++t) {
          const int64_t slot = batch.slot_mapping[size_t(t)];
          std::vector<double> k_deq, v_deq;
          for (int64_t h = 0; h < sc.n_kv_heads; ++h) {
            const int64_t pr = ((slot / sc.block_size) * sc.n_kv_heads + h) * sc.block_size + slot % sc.block_size;
            const size_t at = size_t(pr * hd);
            want_ks[size_t(pr)] =
                quantize_here(dtype, rotated.data() + t * row + (sc.n_heads + h) * hd, hd, &want_kq[at]);
            want_vs[size_t(pr)] = quantize_here(dtype, qkv_host.data() + t * row + (sc.n_heads + sc.n_kv_heads + h) * hd,
                                                hd, &want_vq[at]);
            for (int64_t i = 0; i < hd; ++i) {
              k_deq.push_back(dequantize_here(dtype, want_kq[at + size_t(i)], want_ks[size_t(pr)]));
              v_deq.push_back(dequantize_here(dtype, want_vq[at + size_t(i)], want_vs[size_t(pr)]));
            }
          }
          ASSERT_EQ(int64_t(hist_k[size_t(seq_of_row[size_t(t)])].size()), batch.positions[size_t(t)]);
          hist_k[size_t(seq_of_row[size_t(t)])].push_back(k_deq);
          hist_v[size_t(seq_of_row[size_t(t)])].push_back(v_deq);
        }

        // the layer's pools, row by row; the other layer untouched
        const struct {
          const char* name;
          const TensorView &q, &scale;
          const std::vector<uint8_t>& want_q;
          const std::vector<float>& want_scale;
        } pools[2] = {{"K", hb.k_cache(kLayer), hb.k_scale(kLayer), want_kq, want_ks},
                      {"V", hb.v_cache(kLayer), hb.v_scale(kLayer), want_vq, want_vs}};
        for (const auto& pool : pools) {
          const std::vector<uint8_t> got_q = test::to_host_bytes(*be, pool.q);
          const std::vector<float> got_scale = test::to_host_f32(*be, pool.scale);
          int64_t bad_rows = 0;
          for (int64_t r = 0; r < n_rows; ++r) {
            const bool scale_ok = std::isnan(pool.want_scale[size_t(r)])
                                      ? std::isnan(got_scale[size_t(r)])
                                      : got_scale[size_t(r)] == pool.want_scale[size_t(r)];
            const bool q_ok = std::memcmp(got_q.data() + r * hd, pool.want_q.data() + r * hd, size_t(hd)) == 0;
            if (!(scale_ok && q_ok) && bad_rows++ < 3)
              ADD_FAILURE() << pool.name << " pool row " << r << ": scale got " << got_scale[size_t(r)] << " want "
                            << pool.want_scale[size_t(r)] << (q_ok ? "" : ", codes differ");
          }
          EXPECT_EQ(bad_rows, 0) << pool.name << " pool rows that differ from the quantized rows";
        }
        for (const TensorView* other : {&hb.k_cache(1 - kLayer), &hb.v_cache(1 - kLayer)})
          EXPECT_EQ(test::to_host_bytes(*be, *other), poison_q)
              << "the other layer's pool was written";
        for (const TensorView* other : {&hb.k_scale(1 - kLayer), &hb.v_scale(1 - kLayer)})
          for (float v : test::to_host_f32(*be, *other)) ASSERT_TRUE(std::isnan(v)) << "the other layer's scales";

        // attention over the dequantized history
        TensorView out = be->alloc(DType::F32, {n, sc.n_heads * hd});
        be->attention(kLayer, qkv, p, out);
        std::vector<float> want_out(size_t(n * sc.n_heads * hd));
        for (int64_t t = 0; t < n; ++t) {
          const int32_t qpos = batch.positions[size_t(t)];
          const int32_t first = window > 0 ? std::max<int32_t>(0, qpos - int32_t(window) + 1) : 0;
          const auto& hk = hist_k[size_t(seq_of_row[size_t(t)])];
          const auto& hv = hist_v[size_t(seq_of_row[size_t(t)])];
          for (int64_t h = 0; h < sc.n_heads; ++h) {
            const float* q = rotated.data() + t * row + h * hd;
            const int64_t kvh = h / (sc.n_heads / sc.n_kv_heads);
            std::vector<double> w;
            double mx = -INFINITY, sum = 0;
            for (int32_t kp = first; kp <= qpos; ++kp) {
              double dot = 0;
              for (int64_t i = 0; i < hd; ++i) dot += double(q[i]) * hk[size_t(kp)][size_t(kvh * hd + i)];
              w.push_back(double(p.scale) * dot);
              mx = std::max(mx, w.back());
            }
            for (double& x : w) sum += (x = std::exp(x - mx));
            for (int64_t i = 0; i < hd; ++i) {
              double acc = 0;
              for (int32_t kp = first; kp <= qpos; ++kp)
                acc += w[size_t(kp - first)] * hv[size_t(kp)][size_t(kvh * hd + i)];
              want_out[size_t(t * sc.n_heads * hd + h * hd + i)] = float(acc / sum);
            }
          }
        }
        EXPECT_TRUE(test::close_rel_l2(test::to_host_f32(*be, out), want_out, kTol)) << "attention output";
      }
    }
  }
}

// ---- quantized against F32 storage ---------------------------------------------------------

// The same history with the same random q/k/v (N(0, 1), as normalised activations are) into a
// backend with an F32 cache and one with a quantized cache; the attention outputs must agree
// to relative L2 < 2e-2 (I8) or 8e-2 (FP8).
//
// I8, why 2e-2: quantization adds to each stored element an error uniform in +-scale/2, RMS
// scale / sqrt(12) = max|row| / (127 sqrt(12)); for Gaussian rows of 64-128 elements max|row|
// is ~2.5-3 sigma, so K and V carry ~0.6-0.7% relative noise. The V noise reaches the output
// at about that relative size (the output is a weighted mean of V rows, and the noise is
// averaged by the same weights); the K noise moves each score by ~0.7% of the score's spread,
// perturbing the weights by ~0.7% relative, a similar contribution. Together ~1% expected
// (measured worst 9.2e-3 over these shapes, printed below); 2e-2 leaves 2x margin. A dropped scale (scale 1), a sign error or
// a row mismatch gives O(1) errors, and a cache that loses one bit more (int4-like steps)
// would roughly double the error to the bound.
//
// FP8, why 8e-2: E4M3 rounds each element to 3 mantissa bits, an error uniform in half an
// ulp, 2^-4 of the element's binade: RMS about 2.6% of the element's own magnitude (averaged
// over mantissas), so K and V carry ~2.6% relative noise, 4x INT8's, and the output ~4x
// INT8's error (measured worst 3.7e-2, printed below; 8e-2 leaves 2x margin). Small elements keep that relative
// precision (INT8's step is fixed by the row's maximum), which is why FP8 is not worse still.
TEST_P(QuantKv, CloseToF32Cache) {
  const DType dtype = GetParam();
  const double kTol = dtype == DType::I8 ? 2e-2 : 8e-2;
  Scenario sc;
  sc.n_heads = 8;
  sc.n_kv_heads = 2;
  sc.block_size = 16;
  sc.n_blocks = 24;
  // 230 and 75 tokens: long prefills, a chunk after a prefix beside a decode, then decodes
  sc.steps = {{{0, 120}, {1, 40}}, {{1, 33}, {0, 100}}, {{0, 1}, {1, 1}}, {{1, 1}, {0, 9}}};
  sc.tables = {{3, 17, 8, 21, 0, 12, 5, 19, 10, 14, 1, 23, 7, 16, 2}, {9, 4, 22, 13, 6}};
  double worst = 0;
  for (int64_t head_dim : {64, 128}) {
    for (int64_t window : {0, 50}) {
      sc.head_dim = head_dim;
      sc.sliding_window = window;
      const int64_t row = sc.row();
      const std::vector<float> inv_freq_host = make_inv_freq(head_dim);
      for (BackendKind kind : {BackendKind::Ref, BackendKind::Cpu}) {
        std::unique_ptr<Backend> be[2] = {make_backend(kind), make_backend(kind)};
        const DType dtypes[2] = {DType::F32, dtype};
        SCOPED_TRACE(be[0]->name() + " head_dim=" + std::to_string(head_dim) + " window=" + std::to_string(window));
        TensorView inv_freq[2];
        for (int i = 0; i < 2; ++i) {
          be[i]->init_kv_cache(sc.spec(dtypes[i]));
          inv_freq[i] = be[i]->alloc(DType::F32, {head_dim / 2});
          be[i]->copy_from_host(inv_freq_host.data(), inv_freq[i]);
        }
        Rng rng(test::seed_of({head_dim, window}));
        std::vector<int32_t> n_computed(2, 0);
        for (size_t step = 0; step < sc.steps.size(); ++step) {
          SCOPED_TRACE("step " + std::to_string(step));
          const Batch batch = sc.batch(step, n_computed, nullptr);
          const int64_t n = batch.n_tokens();
          const std::vector<float> qkv_host = test::randn(rng, n * row);
          std::vector<float> outs[2];
          for (int i = 0; i < 2; ++i) {
            be[i]->set_batch(batch);
            const TensorView qkv = test::to_device(*be[i], qkv_host, n, row);
            be[i]->rope_kv_write(0, qkv, inv_freq[i], sc.params());
            const TensorView out = be[i]->alloc(DType::F32, {n, sc.n_heads * head_dim});
            be[i]->attention(0, qkv, sc.params(), out);
            outs[i] = test::to_host_f32(*be[i], out);
          }
          EXPECT_TRUE(test::close_rel_l2(outs[1], outs[0], kTol)) << dtype_name(dtype) << " cache against F32 cache";
          worst = std::max(worst, test::error_stats(outs[1], outs[0]).rel_l2);
        }
      }
    }
  }
  std::printf("%s against F32 cache: worst rel L2 %.3g (tolerance %.3g)\n", std::string(dtype_name(dtype)).c_str(), worst,
              kTol);
}

// ---- memory ----------------------------------------------------------------------------------

// kv_bytes_per_token: K and V rows of every layer, plus the two F32 scales per KV head of I8
// and FP8; and it is what the host backends actually allocate per slot.
TEST(OpsAttentionQuantKv, KvBytesPerToken) {
  KvCacheSpec spec{.n_layers = 3, .n_blocks = 5, .block_size = 4, .n_kv_heads = 2, .head_dim = 64};
  const std::pair<DType, int64_t> want[] = {{DType::F32, 3 * 2 * 2 * 64 * 4},
                                            {DType::BF16, 3 * 2 * 2 * 64 * 2},
                                            {DType::F16, 3 * 2 * 2 * 64 * 2},
                                            {DType::I8, 3 * 2 * 2 * (64 + 4)},
                                            {DType::FP8, 3 * 2 * 2 * (64 + 4)}};
  for (const auto& [dtype, bytes] : want) {
    spec.dtype = dtype;
    EXPECT_EQ(kv_bytes_per_token(spec), bytes) << dtype_name(dtype);
    for (BackendKind kind : {BackendKind::Ref, BackendKind::Cpu}) {
      auto be = make_backend(kind);
      be->init_kv_cache(spec);
      HostBackend& hb = test::as_host(*be);
      int64_t allocated = 0;
      for (int il = 0; il < 3; ++il)
        for (const TensorView* t : {&hb.k_cache(il), &hb.v_cache(il), &hb.k_scale(il), &hb.v_scale(il)})
          allocated += t->data ? int64_t(t->nbytes()) : 0;
      EXPECT_EQ(allocated, kv_bytes_per_token(spec) * spec.n_blocks * spec.block_size)
          << be->name() << " " << dtype_name(dtype);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, QuantKv, ::testing::Values(DType::I8, DType::FP8),
                         [](const ::testing::TestParamInfo<DType>& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace tf

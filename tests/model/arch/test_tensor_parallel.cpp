// Tensor parallelism on the CPU (in-process communicator): TP = 2 and 4 give the logits of
// TP = 1 within 1e-5 relative at every prompt position and the same greedy ids, on
// tiny-main (4 heads, 2 KV heads: replicated at TP = 4) and the parity models (llama-mha:
// MHA; qwen2: QKV biases, tied embeddings, KV heads replicated at TP = 4; qwen3: q/k norms;
// gemma3: local and global layers; phi3: fused qkv and gate_up; mixtral and qwen3-moe: every
// expert's columns split as an MLP's, the router replicated); each rank holds only its shard
// of the weights. Quantized tiny-main (int8, int4, fp8) at TP = 2 against TP = 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/backend.h"
#include "engine/golden_util.h"
#include "engine/greedy_util.h"
#include "model/arch/tensor_parallel_model.h"
#include "model/config.h"
#include "param_name.h"
#include "twofold/engine.h"

namespace tf {
namespace {

// Summation order is all that differs (the K split of o_proj and down_proj, and the
// all-reduce), so F32 logits agree to a few ulps of the row's scale.
constexpr double kRelTol = 1e-5;

EngineOptions options(const std::string& model, int tp) {
  return EngineOptions{.model_dir = test::golden_model_dir(model), .max_seqs = 8, .tensor_parallel = tp};
}

// max_j |a_j - b_j| / max_j |b_j| over one row of logits.
double row_rel_err(const float* a, const float* b, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t j = 0; j < n; ++j) {
    diff = std::max(diff, std::fabs(double(a[j]) - b[j]));
    scale = std::max(scale, std::fabs(double(b[j])));
  }
  return diff / scale;
}

class TensorParallelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TensorParallelTest, LogitsAndGreedyIdsEqualTp1) {
  const std::string model = GetParam();
  const std::vector<test::GoldenPrompt> prompts = test::load_golden(model);
  Engine one(options(model, 1));
  const int64_t n_vocab = one.config().n_vocab;
  std::vector<std::vector<float>> ref;
  for (const test::GoldenPrompt& g : prompts) ref.push_back(one.score(g.input_ids, /*all_positions=*/true));
  const auto ref_greedy = test::greedy_batched(one, prompts);

  for (int tp : {2, 4}) {
    Engine sharded(options(model, tp));
    double worst = 0;
    for (size_t p = 0; p < prompts.size(); ++p) {
      SCOPED_TRACE(model + "/" + prompts[p].name + " tp " + std::to_string(tp));
      const std::vector<float> got = sharded.score(prompts[p].input_ids, /*all_positions=*/true);
      ASSERT_EQ(got.size(), ref[p].size());
      for (size_t i = 0; i < prompts[p].input_ids.size(); ++i) {
        const double e = row_rel_err(got.data() + i * n_vocab, ref[p].data() + i * n_vocab, n_vocab);
        worst = std::max(worst, e);
        EXPECT_LE(e, kRelTol) << "position " << i;
      }
    }
    std::printf("[ note ] %s tp %d: worst relative logit error %.2g\n", model.c_str(), tp, worst);
    EXPECT_EQ(test::greedy_batched(sharded, prompts), ref_greedy) << "tp " << tp;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TensorParallelTest,
                         ::testing::Values("tiny-main", "llama-mha", "qwen2", "qwen3", "gemma3", "phi3", "mixtral",
                                           "qwen3-moe"),
                         test::ParamName());

// Quantized tiny-main (rounded at load, LM head included) on 2 ranks. Each rank holds whole
// rows (q/k/v, gate/up, the LM head) or whole int4 groups (o, down: 128 of 256 and 288 of 576
// inputs, groups of 128 and 96) of the unsharded codes, with their scales, so the sharded
// products are TP = 1's with the sums over the K split of o and down regrouped:
// - On the reference backend (dequantized weights, F32 activations) every format agrees with
//   TP = 1 to summation order (kRelTol) and gives the same greedy ids.
// - On the CPU backend FP8 (dequantizing path, F32 activations) does too. INT8 and INT4 run the
//   integer kernels, which round activations to int8 in blocks (matmul_quant_fast.cpp): there
//   TP = 2 and TP = 1 differ by up to 1.4% of a row's largest logit (measured, int8 1.1%, int4
//   1.4%; bound 2.5%), more than summation order, so near-ties may flip a greedy id and only
//   the logits are compared. The cause is not isolated (the ref results rule out the sharding).
struct QuantTpCase {
  const char* format;
  double cpu_tol;
  bool cpu_greedy;
};
class QuantizedTensorParallelTest : public ::testing::TestWithParam<QuantTpCase> {};

TEST_P(QuantizedTensorParallelTest, LogitsAndGreedyIdsEqualTp1) {
  const QuantTpCase c = GetParam();
  std::vector<test::GoldenPrompt> prompts = test::load_golden("tiny-main");
  for (const char* backend : {"cpu", "ref"}) {
    const bool ref = std::string(backend) == "ref";
    if (ref) prompts.resize(3);  // the reference backend is slow
    const double tol = ref ? kRelTol : c.cpu_tol;
    EngineOptions o = options("tiny-main", 1);
    o.backend = backend;
    o.weights.quantization = c.format;
    o.weights.quantize_lm_head = true;
    Engine one(o);
    o.tensor_parallel = 2;
    Engine two(o);
    const int64_t n_vocab = one.config().n_vocab;
    double worst = 0;
    for (const test::GoldenPrompt& g : prompts) {
      SCOPED_TRACE(std::string(backend) + " " + g.name);
      const std::vector<float> a = one.score(g.input_ids, /*all_positions=*/true);
      const std::vector<float> b = two.score(g.input_ids, /*all_positions=*/true);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < g.input_ids.size(); ++i) {
        const double e = row_rel_err(b.data() + i * n_vocab, a.data() + i * n_vocab, n_vocab);
        worst = std::max(worst, e);
        EXPECT_LE(e, tol) << "position " << i;
      }
    }
    std::printf("[ note ] tiny-main %s %s tp 2: worst relative logit error %.2g\n", c.format, backend, worst);
    if (ref || c.cpu_greedy) {
      EXPECT_EQ(test::greedy_batched(two, prompts), test::greedy_batched(one, prompts)) << backend;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantizedTensorParallelTest,
                         ::testing::Values(QuantTpCase{"int8", 0.025, false}, QuantTpCase{"int4", 0.025, false},
                                           QuantTpCase{"fp8", kRelTol, true}),
                         [](const auto& info) { return std::string(info.param.format); });

// Bytes one rank holds, from the shard layout: replicated embedding and norms, plus its
// slices of q/k/v/o (by heads), gate/up/down (by d_ff) and the LM head (by vocabulary).
int64_t expected_rank_bytes(const ModelConfig& c, const TpShard& s, int64_t elem) {
  const int64_t d = c.d_model, hd = c.head_dim;
  int64_t layers = 0;
  for (const TpLayer& l : s.layers) layers += d * hd * (2 * l.n_heads + 2 * l.n_kv_heads) + 3 * d * l.d_ff + 2 * d;
  return elem * (c.n_vocab * d + d + layers + s.n_vocab * d);
}

TEST(TensorParallelLoad, EachRankHoldsOnlyItsShard) {
  const std::string dir = test::model_dir("tiny-main");  // BF16, untied LM head
  auto be1 = make_backend(BackendKind::Cpu);
  const auto full = load_model(dir, *be1);
  const ModelConfig& c = full->config();
  EXPECT_EQ(full->weight_bytes(), expected_rank_bytes(c, tp_shard(c, 0, 1), 2));
  const int64_t replicated = 2 * (c.n_vocab * c.d_model + (2 * c.n_layers + 1) * c.d_model);
  for (int tp : {2, 4}) {
    auto be0 = make_backend(BackendKind::Cpu);
    std::vector<std::unique_ptr<Backend>> others;
    for (int r = 1; r < tp; ++r) others.push_back(make_backend(BackendKind::Cpu));
    TensorParallelModel m(dir, *be0, std::move(others), {});
    for (int r = 0; r < tp; ++r) {
      const TpShard& s = m.layout(r);
      const TpLayer& l = s.layer(3);
      EXPECT_EQ(l.n_heads, c.n_heads / tp);
      EXPECT_EQ(l.n_kv_heads, tp <= c.n_kv_heads ? c.n_kv_heads / tp : 1);  // replicated past 2 ranks
      EXPECT_EQ(l.kv_head0, tp <= c.n_kv_heads ? r * l.n_kv_heads : r * c.n_kv_heads / tp);
      EXPECT_EQ(m.shard(r).weight_bytes(), expected_rank_bytes(c, s, 2)) << "tp " << tp << " rank " << r;
    }
    // The sharded tensors split into N parts (at TP = 2 exactly; at TP = 4 the 2 KV heads
    // are each held by two ranks).
    const int64_t sharded = full->weight_bytes() - replicated;
    if (tp == 2) {
      EXPECT_EQ(m.shard(1).weight_bytes() - replicated, sharded / 2);
    }
    EXPECT_LT(m.shard(0).weight_bytes() - replicated, sharded / tp + sharded / 8);
  }
}

TEST(TensorParallelLoad, RejectsSizesThatDoNotSplitTheModel) {
  EXPECT_CONTAINS(test::error_of([] { Engine e(options("tiny-main", 3)); }),
                  "tensor parallel size 3 does not divide num_attention_heads = 4");
  EXPECT_CONTAINS(test::error_of([] { Engine e(options("tiny-main", 0)); }), "at least 1, got 0");
  ModelConfig c{.d_ff = 8, .n_layers = 1, .n_heads = 12, .n_kv_heads = 3, .n_vocab = 16};
  EXPECT_CONTAINS(test::error_of([&] { tp_shard(c, 0, 2); }), "neither divides num_key_value_heads = 3");
}

TEST(TensorParallelLoad, ReferenceBackendShardsToo) {
  const std::vector<test::GoldenPrompt> prompts = test::load_golden("llama-mha");
  const std::vector<int32_t>& ids = prompts[0].input_ids;
  EngineOptions o = options("llama-mha", 1);
  o.backend = "ref";
  Engine one(o);
  o.tensor_parallel = 2;
  Engine two(o);
  const std::vector<float> a = one.score(ids, false), b = two.score(ids, false);
  EXPECT_LE(row_rel_err(b.data(), a.data(), int64_t(a.size())), kRelTol);
}

}  // namespace
}  // namespace tf

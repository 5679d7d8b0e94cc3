// Quantized linear weights on the architectures beyond Llama (the parity models: Qwen3's q/k
// norms, Gemma 3's (1 + w) norms, Phi-3's fused qkv_proj and gate_up_proj, Mixtral's and
// Qwen3-MoE's experts): quantizing at load stays within the format's error of the 16-bit
// logits, every step uses the copy of its size in the shared decoder forward, and `twofold
// quantize` writes a mixture-of-experts model with its experts 16-bit (equal to quantizing at
// load) and refuses what it does not handle, saying why.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>

#include "backend/backend.h"
#include "convert/quantize_model.h"
#include "core/error.h"
#include "model/arch/model.h"
#include "model/arch/registry.h"
#include "convert/step_logits.h"
#include "test_util.h"
#include "twofold/engine.h"

namespace tf {
namespace {

const std::vector<int32_t> kPrompt = {1, 450, 365, 5, 27, 99, 1000, 12};

std::string parity(const std::string& m) { return test::model_dir("parity/" + m); }

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) d += double(a[i] - b[i]) * (a[i] - b[i]), n += double(b[i]) * b[i];
  return std::sqrt(d / n);
}

class QuantizeArch : public ::testing::TestWithParam<std::string> {};

// Bounds above the rel L2 errors measured on these models' last-position logits on the CPU
// backend (printed): int8 0.013-0.032, int4 g128 0.17-0.33 (one group per row of these
// 128-wide random models).
TEST_P(QuantizeArch, QuantizingAtLoadStaysCloseToSixteenBit) {
  const std::string dir = parity(GetParam());
  Engine dense(EngineOptions{.model_dir = dir, .max_seqs = 1});
  const std::vector<float> d = dense.score(kPrompt, false);
  for (const auto& [name, bound] : {std::pair<const char*, double>{"int8", 0.05}, {"int4", 0.45}}) {
    SCOPED_TRACE(name);
    Engine q(EngineOptions{.model_dir = dir, .weights = {.quantization = name}, .max_seqs = 1});
    const std::vector<float> l = q.score(kPrompt, false);
    const double err = rel_l2(l, d);
    std::printf("%s %s: logits rel L2 error %.4f\n", GetParam().c_str(), name, err);
    EXPECT_GT(err, 0.0);
    EXPECT_LT(err, bound);
  }
}

// Two copies, int8 for steps of 1-3 tokens and as stored from 4: each step's logits are those
// of the model holding only the copy its size picks.
TEST_P(QuantizeArch, EachStepUsesTheCopyOfItsSize) {
  const std::string dir = parity(GetParam());
  const WeightCopy int8{.kind = WeightCopy::Kind::Quantized, .format = DType::W8};
  const WeightCopy stored{.kind = WeightCopy::Kind::Stored, .min_tokens = 4};
  auto be = make_backend(BackendKind::Cpu), be_q = make_backend(BackendKind::Cpu), be_d = make_backend(BackendKind::Cpu);
  auto model = load_model(dir, *be, LoadOptions{.weight_copies = {int8, stored}});
  ASSERT_EQ(model->weight_copies().size(), 2u);
  EXPECT_LT(model->step_weight_bytes(1), model->step_weight_bytes(4));
  auto only_q = load_model(dir, *be_q, LoadOptions{.weight_copies = {int8}});
  auto only_d = load_model(dir, *be_d, LoadOptions{});
  const ModelConfig& cfg = model->config();
  KvCacheSpec kv{.n_layers = cfg.n_layers, .n_blocks = 4, .block_size = 16, .n_kv_heads = cfg.n_kv_heads,
                 .head_dim = cfg.head_dim, .dtype = DType::F32, .layer_group = cfg.kv_layer_groups()};
  if (!kv.layer_group.empty()) kv.group_blocks = {4, 4};  // Gemma 3: full and sliding layers apart
  for (auto [m, b] : {std::pair<Model*, Backend*>{model.get(), be.get()}, {only_q.get(), be_q.get()},
                      {only_d.get(), be_d.get()}})
    m->init_kv_cache(*b, kv);
  for (int32_t n : {1, 3, 4, 6}) {
    SCOPED_TRACE(n);
    auto forward = [&](Model& m, Backend& b) { return test::step_logits(m, b, kPrompt, n, kv.n_groups()); };
    const auto [copy, logits] = forward(*model, *be);
    EXPECT_EQ(copy, n < 4 ? 0 : 1);
    EXPECT_EQ(logits, (n < 4 ? forward(*only_q, *be_q) : forward(*only_d, *be_d)).second);
  }
}

// Crossovers measured at load run decode and prefill steps over every KV group (Gemma 3 keeps
// its sliding layers' KV apart); the engine then serves with both copies.
TEST_P(QuantizeArch, MeasuredCrossoversAndScoring) {
  const std::string dir = parity(GetParam());
  Engine e(EngineOptions{.model_dir = dir, .weights = {.per_batch = "int8,stored"}, .max_batch_tokens = 64,
                         .max_seqs = 4});
  EXPECT_EQ(e.weight_copy_names(), (std::vector<std::string>{"int8", "as stored"}));
  Engine dense(EngineOptions{.model_dir = dir, .max_seqs = 1});
  EXPECT_LT(rel_l2(e.score(kPrompt, false), dense.score(kPrompt, false)), 0.05);
}

INSTANTIATE_TEST_SUITE_P(Parity, QuantizeArch, ::testing::Values("qwen3", "gemma3", "phi3", "mixtral", "qwen3-moe"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

class QuantizeMoe : public test::TempDirTest {};

// Mixtral written int8 by round-to-nearest: the experts stay 16-bit in the folder, and its
// logits equal quantizing at load (which keeps them 16-bit too).
TEST_F(QuantizeMoe, RtnWritesExpertsSixteenBitAndEqualsQuantizingAtLoad) {
  const std::string out = (dir_ / "mixtral-int8").string();
  quantize_model(QuantizeParams{.in_dir = parity("mixtral"), .out_dir = out, .format = DType::W8, .sensitivity = false});
  const ModelConfig cfg = load_model_config(out);
  EXPECT_EQ(cfg.quant.format, DType::W8);
  const WeightTable t = weight_table(cfg);
  for (const WeightSpec& w : t.weights)
    if (w.key.role == WeightRole::ExpertsGateUp || w.key.role == WeightRole::ExpertsDown)
      EXPECT_EQ(w.format, WeightFormat::Dense) << weight_role_name(w.key.role) << " " << w.key.layer;
    else if (w.key.role == WeightRole::Wqkv)
      EXPECT_EQ(w.format, WeightFormat::Int8);
  Engine stored(EngineOptions{.model_dir = out, .max_seqs = 1});
  Engine at_load(EngineOptions{.model_dir = parity("mixtral"), .weights = {.quantization = "int8"}, .max_seqs = 1});
  EXPECT_EQ(stored.score(kPrompt, false), at_load.score(kPrompt, false));
}

TEST_F(QuantizeMoe, CalibrationIsRefusedNamingTheModel) {
  const std::string msg = test::error_of([&] {
    quantize_model(QuantizeParams{.in_dir = parity("mixtral"), .out_dir = (dir_ / "x").string(), .format = DType::W8,
                                  .calib_ids = kPrompt});
  });
  EXPECT_CONTAINS(msg, "mixture-of-experts");
  EXPECT_CONTAINS(msg, "--method rtn");
}

TEST_F(QuantizeMoe, FusedTensorsAreRefusedNamingTheTensor) {
  const std::string msg = test::error_of([&] {
    quantize_model(QuantizeParams{.in_dir = parity("phi3"), .out_dir = (dir_ / "x").string(), .format = DType::W8,
                                  .sensitivity = false});
  });
  EXPECT_CONTAINS(msg, "qkv_proj");
  EXPECT_CONTAINS(msg, "fused tensor");
}

}  // namespace
}  // namespace tf

// Quantized linear weights on the architectures beyond Llama (the parity models: Qwen3's q/k
// norms, Gemma 3's (1 + w) norms, Phi-3's fused qkv_proj and gate_up_proj, Mixtral's and
// Qwen3-MoE's experts): quantizing at load stays within the format's error of the 16-bit
// logits, every step uses the copy of its size in the shared decoder forward, and `twofold
// quantize` writes Phi-3's fused tensors whole and mixture-of-experts models with every
// expert quantized (calibrated on the tokens routed to it).
#include <gtest/gtest.h>

#include <cmath>
#include <utility>

#include "backend/backend.h"
#include "convert/quantize_model.h"
#include "core/error.h"
#include "model/arch/model.h"
#include "model/arch/registry.h"
#include "model/safetensors.h"
#include "convert/step_logits.h"
#include "engine/golden_util.h"
#include "test_util.h"
#include "twofold/engine.h"

namespace tf {
namespace {

using test::rel_l2;

const std::vector<int32_t> kPrompt = {1, 450, 365, 5, 27, 99, 1000, 12};

std::string parity(const std::string& m) { return test::model_dir("parity/" + m); }

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

class QuantizeArchFolder : public test::TempDirTest {
 protected:
  QuantizeReport quantize(const std::string& model, const std::string& method, const std::vector<int32_t>& calib,
                          const std::string& out) {
    return quantize_model(QuantizeParams{.in_dir = parity(model), .out_dir = out, .format = DType::W8, .method = method,
                                         .calib_ids = calib, .sensitivity = false});
  }
  // Calibration tokens: every id below the vocabulary of the parity models, a few times over.
  static std::vector<int32_t> calib_tokens(int n) {
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i) ids.push_back(int32_t((i * 7919 + 13) % 1000));
    return ids;
  }
};

// Phi-3's fused qkv_proj and gate_up_proj are written as one module each (all their rows, q|k|v
// and gate|up at their split points), by round to nearest (equal to quantizing at load) and
// by AWQ and GPTQ on calibration rows (AWQ folds down's scales into the up half of gate_up_proj);
// every folder loads and stays within int8's error of the 16-bit logits (measured rel L2 on
// this prompt, CPU backend: rtn 0.030, awq 0.030, gptq 0.033; bound 0.05 as above).
TEST_F(QuantizeArchFolder, Phi3FusedTensorsAreQuantizedWhole) {
  Engine dense(EngineOptions{.model_dir = parity("phi3"), .max_seqs = 1});
  const std::vector<float> d = dense.score(kPrompt, false);
  const ModelConfig cfg = load_model_config(parity("phi3"));
  for (const std::string method : {"rtn", "awq", "gptq"}) {
    SCOPED_TRACE(method);
    const std::string out = (dir_ / ("phi3-" + method)).string();
    const QuantizeReport r = quantize("phi3", method, method == "rtn" ? std::vector<int32_t>{} : calib_tokens(512), out);
    const SafetensorsFile f(out + "/model.safetensors");
    const auto& t = f.tensors();
    const int64_t qkv_rows = (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim;
    ASSERT_TRUE(t.contains("model.layers.0.self_attn.qkv_proj.qweight"));
    EXPECT_EQ(t.at("model.layers.0.self_attn.qkv_proj.qweight").shape, (std::vector<int64_t>{qkv_rows, cfg.d_model}));
    EXPECT_EQ(t.at("model.layers.0.self_attn.qkv_proj.scales").shape, (std::vector<int64_t>{qkv_rows}));
    EXPECT_EQ(t.at("model.layers.3.mlp.gate_up_proj.qweight").shape, (std::vector<int64_t>{2 * cfg.d_ff, cfg.d_model}));
    EXPECT_FALSE(t.contains("model.layers.0.self_attn.qkv_proj.weight"));
    for (const WeightReport& w : r.weights)  // o's input has no norm or rows to fold into: rtn under awq
      EXPECT_NE(w.how.find(method == "awq" && w.name.ends_with(" wo") ? std::string("rtn") : method), std::string::npos)
          << w.name << ": " << w.how;
    Engine q(EngineOptions{.model_dir = out, .max_seqs = 1});
    const std::vector<float> l = q.score(kPrompt, false);
    const double err = rel_l2(l, d);
    std::printf("phi3 int8 %s: logits rel L2 error %.4f\n", method.c_str(), err);
    EXPECT_GT(err, 0.0);
    EXPECT_LT(err, 0.05);
    if (method == "rtn") {
      Engine at_load(EngineOptions{.model_dir = parity("phi3"), .weights = {.quantization = "int8"}, .max_seqs = 1});
      EXPECT_EQ(l, at_load.score(kPrompt, false));
    }
  }
}

class QuantizeMoe : public QuantizeArchFolder, public ::testing::WithParamInterface<const char*> {};

// Mixtral and Qwen3-MoE written int8: every expert's w1|w3 (gate|up) and w2 (down) stored
// quantized, by round to nearest (equal to quantizing at load, which quantizes the experts
// too) and by GPTQ on each expert's routed calibration tokens; the router stays 16-bit. The
// folders load on the CPU backend (integer kernels on each expert's rows) and on the reference
// backend, whose logits agree within the CPU kernels' activation rounding, and stay within
// int8's error of the 16-bit logits (measured rel L2 on this prompt, CPU backend: rtn 0.028,
// gptq 0.037-0.041; bound 0.05).
TEST_P(QuantizeMoe, ExpertsAreQuantizedAndRunOnTheHostBackends) {
  const std::string model = GetParam();
  Engine dense(EngineOptions{.model_dir = parity(model), .max_seqs = 1});
  const std::vector<float> d = dense.score(kPrompt, false);
  for (const std::string method : {"rtn", "gptq"}) {
    SCOPED_TRACE(method);
    const std::string out = (dir_ / (model + "-" + method)).string();
    const QuantizeReport r = quantize(model, method, method == "rtn" ? std::vector<int32_t>{} : calib_tokens(512), out);
    const ModelConfig cfg = load_model_config(out);
    const WeightTable t = weight_table(cfg);
    int n_expert_weights = 0;
    for (const WeightSpec& w : t.weights) {
      if (w.key.role == WeightRole::ExpertsGateUp || w.key.role == WeightRole::ExpertsDown) {
        EXPECT_EQ(w.format, WeightFormat::Int8) << weight_role_name(w.key.role) << " " << w.key.layer;
        ++n_expert_weights;
      }
      if (w.key.role == WeightRole::Router) {
        EXPECT_EQ(w.format, WeightFormat::Dense);
      }
    }
    EXPECT_GT(n_expert_weights, 0);
    int n_expert_rows = 0;
    for (const WeightReport& w : r.weights)
      if (w.name.find("expert") != std::string::npos) {
        ++n_expert_rows;
        if (method == "gptq") {  // each expert calibrated on its own tokens (512 tokens reach every one)
          EXPECT_GE(w.output_error, 0.0) << w.name << ": " << w.how;
        }
      }
    EXPECT_EQ(n_expert_rows, n_expert_weights * cfg.n_experts);
    Engine q(EngineOptions{.model_dir = out, .max_seqs = 1});
    const std::vector<float> l = q.score(kPrompt, false);
    const double err = rel_l2(l, d);
    std::printf("%s int8 %s: logits rel L2 error %.4f\n", model.c_str(), method.c_str(), err);
    EXPECT_GT(err, 0.0);
    EXPECT_LT(err, 0.05);
    Engine ref(EngineOptions{.model_dir = out, .backend = "ref", .max_seqs = 1});
    const double cpu_vs_ref = rel_l2(l, ref.score(kPrompt, false));
    std::printf("%s int8 %s: CPU vs reference rel L2 %.2g\n", model.c_str(), method.c_str(), cpu_vs_ref);
    // The CPU integer kernels round activations to int8 per block of 32 (about 0.5% of an
    // output's scale per matmul, test_ops_matmul_quant_fast), compounding over 4 layers of
    // these random models: measured 0.015-0.025.
    EXPECT_LT(cpu_vs_ref, 0.04);
    if (method == "rtn") {
      Engine at_load(EngineOptions{.model_dir = parity(model), .weights = {.quantization = "int8"}, .max_seqs = 1});
      EXPECT_EQ(l, at_load.score(kPrompt, false));
    }
  }
}

// With 4 calibration tokens at most 8 (token, expert) pairs per layer are routed, so some of
// Qwen3-MoE's 8 experts get none: those are rounded to nearest and the table says so; the
// others are calibrated.
TEST_P(QuantizeMoe, ExpertsWithoutRoutedTokensFallBackToRtn) {
  const std::string model = GetParam();
  const QuantizeReport r = quantize(model, "gptq", {1, 450, 365, 5}, (dir_ / "few").string());
  int calibrated = 0, fallback = 0;
  for (const WeightReport& w : r.weights) {
    if (w.name.find("expert") == std::string::npos) continue;
    if (w.how.find("no tokens routed") != std::string::npos) {
      ++fallback;
      EXPECT_LT(w.output_error, 0.0) << w.name;
    } else {
      ++calibrated;
      EXPECT_CONTAINS(w.how, "gptq");
      EXPECT_GE(w.output_error, 0.0) << w.name;
    }
  }
  EXPECT_GT(calibrated, 0);
  if (std::string(model) == "qwen3-moe") {
    EXPECT_GT(fallback, 0);
  }
  for (const std::string& line : format_report(r))
    if (line.find("no tokens routed") != std::string::npos) return;
  if (fallback > 0) ADD_FAILURE() << "the printed table does not say which experts fell back";
}

INSTANTIATE_TEST_SUITE_P(Parity, QuantizeMoe, ::testing::Values("mixtral", "qwen3-moe"), [](const auto& info) {
  return std::string(info.param) == "mixtral" ? std::string("mixtral") : std::string("qwen3_moe");
});

}  // namespace
}  // namespace tf

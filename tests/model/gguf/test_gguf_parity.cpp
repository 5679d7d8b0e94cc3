// The parity models of the other architectures as llama.cpp's converter writes them
// (models/gguf/parity, F32: see its README) against transformers' golden vectors, through the
// same Engine as `twofold generate`, with the assertions of tests/engine/test_golden.cpp: the
// tokenizer read from the file gives the golden prompt ids, the last logits are within 1e-4
// relative L2, the argmax at every prompt position and the greedy continuation agree; and the
// config read from the metadata equals the folder's config.json where both describe the model.
// Each file exercises one of llama.cpp's conventions that the loader undoes or follows:
//   qwen3        q/k norms (attn_q_norm, attn_k_norm), head_dim above hidden / heads
//   gemma3       norms stored as 1 + w; ffn_norm as the pre-feed-forward norm; sliding layers
//                every 3rd layer full (attention.sliding_window_pattern) with their own RoPE base
//   phi3         fused attn_qkv and ffn_up (gate and up), partial RoPE (rope.dimension_count)
//   mixtral      llama with experts: stacked ffn_*_exps split per expert, router ffn_gate_inp,
//                Q/K rows reordered for ggml's RoPE
//   qwen3-moe-sparse  qwen3moe: Qwen3's attention with experts in every layer
//   llama3-rope  Llama 3.1's RoPE scaling as the rope_freqs tensor
#include <gtest/gtest.h>

#include "engine/golden_check.h"
#include "model/arch/registry.h"
#include "twofold/engine.h"

namespace tf {
namespace {

constexpr double kLogitTol = 1e-4;  // F32 weights: only the summation order differs
constexpr double kTieTol = 1e-3;
// Q8_0 files of the MoE models: relative L2 of the last logits to transformers' (float32
// weights), measured 0.019-0.073 (random weights amplify the rounding); blocks on the integer
// kernels (activations rounded to 16 bits per block) to the same file dequantized, measured
// 0.7e-4 to 1.02e-4. Bounds with room; a misplaced expert slice gives about 1.
constexpr double kQ8Tol = 0.1;
constexpr double kKernelTol = 5e-4;

std::string gguf_path(const std::string& model) {
  return std::string(TF_GGUF_MODELS_DIR) + "/parity/" + model + "-f32.gguf";
}

class GgufParity : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufParity, ConfigEqualsTheFolders) {
  const ModelConfig g = load_model_config(gguf_path(GetParam()));
  const ModelConfig h = load_model_config(test::golden_model_dir(GetParam()));
  EXPECT_EQ(g.model_type, h.model_type);
  EXPECT_EQ(g.d_model, h.d_model);
  EXPECT_EQ(g.n_layers, h.n_layers);
  EXPECT_EQ(g.n_heads, h.n_heads);
  EXPECT_EQ(g.n_kv_heads, h.n_kv_heads);
  EXPECT_EQ(g.head_dim, h.head_dim);
  EXPECT_EQ(g.rotary_dim, h.rotary_dim);
  EXPECT_EQ(g.n_vocab, h.n_vocab);
  EXPECT_EQ(g.rope_theta, h.rope_theta);
  EXPECT_EQ(g.rope_local.theta, h.rope_local.theta);
  EXPECT_EQ(g.layer_types, h.layer_types);
  EXPECT_EQ(g.sliding_window, h.sliding_window);
  EXPECT_EQ(g.qk_norm, h.qk_norm);
  EXPECT_EQ(g.attention_bias, h.attention_bias);
  EXPECT_FLOAT_EQ(g.attn_scale, h.attn_scale);
  EXPECT_FLOAT_EQ(g.embed_scale, h.embed_scale);
  EXPECT_EQ(g.mlp_act, h.mlp_act);
  EXPECT_EQ(g.n_experts, h.n_experts);
  EXPECT_EQ(g.n_experts_per_tok, h.n_experts_per_tok);
  EXPECT_EQ(g.d_ff_expert, h.d_ff_expert);
  EXPECT_EQ(g.moe_renormalize, h.moe_renormalize);
  EXPECT_EQ(g.moe_layers, h.moe_layers);
  EXPECT_EQ(g.tie_word_embeddings, h.tie_word_embeddings);
  EXPECT_EQ(g.eos_ids, h.eos_ids);
  // The RoPE scaling: the folder's llama3 parameters, the file's per-frequency divisors.
  if (h.rope_scaling.type == RopeScaling::Type::Llama3) EXPECT_EQ(g.rope_scaling.type, RopeScaling::Type::Factors);
  else EXPECT_EQ(g.rope_scaling.type, h.rope_scaling.type);
}

TEST_P(GgufParity, LogitsAndGreedyMatchTransformers) {
  Engine engine(EngineOptions{.model_dir = gguf_path(GetParam()), .max_seqs = 4});
  test::expect_matches_golden(engine, GetParam(), kLogitTol, kTieTol);
}

// The experts' stacked tensors in Q8_0 blocks (llama.cpp's converter, --outtype q8_0, stored
// uncompressed in models/gguf/parity): each
// expert's slice of blocks, kept in blocks for the CPU backend's integer kernels or
// dequantized (--dequantize), against transformers' logits.
class GgufParityQ8 : public ::testing::TestWithParam<std::string> {};

std::vector<float> last_logits(Engine& e, const std::vector<int32_t>& ids) {
  const std::vector<float> all = e.score(ids, /*all_positions=*/false);
  return {all.end() - e.config().n_vocab, all.end()};
}

TEST_P(GgufParityQ8, BlocksAndDequantizedMatchTransformers) {
  const std::string model = GetParam(), path = test::source_path("models/gguf/parity/" + model + "-q8_0.gguf");
  Engine blocks(EngineOptions{.model_dir = path, .max_seqs = 1});
  Engine dequant(EngineOptions{.model_dir = path, .weights = {.dequantize_gguf = true}, .max_seqs = 1});
  for (const test::GoldenPrompt& g : test::load_golden(model)) {
    SCOPED_TRACE(model + "/" + g.name);
    const std::vector<float> b = last_logits(blocks, g.input_ids), d = last_logits(dequant, g.input_ids);
    const double b_err = test::rel_l2(b.data(), g.last_logits.data(), b.size());
    const double d_err = test::rel_l2(d.data(), g.last_logits.data(), d.size());
    const double bd = test::rel_l2(b.data(), d.data(), d.size());
    std::printf("[ note ] %s/%s: rel L2 to transformers %.4g (blocks) %.4g (dequantized), blocks to dequantized %.4g\n",
                model.c_str(), g.name.c_str(), b_err, d_err, bd);
    EXPECT_LE(d_err, kQ8Tol);
    EXPECT_LE(b_err, kQ8Tol);
    EXPECT_LE(bd, kKernelTol);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GgufParityQ8, ::testing::Values("mixtral", "qwen3-moe-sparse"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) if (ch == '-') ch = '_';
                           return n;
                         });

INSTANTIATE_TEST_SUITE_P(Models, GgufParity,
                         ::testing::Values("qwen3", "gemma3", "phi3", "mixtral", "qwen3-moe-sparse", "llama3-rope"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace tf

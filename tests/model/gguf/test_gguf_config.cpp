// Config and weights from GGUF metadata and tensors: every refusal names the file and the key
// or tensor (hand-made files; the real ones are in test_gguf_models and test_gguf_smollm2).
#include <gtest/gtest.h>

#include "model/gguf/gguf_bytes.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf_config.h"
#include "model/gguf_weights.h"
#include "test_util.h"

namespace tf {
namespace {

using test::GgufBytes;

// A llama header with `extra` more keys appended by the caller: n_kv counts them.
GgufBytes llama(uint64_t n_tensors, uint64_t n_extra, uint32_t layers = 1, uint32_t kv_heads = 2) {
  GgufBytes g;
  g.header(n_tensors, 9 + n_extra).kv_str("general.architecture", "llama").kv_u32("llama.embedding_length", 32)
      .kv_u32("llama.feed_forward_length", 64).kv_u32("llama.block_count", layers)
      .kv_u32("llama.attention.head_count", 4).kv_u32("llama.attention.head_count_kv", kv_heads)
      .kv_u32("llama.context_length", 128).kv_u32("llama.vocab_size", 16)
      .str("llama.attention.layer_norm_rms_epsilon").u32(6).num(1e-5f);
  return g;
}

std::string config_error(const GgufBytes& g) {
  return test::error_of([&] {
    const GgufFile f(std::span<const uint8_t>(g.bytes().data(), g.bytes().size()), "cfg.gguf");
    gguf_model_config(f);
  });
}

TEST(GgufConfig, Refusals) {
  EXPECT_CONTAINS(config_error(GgufBytes().header(0, 1).kv_str("general.architecture", "mamba")),
                  "cfg.gguf: metadata 'general.architecture': is \"mamba\": this architecture is not supported");
  EXPECT_CONTAINS(config_error(llama(0, 0, /*layers=*/2000000000)),
                  "metadata 'llama.block_count': is 2000000000 (expected a positive integer no larger than 1024)");
  EXPECT_CONTAINS(config_error(llama(0, 0, 1, /*kv_heads=*/3)), "metadata 'llama.attention.head_count_kv': is 3, which does not divide");
  EXPECT_CONTAINS(config_error(llama(0, 0, 1, 0)), "metadata 'llama.attention.head_count_kv': is 0");
  GgufBytes partial = llama(0, 1);
  partial.kv_u32("llama.rope.dimension_count", 4);
  EXPECT_CONTAINS(config_error(partial), "metadata 'llama.rope.dimension_count': is 4, not the head size 8: partial "
                                        "rotary embeddings are supported for phi3 only");
  GgufBytes scaled = llama(0, 1);
  scaled.kv_str("llama.rope.scaling.type", "yarn");
  EXPECT_CONTAINS(config_error(scaled), "metadata 'llama.rope.scaling.type': is \"yarn\"");
  GgufBytes freqs = llama(1, 0);
  freqs.tensor("rope_freqs.weight", {4}, 0, 0).pad_to(32).zeros(16);
  EXPECT_CONTAINS(config_error(freqs), "cfg.gguf: tensor 'rope_freqs.weight' holds 0 (expected positive factors)");
  GgufBytes short_freqs = llama(1, 0);
  short_freqs.tensor("rope_freqs.weight", {3}, 0, 0).pad_to(32).zeros(12);
  EXPECT_CONTAINS(config_error(short_freqs), "tensor 'rope_freqs.weight' (F32, 3 values) must be F32 with 4 values");
  GgufBytes freqs_and_linear = llama(1, 2);
  freqs_and_linear.kv_str("llama.rope.scaling.type", "linear").str("llama.rope.scaling.factor").u32(6).num(2.0f);
  freqs_and_linear.tensor("rope_freqs.weight", {4}, 0, 0).pad_to(32).num(1.0f).num(1.0f).num(1.0f).num(1.0f);
  EXPECT_CONTAINS(config_error(freqs_and_linear), "also holds RoPE factor tensors");
  GgufBytes experts = llama(0, 2);
  experts.kv_u32("llama.expert_count", 2).kv_u32("llama.expert_used_count", 3);
  EXPECT_CONTAINS(config_error(experts), "metadata 'llama.expert_used_count': is 3 (expected at most llama.expert_count = 2)");
  GgufBytes eos = llama(0, 1);  // vocab_size 16: the ids end at 15, as config.json's do
  eos.kv_u32("tokenizer.ggml.eos_token_id", 200000000);
  EXPECT_CONTAINS(config_error(eos), "metadata 'tokenizer.ggml.eos_token_id': is 200000000 (expected a token id below "
                                     "the vocabulary size 16)");
  GgufBytes missing;
  missing.header(0, 1).kv_str("general.architecture", "qwen2");
  EXPECT_CONTAINS(config_error(missing), "metadata 'qwen2.embedding_length': is missing");
}

TEST(GgufConfig, ConventionsLlamaCppLeavesImplicit) {
  GgufBytes g = llama(1, 3);
  g.kv_u32("tokenizer.ggml.bos_token_id", 5).kv_u32("tokenizer.ggml.eos_token_id", 6)
      .kv_u32("tokenizer.ggml.eot_token_id", 7).tensor("blk.0.attn_q.bias", {32}, 0, 0).pad_to(32).zeros(128);
  const GgufFile f(std::span<const uint8_t>(g.bytes().data(), g.bytes().size()), "cfg.gguf");
  const ModelConfig c = gguf_model_config(f);
  EXPECT_EQ(c.head_dim, 8);             // embedding_length / head_count
  EXPECT_TRUE(c.tie_word_embeddings);   // no output.weight
  EXPECT_TRUE(c.attention_bias);        // attn_q.bias present
  EXPECT_EQ(c.rope_theta, 10000.0f);    // freq_base absent
  EXPECT_EQ(c.bos_id, 5);
  EXPECT_EQ(c.eos_ids, (std::vector<int32_t>{6, 7}));  // EOT also ends a turn
}

// A header of another architecture with llama()'s sizes.
GgufBytes arch(std::string_view a, uint64_t n_tensors, uint64_t n_extra) {
  GgufBytes g;
  const std::string p(a);
  g.header(n_tensors, 9 + n_extra).kv_str("general.architecture", a).kv_u32(p + ".embedding_length", 32)
      .kv_u32(p + ".feed_forward_length", 64).kv_u32(p + ".block_count", 7)
      .kv_u32(p + ".attention.head_count", 4).kv_u32(p + ".attention.head_count_kv", 2)
      .kv_u32(p + ".context_length", 128).kv_u32(p + ".vocab_size", 16)
      .str(p + ".attention.layer_norm_rms_epsilon").u32(6).num(1e-5f);
  return g;
}

ModelConfig config_of(const GgufBytes& g) {
  const GgufFile f(std::span<const uint8_t>(g.bytes().data(), g.bytes().size()), "cfg.gguf");
  return gguf_model_config(f);
}

TEST(GgufConfig, ArchitecturesAndScalings) {
  GgufBytes freqs = llama(1, 0);  // head_dim 8: 4 factors
  freqs.tensor("rope_freqs.weight", {4}, 0, 0).pad_to(32).num(1.0f).num(1.5f).num(4.0f).num(8.0f);
  ModelConfig c = config_of(freqs);
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Factors);
  EXPECT_EQ(c.rope_scaling.factors, (std::vector<float>{1.0f, 1.5f, 4.0f, 8.0f}));

  GgufBytes linear = llama(0, 2);
  linear.kv_str("llama.rope.scaling.type", "linear").str("llama.rope.scaling.factor").u32(6).num(8.0f);
  c = config_of(linear);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Linear);
  EXPECT_EQ(c.rope_scaling.factor, 8.0f);

  GgufBytes mixtral = llama(0, 2);
  mixtral.kv_u32("llama.expert_count", 8).kv_u32("llama.expert_used_count", 2);
  c = config_of(mixtral);
  EXPECT_EQ(c.model_type, "mixtral");
  EXPECT_EQ(c.n_experts, 8);
  EXPECT_EQ(c.n_experts_per_tok, 2);
  EXPECT_EQ(c.d_ff_expert, 64);  // feed_forward_length
  EXPECT_TRUE(c.moe_renormalize);
  EXPECT_EQ(c.moe_layers, std::vector<bool>(1, true));

  GgufBytes qwen3moe = arch("qwen3moe", 0, 3);
  qwen3moe.kv_u32("qwen3moe.expert_count", 4).kv_u32("qwen3moe.expert_used_count", 2)
      .kv_u32("qwen3moe.expert_feed_forward_length", 16);
  c = config_of(qwen3moe);
  EXPECT_EQ(c.model_type, "qwen3_moe");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.d_ff_expert, 16);
  EXPECT_EQ(c.moe_layers, std::vector<bool>(7, true));

  // Gemma 3: every 6th layer full by default; the local base, the scale and the linear
  // scaling of the full layers.
  GgufBytes gemma = arch("gemma3", 0, 4);
  gemma.kv_u32("gemma3.attention.sliding_window", 512).str("gemma3.rope.freq_base_swa").u32(6).num(10000.0f)
      .kv_str("gemma3.rope.scaling.type", "linear").str("gemma3.rope.scaling.factor").u32(6).num(8.0f);
  c = config_of(gemma);
  EXPECT_EQ(c.model_type, "gemma3_text");
  using enum LayerAttention;
  EXPECT_EQ(c.layer_types, (std::vector<LayerAttention>{Sliding, Sliding, Sliding, Sliding, Sliding, Full, Sliding}));
  EXPECT_EQ(c.sliding_window, 512);
  EXPECT_EQ(c.rope_local.theta, 10000.0f);
  EXPECT_EQ(c.rope_local.scaling.type, RopeScaling::Type::None);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Linear);
  EXPECT_FLOAT_EQ(c.attn_scale, 1.0f / std::sqrt(8.0f));
  EXPECT_FLOAT_EQ(c.embed_scale, std::sqrt(32.0f));
  EXPECT_EQ(c.mlp_act, MlpActivation::GeluTanh);
  GgufBytes period = arch("gemma3", 0, 2);
  period.kv_u32("gemma3.attention.sliding_window", 4).kv_u32("gemma3.attention.sliding_window_pattern", 2);
  EXPECT_EQ(config_of(period).layer_types, (std::vector<LayerAttention>{Sliding, Full, Sliding, Full, Sliding, Full, Sliding}));
  GgufBytes capped = arch("gemma3", 0, 1);
  capped.str("gemma3.final_logit_softcapping").u32(6).num(30.0f);
  EXPECT_CONTAINS(config_error(capped), "metadata 'gemma3.final_logit_softcapping': is set");

  // Phi-3: partial rotation; LongRoPE from the two factor tensors.
  GgufBytes phi = arch("phi3", 2, 3);
  phi.kv_u32("phi3.rope.dimension_count", 6).kv_u32("phi3.rope.scaling.original_context_length", 32)
      .str("phi3.rope.scaling.attn_factor").u32(6).num(1.25f);
  phi.tensor("rope_factors_short.weight", {3}, 0, 0).tensor("rope_factors_long.weight", {3}, 0, 32).pad_to(32);
  phi.num(1.0f).num(2.0f).num(3.0f).zeros(20).num(4.0f).num(5.0f).num(6.0f);
  c = config_of(phi);
  EXPECT_EQ(c.rotary_dim, 6);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::LongRope);
  EXPECT_EQ(c.rope_scaling.short_factor, (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(c.rope_scaling.long_factor, (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 32);
  EXPECT_EQ(c.rope_scaling.attention_factor, 1.25f);
}

TEST(GgufWeights, NamesTypesAndTheQkOrder) {
  EXPECT_EQ(gguf_to_hf_name("blk.12.attn_output.weight", "llama"), "model.layers.12.self_attn.o_proj.weight");
  EXPECT_EQ(gguf_to_hf_name("token_embd.weight", "llama"), "model.embed_tokens.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.x.attn_q.weight", "llama"), "");
  EXPECT_EQ(gguf_to_hf_name("blk.1.attn_qq.weight", "llama"), "");
  EXPECT_EQ(gguf_to_hf_name("blk.3.ffn_norm.weight", "llama"), "model.layers.3.post_attention_layernorm.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.3.ffn_norm.weight", "gemma3_text"), "model.layers.3.pre_feedforward_layernorm.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.3.post_ffw_norm.weight", "gemma3_text"),
            "model.layers.3.post_feedforward_layernorm.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.3.post_ffw_norm.weight", "llama"), "");
  EXPECT_EQ(gguf_to_hf_name("blk.0.ffn_up.weight", "phi3"), "model.layers.0.mlp.gate_up_proj.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.0.attn_qkv.weight", "phi3"), "model.layers.0.self_attn.qkv_proj.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.0.ffn_gate_inp.weight", "mixtral"), "model.layers.0.block_sparse_moe.gate.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.0.ffn_gate_inp.weight", "qwen3_moe"), "model.layers.0.mlp.gate.weight");
  // Older Mixtral files: one tensor per expert.
  EXPECT_EQ(gguf_to_hf_name("blk.2.ffn_down.7.weight", "mixtral"), "model.layers.2.block_sparse_moe.experts.7.w2.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.2.ffn_up.0.weight", "qwen3_moe"), "model.layers.2.mlp.experts.0.up_proj.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.2.ffn_up.0.weight", "llama"), "");
  EXPECT_EQ(gguf_to_hf_name("blk.2.ffn_up.x.weight", "mixtral"), "");
  auto weights_error = [](const GgufBytes& g) {
    return test::error_of([&] {
      auto f = std::make_shared<const GgufFile>(std::span<const uint8_t>(g.bytes().data(), g.bytes().size()), "w.gguf");
      gguf_weights(f, gguf_model_config(*f));
    });
  };
  GgufBytes unknown = llama(1, 0);
  unknown.tensor("blk.0.attn_mystery.weight", {4}, 0, 0).pad_to(32).zeros(16);
  EXPECT_CONTAINS(weights_error(unknown), "w.gguf: tensor 'blk.0.attn_mystery.weight' is not a weight");
  GgufBytes q2k = llama(1, 0);
  q2k.tensor("blk.0.ffn_up.weight", {256, 1}, 10, 0).pad_to(32).zeros(96);
  EXPECT_CONTAINS(weights_error(q2k), "tensor 'blk.0.ffn_up.weight' has type Q2_K, which is not supported");
  // Q rows 0..31 of 4 heads of 8: the file's row 2j + t of a head is Hugging Face's row
  // t * 4 + j, so the loaded rows run 0 2 4 6 1 3 5 7 | 8 10 ... within each head.
  GgufBytes q = llama(1, 0);
  q.tensor("blk.0.attn_q.weight", {1, 32}, 0, 0).pad_to(32);
  for (int r = 0; r < 32; ++r) q.num(float(r));
  auto f = std::make_shared<const GgufFile>(std::span<const uint8_t>(q.bytes().data(), q.bytes().size()), "w.gguf");
  const std::unique_ptr<TensorSource> ck = gguf_weights(f, gguf_model_config(*f));
  const TensorInfo& t = ck->get("model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(t.shape, (std::vector<int64_t>{32, 1}));
  EXPECT_EQ(t.dtype, DType::F32);
  const float* w = reinterpret_cast<const float*>(t.data);
  const std::vector<float> got(w, w + 32);
  std::vector<float> want;
  for (int h = 0; h < 4; ++h)
    for (int t2 = 0; t2 < 2; ++t2)
      for (int j = 0; j < 4; ++j) want.push_back(float(h * 8 + 2 * j + t2));
  EXPECT_EQ(got, want);

  // Stacked experts [2 experts, 3 rows, 1 column] become one tensor per expert, each its slice.
  GgufBytes moe = llama(1, 2);
  moe.kv_u32("llama.expert_count", 2).kv_u32("llama.expert_used_count", 1);
  moe.tensor("blk.0.ffn_down_exps.weight", {1, 3, 2}, 0, 0).pad_to(32);
  for (int i = 0; i < 6; ++i) moe.num(float(i));
  auto fm = std::make_shared<const GgufFile>(std::span<const uint8_t>(moe.bytes().data(), moe.bytes().size()), "w.gguf");
  const std::unique_ptr<TensorSource> m = gguf_weights(fm, gguf_model_config(*fm));
  for (int e = 0; e < 2; ++e) {
    const TensorInfo& x = m->get(fmt::format("model.layers.0.block_sparse_moe.experts.{}.w2.weight", e));
    EXPECT_EQ(x.shape, (std::vector<int64_t>{3, 1}));
    const float* v = reinterpret_cast<const float*>(x.data);
    EXPECT_EQ(std::vector<float>(v, v + 3), (std::vector<float>{3.0f * e, 3.0f * e + 1, 3.0f * e + 2}));
  }
  GgufBytes bad_moe = llama(1, 2);
  bad_moe.kv_u32("llama.expert_count", 4).kv_u32("llama.expert_used_count", 1);
  bad_moe.tensor("blk.0.ffn_up_exps.weight", {1, 3, 2}, 0, 0).pad_to(32).zeros(24);
  EXPECT_CONTAINS(weights_error(bad_moe), "w.gguf: tensor 'blk.0.ffn_up_exps.weight' has shape [2, 3, 1] (expected [4, "
                                          "rows, columns]: one matrix per expert)");

  // Gemma 3's norms are stored as 1 + w: loaded as w (the weight table adds the one back).
  GgufBytes gemma = arch("gemma3", 1, 0);
  gemma.tensor("blk.0.post_ffw_norm.weight", {2}, 0, 0).pad_to(32).num(1.5f).num(0.25f);
  auto fg = std::make_shared<const GgufFile>(std::span<const uint8_t>(gemma.bytes().data(), gemma.bytes().size()), "w.gguf");
  const std::unique_ptr<TensorSource> gw = gguf_weights(fg, gguf_model_config(*fg));
  const TensorInfo& n = gw->get("model.layers.0.post_feedforward_layernorm.weight");
  const float* nv = reinterpret_cast<const float*>(n.data);
  EXPECT_EQ(std::vector<float>(nv, nv + 2), (std::vector<float>{0.5f, -0.75f}));
}

}  // namespace
}  // namespace tf

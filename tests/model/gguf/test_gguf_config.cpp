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
  EXPECT_CONTAINS(config_error(partial), "metadata 'llama.rope.dimension_count': is not the head size 8");
  GgufBytes scaled = llama(0, 1);
  scaled.kv_str("llama.rope.scaling.type", "yarn");
  EXPECT_CONTAINS(config_error(scaled), "metadata 'llama.rope.scaling.type': is \"yarn\"");
  GgufBytes freqs = llama(1, 0);
  freqs.tensor("rope_freqs.weight", {4}, 0, 0).pad_to(32).zeros(16);
  EXPECT_CONTAINS(config_error(freqs), "tensor 'rope_freqs.weight'");
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

TEST(GgufWeights, NamesTypesAndTheQkOrder) {
  EXPECT_EQ(gguf_to_hf_name("blk.12.attn_output.weight"), "model.layers.12.self_attn.o_proj.weight");
  EXPECT_EQ(gguf_to_hf_name("token_embd.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.x.attn_q.weight"), "");
  EXPECT_EQ(gguf_to_hf_name("blk.1.attn_qq.weight"), "");
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
}

}  // namespace
}  // namespace tf

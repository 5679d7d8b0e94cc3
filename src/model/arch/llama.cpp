// Llama (model_type "llama"): config fields, weight table and forward. Mistral and Qwen2 run
// this forward too (their files read their own config fields; Qwen2 has its own table).
//
//   x = embed(ids)                                   [n_tokens, d_model]
//   for each layer:
//     qkv = rms_norm(x) @ Wqkv^T (+ bias)            [n_tokens, (n_heads + 2 n_kv_heads) head_dim]
//     rope on q, k; k, v -> KV pool slots            (fused into the matmul)
//     a   = paged causal attention                   [n_tokens, n_heads head_dim]
//     x  += a @ Wo^T (+ bias)
//     x  += down(silu(gate(h)) * up(h)),  h = rms_norm(x)   (gate|up one matmul)
//   logits = lm_head(final_norm(x[logits_rows]))     [n_out, n_vocab]
//
// Tensor parallelism (LoadOptions::tp_size > 1): the weights are this rank's shard (the
// table's TpSlices) and the blocks add one all-reduce after o_proj and one after down_proj.
#include "model/arch/archs.h"
#include "model/arch/block_weights.h"
#include "model/arch/blocks.h"
#include "model/arch/decoder_model.h"

namespace tf {

namespace {

struct LayerWeights {
  AttentionWeights attn;
  MlpWeights mlp;
};

class LlamaModel final : public DecoderModel {
 public:
  explicit LlamaModel(ModelBuild b) : DecoderModel(std::move(b)) {
    using R = WeightRole;
    const LoadedWeights& w = weights();
    embed_ = w.get({R::Embedding});
    final_norm_ = w.get({R::FinalNorm});
    lm_head_ = w.get({R::LmHead});
    for (int il = 0; il < int(config().n_layers); ++il) {
      layers_.push_back(LayerWeights{
          .attn = {.norm = w.get({R::AttnNorm, il}), .wqkv = w.get({R::Wqkv, il}), .bqkv = w.find({R::Bqkv, il}),
                   .wo = w.get({R::Wo, il}), .bo = w.find({R::Bo, il})},
          .mlp = {.norm = w.get({R::MlpNorm, il}), .wgate_up = w.get({R::WgateUp, il}), .wdown = w.get({R::Wdown, il})}});
    }
    inv_freq_ = upload_inv_freq();
    attn_ = standard_attention(config(), shard());
  }

 private:
  void forward(const Activations& a, int64_t n_out) override {
    const BlockContext ctx = block_context();
    be().embedding(embed_, a.x);
    for (int il = 0; il < int(layers_.size()); ++il) {
      attention_block(ctx, a, layers_[size_t(il)].attn, AttentionLayer{.layer = il, .params = attn_, .inv_freq = inv_freq_});
      swiglu_mlp_block(ctx, a, layers_[size_t(il)].mlp);
    }
    if (n_out > 0) lm_head_block(ctx, a, final_norm_, lm_head_);
  }

  TensorView embed_, final_norm_, lm_head_, inv_freq_;
  std::vector<LayerWeights> layers_;
  AttentionParams attn_;
};

}  // namespace

// transformers' LlamaConfig: the SwiGLU MLP without biases; attention_bias puts biases on q,
// k, v and o.
void read_llama_config(const ConfigFields& f, ModelConfig& c) {
  require_silu_mlp(f);
  c.attention_bias = f.boolean_or("attention_bias", false);
}

WeightTable llama_weight_table(const ModelConfig& c) {
  return standard_decoder_weights(c, AttentionTensors{.qkv_bias = c.attention_bias, .o_bias = c.attention_bias});
}

std::unique_ptr<Model> make_llama_model(ModelBuild b) { return std::make_unique<LlamaModel>(std::move(b)); }

}  // namespace tf

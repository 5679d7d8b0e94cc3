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
    for (int c = 0; c < w.n_copies(); ++c) {  // one set of linear weights per copy
      lm_head_.push_back(w.get({R::LmHead}, c));
      layers_.emplace_back();
      for (int il = 0; il < int(config().n_layers); ++il) {
        layers_.back().push_back(LayerWeights{
            .attn = {.norm = w.get({R::AttnNorm, il}), .wqkv = w.get({R::Wqkv, il}, c), .bqkv = w.find({R::Bqkv, il}),
                     .wo = w.get({R::Wo, il}, c), .bo = w.find({R::Bo, il})},
            .mlp = {.norm = w.get({R::MlpNorm, il}), .wgate_up = w.get({R::WgateUp, il}, c),
                    .wdown = w.get({R::Wdown, il}, c)}});
      }
    }
    inv_freq_ = upload_inv_freq();
    attn_ = standard_attention(config(), shard());
  }

 private:
  void forward(const Activations& a, int64_t n_out) override {
    const BlockContext ctx = block_context();
    const std::vector<LayerWeights>& layers = layers_[size_t(copy())];
    be().embedding(embed_, a.x);
    for (int il = 0; il < int(layers.size()); ++il) {
      attention_block(ctx, a, layers[size_t(il)].attn, AttentionLayer{.layer = il, .params = attn_, .inv_freq = inv_freq_});
      swiglu_mlp_block(ctx, a, layers[size_t(il)].mlp);
    }
    if (n_out > 0) lm_head_block(ctx, a, final_norm_, lm_head_[size_t(copy())]);
  }

  TensorView embed_, final_norm_, inv_freq_;
  std::vector<TensorView> lm_head_;                // [copy]
  std::vector<std::vector<LayerWeights>> layers_;  // [copy][layer]
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

// The pre-norm decoder forward every registered architecture runs: each reads its own config
// fields and builds its own weight table (src/model/arch/<arch>.cpp), and what differs in
// the forward is read from those two, layer by layer:
//
//   x = embed(ids) * embed_scale                      [n_tokens, d_model]
//   for each layer il:
//     qkv = rms_norm(x) @ Wqkv^T (+ bias)             [n_tokens, (n_heads + 2 n_kv_heads) head_dim]
//     q/k norms (QNorm/KNorm in the table), RoPE of the layer's kind (its base, scaling,
//     rotated dims) on q, k; k, v -> the layer's KV pool          (fused into the matmul)
//     a   = paged causal attention, the layer's window           [n_tokens, n_heads head_dim]
//     x  += post_norm(a @ Wo^T (+ bias))              (post_norm: AttnPostNorm, Gemma)
//     dense layer:   x += post_norm(down(act(gate(h)) * up(h)) (+ bias)),  h = rms_norm(x)
//                    (act silu or gelu_tanh; gate|up one matmul; post_norm: MlpPostNorm, Gemma)
//     experts layer: x += sum over the router's top-k experts of weight * expert(h)
//   logits = lm_head(final_norm(x[logits_rows]))      [n_out, n_vocab]
//
// The linear weights (Wqkv, Wo, gate|up, down, LM head) are those of the copy the step uses
// (DecoderModel::copy(), model.h WeightCopy); so are the experts' on the host backends, while
// on CUDA every copy shares their 16-bit upload (docs/QUANT.md).
//
// Each layer has its own query heads, KV heads and d_ff (config.h heads_of, ...; equal in
// every layer but for pruned models), so the scratch views are cut to the layer's widths.
//
// Tensor parallelism (LoadOptions::tp_size > 1): the weights are this rank's shard (the
// table's TpSlices) and the blocks add one all-reduce after o_proj and one after the MLP.
#include "model/arch/archs.h"
#include "model/arch/blocks.h"
#include "model/arch/decoder_model.h"

namespace tf {

namespace {

struct LayerWeights {
  AttentionWeights attn;
  bool moe = false;
  MlpWeights mlp;  // dense layers
  MoeWeights experts;  // experts layers
};

class StandardDecoder final : public DecoderModel {
 public:
  explicit StandardDecoder(ModelBuild b) : DecoderModel(std::move(b)) {
    using R = WeightRole;
    const LoadedWeights& w = weights();
    const ModelConfig& c = config();
    embed_ = w.get({R::Embedding});
    final_norm_ = w.get({R::FinalNorm});
    // One set of linear weights per copy (model.h WeightCopy), experts included; the others
    // and the router are held once and appear in every set.
    for (int cp = 0; cp < w.n_copies(); ++cp) {
      lm_head_.push_back(w.get({R::LmHead}, cp));
      layers_.emplace_back();
      for (int il = 0; il < int(c.n_layers); ++il) {
        LayerWeights l{.attn = {.norm = w.get({R::AttnNorm, il}), .wqkv = w.get({R::Wqkv, il}, cp),
                                .bqkv = w.find({R::Bqkv, il}), .q_norm = w.find({R::QNorm, il}),
                                .k_norm = w.find({R::KNorm, il}), .wo = w.get({R::Wo, il}, cp),
                                .bo = w.find({R::Bo, il}), .post_norm = w.find({R::AttnPostNorm, il})},
                       .moe = c.layer_is_moe(il)};
        if (l.moe) {
          l.experts = {.norm = w.get({R::MlpNorm, il}), .router = w.get({R::Router, il}),
                       .wgate_up = w.get({R::ExpertsGateUp, il}, cp), .wdown = w.get({R::ExpertsDown, il}, cp)};
        } else {
          l.mlp = {.norm = w.get({R::MlpNorm, il}), .wgate_up = w.get({R::WgateUp, il}, cp),
                   .wdown = w.get({R::Wdown, il}, cp), .bdown = w.find({R::Bdown, il}), .post_norm = w.find({R::MlpPostNorm, il}), .act = c.mlp_act};
        }
        layers_.back().push_back(l);
      }
    }
    for (int il = 0; il < int(c.n_layers); ++il)
      attn_.push_back(AttentionLayer{.layer = il, .params = layer_attention_params(c, shard(), il)});
    // One frequency table per kind of layer the model has.
    QkRope rope[2];
    for (LayerAttention kind : {LayerAttention::Full, LayerAttention::Sliding})
      for (int il = 0; il < int(c.n_layers); ++il)
        if (c.layer_attention(il) == kind) {
          rope[int(kind)] = upload_rope(kind);
          break;
        }
    for (int il = 0; il < int(c.n_layers); ++il) attn_[size_t(il)].rope = rope[int(c.layer_attention(il))];
    moe_ = MoeParams{.n_experts = c.n_experts, .top_k = c.n_experts_per_tok, .renormalize = c.moe_renormalize};
  }

 private:
  void forward(const Activations& a, int64_t n_out) override {
    const BlockContext ctx = block_context();
    be().embedding(embed_, a.x);
    if (config().embed_scale != 1.0f) be().scale(a.x, round_to(be().act_dtype(), config().embed_scale));
    const std::vector<LayerWeights>& layers = layers_[size_t(copy())];
    for (size_t il = 0; il < layers.size(); ++il) {
      const LayerWeights& l = layers[il];
      const Activations la = layer_activations(a, int64_t(il));
      // Each block is told the norm of the fused matmul that follows it on the residual (the
      // MoE block and the LM head normalize apart).
      attention_block(ctx, la, l.attn, attn_[il], l.moe ? TensorView{} : l.mlp.norm);
      if (l.moe)
        moe_block(ctx, la, l.experts, moe_);
      else
        gated_mlp_block(ctx, la, l.mlp, il + 1 < layers.size() ? layers[il + 1].attn.norm : TensorView{});
    }
    if (n_out > 0) lm_head_block(ctx, a, final_norm_, lm_head_[size_t(copy())]);
  }

  // v as the activation dtype holds it (transformers scales Gemma's embeddings by
  // sqrt(hidden_size) cast to the model's dtype).
  static float round_to(DType dt, float v) {
    return dt == DType::BF16 ? bf16_to_f32(f32_to_bf16(v)) : dt == DType::F16 ? f16_to_f32(f32_to_f16(v)) : v;
  }

  TensorView embed_, final_norm_;
  std::vector<TensorView> lm_head_;                // [copy]
  std::vector<std::vector<LayerWeights>> layers_;  // [copy][layer]
  std::vector<AttentionLayer> attn_;
  MoeParams moe_;
};

}  // namespace

std::unique_ptr<Model> make_standard_decoder(ModelBuild b) { return std::make_unique<StandardDecoder>(std::move(b)); }

}  // namespace tf

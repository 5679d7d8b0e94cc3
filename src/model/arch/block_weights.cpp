#include "model/arch/block_weights.h"

#include <fmt/format.h>

namespace tf {

void add_embedding_weights(WeightTable& t, const ModelConfig& c) {
  const WeightPart embed = add_dense_tensor(t, {.name = "model.embed_tokens.weight", .shape = {c.n_vocab, c.d_model}},
                                            kReplicated);
  t.weights.push_back({.key = {WeightRole::Embedding}, .parts = {embed}});
}

void add_final_norm_and_lm_head(WeightTable& t, const ModelConfig& c) {
  const WeightPart norm = add_dense_tensor(
      t, {.name = "model.norm.weight", .shape = {c.d_model}, .init = DummyInit::Ones}, kReplicated);
  t.weights.push_back({.key = {WeightRole::FinalNorm}, .parts = {norm}});
  WeightPart head = add_dense_tensor(
      t, {.name = "lm_head.weight", .shape = {c.n_vocab, c.d_model}, .optional = c.tie_word_embeddings},
      tp_rows(c.n_vocab));
  if (c.tie_word_embeddings) head.tensor = "model.embed_tokens.weight";
  t.weights.push_back({.key = {WeightRole::LmHead}, .parts = {head}});
}

void add_attention_weights(WeightTable& t, const ModelConfig& c, int il, const AttentionTensors& opt) {
  const std::string p = fmt::format("model.layers.{}.", il);
  const int64_t hd = c.head_dim, d_q = c.n_heads * hd, d_kv = c.n_kv_heads * hd;
  const TpSlice q_heads = tp_rows(c.n_heads, hd), kv_heads = tp_rows(c.n_kv_heads, hd);
  auto dense = [&](const char* suffix, std::vector<int64_t> shape, TpSlice tp, DummyInit init = DummyInit::FanIn) {
    return add_dense_tensor(t, {.name = p + suffix, .shape = std::move(shape), .init = init}, tp);
  };
  const WeightPart norm = dense("input_layernorm.weight", {c.d_model}, kReplicated, DummyInit::Ones);
  const WeightPart q = dense("self_attn.q_proj.weight", {d_q, c.d_model}, q_heads);
  const WeightPart k = dense("self_attn.k_proj.weight", {d_kv, c.d_model}, kv_heads);
  const WeightPart v = dense("self_attn.v_proj.weight", {d_kv, c.d_model}, kv_heads);
  t.weights.push_back({.key = {WeightRole::AttnNorm, il}, .parts = {norm}});
  t.weights.push_back({.key = {WeightRole::Wqkv, il}, .parts = {q, k, v}});
  if (opt.qkv_bias) {
    const WeightPart bq = dense("self_attn.q_proj.bias", {d_q}, q_heads);
    const WeightPart bk = dense("self_attn.k_proj.bias", {d_kv}, kv_heads);
    const WeightPart bv = dense("self_attn.v_proj.bias", {d_kv}, kv_heads);
    t.weights.push_back({.key = {WeightRole::Bqkv, il}, .parts = {bq, bk, bv}});
  }
  const WeightPart o = dense("self_attn.o_proj.weight", {c.d_model, d_q}, tp_columns(c.n_heads, hd));
  t.weights.push_back({.key = {WeightRole::Wo, il}, .parts = {o}});
  if (opt.o_bias) {
    const WeightPart bo = dense("self_attn.o_proj.bias", {c.d_model}, kFirstRank);
    t.weights.push_back({.key = {WeightRole::Bo, il}, .parts = {bo}});
  }
}

void add_swiglu_mlp_weights(WeightTable& t, const ModelConfig& c, int il) {
  const std::string p = fmt::format("model.layers.{}.", il);
  auto dense = [&](const char* suffix, std::vector<int64_t> shape, TpSlice tp, DummyInit init = DummyInit::FanIn) {
    return add_dense_tensor(t, {.name = p + suffix, .shape = std::move(shape), .init = init}, tp);
  };
  const WeightPart norm = dense("post_attention_layernorm.weight", {c.d_model}, kReplicated, DummyInit::Ones);
  const WeightPart gate = dense("mlp.gate_proj.weight", {c.d_ff, c.d_model}, tp_rows(c.d_ff));
  const WeightPart up = dense("mlp.up_proj.weight", {c.d_ff, c.d_model}, tp_rows(c.d_ff));
  const WeightPart down = dense("mlp.down_proj.weight", {c.d_model, c.d_ff}, tp_columns(c.d_ff));
  t.weights.push_back({.key = {WeightRole::MlpNorm, il}, .parts = {norm}});
  t.weights.push_back({.key = {WeightRole::WgateUp, il}, .parts = {gate, up}});
  t.weights.push_back({.key = {WeightRole::Wdown, il}, .parts = {down}});
}

WeightTable standard_decoder_weights(const ModelConfig& c, const AttentionTensors& attn) {
  WeightTable t;
  add_embedding_weights(t, c);
  add_final_norm_and_lm_head(t, c);
  for (int il = 0; il < int(c.n_layers); ++il) {
    add_attention_weights(t, c, il, attn);
    add_swiglu_mlp_weights(t, c, il);
  }
  return t;
}

}  // namespace tf

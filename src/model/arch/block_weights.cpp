#include "model/arch/block_weights.h"

#include <fmt/format.h>

namespace tf {

namespace {

// Appends layer il's tensor `suffix` and returns the part covering it.
struct LayerTensors {
  WeightTable& t;
  std::string prefix;  // "model.layers.{il}."

  WeightPart dense(const std::string& suffix, std::vector<int64_t> shape, TpSlice tp,
                   DummyInit init = DummyInit::FanIn) {
    return add_dense_tensor(t, {.name = prefix + suffix, .shape = std::move(shape), .init = init}, tp);
  }
  // The bias [n] of a row-parallel projection (added once, by rank 0) as weight {role, il};
  // an optional one is used when the checkpoint has it (the loader skips it otherwise).
  void bias(WeightRole role, int il, const std::string& suffix, int64_t n, bool optional) {
    const WeightPart b = add_dense_tensor(t, {.name = prefix + suffix, .shape = {n}, .optional = optional}, kFirstRank);
    t.weights.push_back({.key = {role, il}, .parts = {b}});
  }
  // An RMSNorm weight [n] (replicated) in `style`.
  WeightPart norm(const std::string& suffix, int64_t n, NormStyle style) {
    WeightPart p = dense(suffix, {n}, kReplicated, style == NormStyle::OnePlus ? DummyInit::Zeros : DummyInit::Ones);
    if (style == NormStyle::OnePlus) p.transform = PartTransform::AddOne;
    return p;
  }
};

// Rows [row0, row0 + rows) of a fused part, with their own slice.
WeightPart rows_of(const WeightPart& whole, int64_t row0, int64_t rows, TpSlice tp) {
  WeightPart p = whole;
  p.row0 = row0;
  p.shape[0] = rows;
  p.tp = tp;
  return p;
}

}  // namespace

void add_embedding_weights(WeightTable& t, const ModelConfig& c) {
  const WeightPart embed = add_dense_tensor(t, {.name = "model.embed_tokens.weight", .shape = {c.n_vocab, c.d_model}},
                                            kReplicated);
  t.weights.push_back({.key = {WeightRole::Embedding}, .parts = {embed}});
}

void add_final_norm_and_lm_head(WeightTable& t, const ModelConfig& c, NormStyle style) {
  const WeightPart norm = LayerTensors{t, "model."}.norm("norm.weight", c.d_model, style);
  t.weights.push_back({.key = {WeightRole::FinalNorm}, .parts = {norm}});
  WeightPart head = add_dense_tensor(
      t, {.name = "lm_head.weight", .shape = {c.n_vocab, c.d_model}, .optional = c.tie_word_embeddings},
      tp_rows(c.n_vocab));
  if (c.tie_word_embeddings) head.tensor = "model.embed_tokens.weight";
  t.weights.push_back({.key = {WeightRole::LmHead}, .parts = {head}});
}

void add_attention_weights(WeightTable& t, const ModelConfig& c, int il, const AttentionTensors& opt) {
  LayerTensors l{t, fmt::format("model.layers.{}.", il)};
  const int64_t hd = c.head_dim, n_heads = c.heads_of(il), n_kv = c.kv_heads_of(il);
  const int64_t d_q = n_heads * hd, d_kv = n_kv * hd;
  const TpSlice q_heads = tp_rows(n_heads, hd), kv_heads = tp_rows(n_kv, hd);
  const WeightPart norm = l.norm("input_layernorm.weight", c.d_model, opt.norms);
  t.weights.push_back({.key = {WeightRole::AttnNorm, il}, .parts = {norm}});
  if (opt.fused_qkv) {
    const WeightPart qkv = l.dense("self_attn.qkv_proj.weight", {d_q + 2 * d_kv, c.d_model}, kReplicated);
    t.weights.push_back({.key = {WeightRole::Wqkv, il},
                         .parts = {rows_of(qkv, 0, d_q, q_heads), rows_of(qkv, d_q, d_kv, kv_heads),
                                   rows_of(qkv, d_q + d_kv, d_kv, kv_heads)}});
  } else {
    const WeightPart q = l.dense("self_attn.q_proj.weight", {d_q, c.d_model}, q_heads);
    const WeightPart k = l.dense("self_attn.k_proj.weight", {d_kv, c.d_model}, kv_heads);
    const WeightPart v = l.dense("self_attn.v_proj.weight", {d_kv, c.d_model}, kv_heads);
    t.weights.push_back({.key = {WeightRole::Wqkv, il}, .parts = {q, k, v}});
  }
  if (opt.qkv_bias) {
    const WeightPart bq = l.dense("self_attn.q_proj.bias", {d_q}, q_heads);
    const WeightPart bk = l.dense("self_attn.k_proj.bias", {d_kv}, kv_heads);
    const WeightPart bv = l.dense("self_attn.v_proj.bias", {d_kv}, kv_heads);
    t.weights.push_back({.key = {WeightRole::Bqkv, il}, .parts = {bq, bk, bv}});
  }
  if (c.qk_norm) {
    t.weights.push_back({.key = {WeightRole::QNorm, il}, .parts = {l.norm("self_attn.q_norm.weight", hd, opt.norms)}});
    t.weights.push_back({.key = {WeightRole::KNorm, il}, .parts = {l.norm("self_attn.k_norm.weight", hd, opt.norms)}});
  }
  const WeightPart o = l.dense("self_attn.o_proj.weight", {c.d_model, d_q}, tp_columns(n_heads, hd));
  t.weights.push_back({.key = {WeightRole::Wo, il}, .parts = {o}});
  l.bias(WeightRole::Bo, il, "self_attn.o_proj.bias", c.d_model, !opt.o_bias);
  if (opt.post_norm) {
    const WeightPart post = l.norm(std::string(opt.post_norm) + ".weight", c.d_model, opt.norms);
    t.weights.push_back({.key = {WeightRole::AttnPostNorm, il}, .parts = {post}});
  }
}

void add_gated_mlp_weights(WeightTable& t, const ModelConfig& c, int il, const MlpTensors& opt) {
  LayerTensors l{t, fmt::format("model.layers.{}.", il)};
  const WeightPart norm = l.norm(std::string(opt.norm) + ".weight", c.d_model, opt.norms);
  t.weights.push_back({.key = {WeightRole::MlpNorm, il}, .parts = {norm}});
  const int64_t f = c.d_ff_of(il);
  if (opt.fused_gate_up) {
    const WeightPart gu = l.dense("mlp.gate_up_proj.weight", {2 * f, c.d_model}, kReplicated);
    t.weights.push_back({.key = {WeightRole::WgateUp, il},
                         .parts = {rows_of(gu, 0, f, tp_rows(f)), rows_of(gu, f, f, tp_rows(f))}});
  } else {
    const WeightPart gate = l.dense("mlp.gate_proj.weight", {f, c.d_model}, tp_rows(f));
    const WeightPart up = l.dense("mlp.up_proj.weight", {f, c.d_model}, tp_rows(f));
    t.weights.push_back({.key = {WeightRole::WgateUp, il}, .parts = {gate, up}});
  }
  const WeightPart down = l.dense("mlp.down_proj.weight", {c.d_model, f}, tp_columns(f));
  t.weights.push_back({.key = {WeightRole::Wdown, il}, .parts = {down}});
  l.bias(WeightRole::Bdown, il, "mlp.down_proj.bias", c.d_model, /*optional=*/true);
  if (opt.post_norm) {
    const WeightPart post = l.norm(std::string(opt.post_norm) + ".weight", c.d_model, opt.norms);
    t.weights.push_back({.key = {WeightRole::MlpPostNorm, il}, .parts = {post}});
  }
}

void add_moe_weights(WeightTable& t, const ModelConfig& c, int il, const MoeTensors& names) {
  LayerTensors l{t, fmt::format("model.layers.{}.", il)};
  const int64_t f = c.d_ff_expert;
  const WeightPart norm = l.norm("post_attention_layernorm.weight", c.d_model, NormStyle::Plain);
  t.weights.push_back({.key = {WeightRole::MlpNorm, il}, .parts = {norm}});
  const WeightPart router = l.dense(names.router, {c.n_experts, c.d_model}, kReplicated);
  t.weights.push_back({.key = {WeightRole::Router, il}, .parts = {router}});
  WeightSpec gate_up{.key = {WeightRole::ExpertsGateUp, il}}, down{.key = {WeightRole::ExpertsDown, il}};
  for (int64_t e = 0; e < c.n_experts; ++e) {
    auto name = [&](const std::string& pattern) { return fmt::format(fmt::runtime(pattern), e); };
    gate_up.parts.push_back(l.dense(name(names.gate), {f, c.d_model}, tp_rows(f)));
    gate_up.parts.push_back(l.dense(name(names.up), {f, c.d_model}, tp_rows(f)));
    down.parts.push_back(l.dense(name(names.down), {c.d_model, f}, tp_columns(f)));
  }
  t.weights.push_back(std::move(gate_up));
  t.weights.push_back(std::move(down));
}

WeightTable standard_decoder_weights(const ModelConfig& c, const AttentionTensors& attn) {
  WeightTable t;
  add_embedding_weights(t, c);
  add_final_norm_and_lm_head(t, c);
  for (int il = 0; il < int(c.n_layers); ++il) {
    add_attention_weights(t, c, il, attn);
    add_gated_mlp_weights(t, c, il);
  }
  return t;
}

}  // namespace tf

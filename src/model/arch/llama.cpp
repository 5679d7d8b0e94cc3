// The Llama-family forward (Llama, Mistral, Qwen2), built from backend ops in order:
//
//   x = embed(ids)                                   [n_tokens, d_model]
//   for each layer:
//     qkv = rms_norm(x) @ Wqkv^T (+ bias for qwen2)  [n_tokens, (n_heads + 2 n_kv_heads) head_dim]
//     rope on q, k; k, v -> KV pool slots            (fused op)
//     a   = paged causal attention                   [n_tokens, n_heads head_dim]
//     x  += a @ Wo^T
//     x  += down(silu(gate(h)) * up(h)),  h = rms_norm(x)   (gate|up one matmul)
// Each matmul goes through Backend::matmul_fused with its norm prologue and its RoPE/KV-write,
// residual-add or SwiGLU epilogue, so a backend may run each line as one kernel (the CUDA
// decode GEMV) or as the plain ops in turn.
//   logits = lm_head(final_norm(x[logits_rows]))     [n_out, n_vocab]
//
// Q/K/V and gate/up are concatenated at load time so each is one matmul (one pass over the
// activations, one kernel launch on a GPU).
//
// Tensor parallelism (LoadOptions::tp_size > 1): the model loads only its rank's shard
// (tp_shard.h) and adds one all-reduce after o_proj and one after down_proj; every other
// op runs unchanged on the shard's narrower matrices. Unsharded, the shard is the whole
// model and there is no communicator, so the ops and buffers are the same as before.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/progress.h"
#include "model/arch/model.h"
#include "model/arch/rope.h"
#include "model/arch/tp_shard.h"
#include "dist/communicator.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace tf {
namespace {

struct LayerWeights {
  TensorView attn_norm, wqkv, bqkv, wo, bo, mlp_norm, wgate_up, wdown;
};

// Scratch activations for up to `cap_tokens` tokens / `cap_out` logit rows.
struct Scratch {
  int64_t cap_tokens = 0, cap_out = 0;
  TensorView x, h, qkv, attn, delta, gate_up, act, out_rows, logits;
};

class LlamaModel final : public Model {
 public:
  LlamaModel(ModelConfig cfg, Checkpoint ckpt, Backend& backend)
      : cfg_(std::move(cfg)), ckpt_(std::move(ckpt)), be_(backend) {}

  void load(const LoadOptions& opt);
  const ModelConfig& config() const override { return cfg_; }  // the whole model's, also when sharded
  TensorView forward(const Batch& batch) override;
  int64_t weight_bytes() const override { return weight_bytes_; }
  int64_t n_params() const override { return n_params_; }

 private:
  TensorView upload(const TensorView& host, const LoadOptions& opt);
  TensorView upload_concat(const std::vector<TensorView>& parts, const LoadOptions& opt);
  // Columns [col0, col0 + n) of a row-parallel weight (the whole tensor when unsharded).
  TensorView upload_cols(const TensorView& host, int64_t col0, int64_t n, const LoadOptions& opt);
  void ensure_scratch(int64_t n_tokens, int64_t n_out);
  // The ops of one forward over the first n rows of the scratch buffers (set_batch done).
  void run_layers(int64_t n, int64_t n_out);
  TensorView rows(const TensorView& t, int64_t n) const {  // first n rows of a scratch buffer
    TensorView v = t;
    v.shape[0] = n;
    return v;
  }

  ModelConfig cfg_;
  Checkpoint ckpt_;  // mapped files: zero-copy backends read weights from here
  Backend& be_;
  TensorView embed_, final_norm_, lm_head_, inv_freq_;
  std::vector<LayerWeights> layers_;
  AttentionParams attn_;
  TpShard shard_;                 // this rank's heads, d_ff and vocabulary (all when unsharded)
  Communicator* comm_ = nullptr;  // set when sharded
  Scratch s_;
  int64_t weight_bytes_ = 0, n_params_ = 0;
  std::vector<std::unique_ptr<uint8_t[]>> host_tmp_;  // concatenated weights kept for zero-copy backends
};

TensorView LlamaModel::upload(const TensorView& host, const LoadOptions& opt) {
  const DType dt = opt.keep_stored_dtype ? host.dtype : opt.weight_dtype;
  TensorView v = be_.upload(host, dt);
  weight_bytes_ += int64_t(v.nbytes());
  n_params_ += v.numel();
  return v;
}

// Concatenates tensors along dim 0 in host memory (converting to F32 if their dtypes differ),
// then uploads the result.
TensorView LlamaModel::upload_concat(const std::vector<TensorView>& parts, const LoadOptions& opt) {
  DType dt = parts[0].dtype;
  for (const TensorView& p : parts) if (p.dtype != dt) dt = DType::F32;
  int64_t rows = 0;
  const int64_t cols = parts[0].n_dims > 1 ? parts[0].shape[1] : 1;
  for (const TensorView& p : parts) rows += p.shape[0];
  auto buf = std::make_unique<uint8_t[]>(size_t(rows * cols) * dtype_size(dt));
  int64_t at = 0;
  for (const TensorView& src : parts) {
    const int64_t n = src.shape[0] * cols;
    if (src.dtype == dt) {
      std::memcpy(buf.get() + size_t(at) * dtype_size(dt), src.data, src.nbytes());
    } else {
      float* dst = reinterpret_cast<float*>(buf.get()) + at;
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = src.dtype == DType::BF16 ? bf16_to_f32(src.as<uint16_t>()[i])
               : src.dtype == DType::F16  ? f16_to_f32(src.as<uint16_t>()[i])
                                          : src.as<float>()[i];
      }
    }
    at += n;
  }
  TensorView host = parts[0].n_dims > 1 ? make_view(buf.get(), dt, {rows, cols})
                                               : make_view(buf.get(), dt, {rows});
  TensorView v = upload(host, opt);
  if (v.data == buf.get()) host_tmp_.push_back(std::move(buf));  // backend kept our buffer
  return v;
}

TensorView LlamaModel::upload_cols(const TensorView& host, int64_t col0, int64_t n, const LoadOptions& opt) {
  if (col0 == 0 && n == host.shape[1]) return upload(host, opt);
  std::unique_ptr<uint8_t[]> buf;
  TensorView v = upload(copy_cols(host, col0, n, buf), opt);
  if (v.data == buf.get()) host_tmp_.push_back(std::move(buf));  // backend kept our buffer
  return v;
}

void LlamaModel::load(const LoadOptions& opt) {
  const Checkpoint& ckpt = ckpt_;
  validate_checkpoint(cfg_, ckpt);
  shard_ = tp_shard(cfg_, opt.tp_rank, opt.tp_size);
  comm_ = opt.comm;
  if (shard_.size > 1 && (!comm_ || comm_->size() != shard_.size || comm_->rank() != shard_.rank))
    fail("tensor parallel rank {} of {} needs a communicator of that rank and size", shard_.rank, shard_.size);
  const TpShard& sh = shard_;
  const int64_t hd = cfg_.head_dim;
  auto get = [&](const std::string& name) { return &ckpt.get(name); };
  auto rows = [&](const std::string& name, int64_t row0, int64_t n) { return slice_rows(get(name)->view(), row0, n); };
  ProgressBar bar("loading weights", cfg_.n_layers);
  embed_ = upload(get("model.embed_tokens.weight")->view(), opt);
  final_norm_ = upload(get("model.norm.weight")->view(), opt);
  const TensorInfo* head = ckpt.find("lm_head.weight");
  if ((cfg_.tie_word_embeddings || !head) && sh.size == 1) {
    lm_head_ = embed_;
  } else {  // vocabulary-parallel: this rank's rows of the head (or of the tied embedding)
    const TensorView h = cfg_.tie_word_embeddings || !head ? get("model.embed_tokens.weight")->view() : head->view();
    lm_head_ = upload(slice_rows(h, sh.vocab0, sh.n_vocab), opt);
  }
  for (int64_t il = 0; il < cfg_.n_layers; ++il) {
    const std::string p = "model.layers." + std::to_string(il) + ".";
    LayerWeights lw;
    lw.attn_norm = upload(get(p + "input_layernorm.weight")->view(), opt);
    const int64_t q0 = sh.head0 * hd, nq = sh.n_heads * hd, kv0 = sh.kv_head0 * hd, nkv = sh.n_kv_heads * hd;
    lw.wqkv = upload_concat({rows(p + "self_attn.q_proj.weight", q0, nq), rows(p + "self_attn.k_proj.weight", kv0, nkv),
                             rows(p + "self_attn.v_proj.weight", kv0, nkv)}, opt);
    if (cfg_.attention_bias)
      lw.bqkv = upload_concat({rows(p + "self_attn.q_proj.bias", q0, nq), rows(p + "self_attn.k_proj.bias", kv0, nkv),
                               rows(p + "self_attn.v_proj.bias", kv0, nkv)}, opt);
    lw.wo = upload_cols(get(p + "self_attn.o_proj.weight")->view(), q0, nq, opt);
    if (const TensorInfo* bo = ckpt.find(p + "self_attn.o_proj.bias"); bo && sh.rank == 0)
      lw.bo = upload(bo->view(), opt);  // llama attention_bias; added once, before the all-reduce
    lw.mlp_norm = upload(get(p + "post_attention_layernorm.weight")->view(), opt);
    lw.wgate_up = upload_concat({rows(p + "mlp.gate_proj.weight", sh.ff0, sh.d_ff), rows(p + "mlp.up_proj.weight", sh.ff0, sh.d_ff)}, opt);
    lw.wdown = upload_cols(get(p + "mlp.down_proj.weight")->view(), sh.ff0, sh.d_ff, opt);
    layers_.push_back(lw);
    bar.update(il + 1);
  }
  bar.finish();

  const std::vector<float> inv = rope_inv_freq(cfg_);
  inv_freq_ = be_.alloc(DType::F32, {int64_t(inv.size())});
  be_.copy_from_host(inv.data(), inv_freq_);
  attn_ = AttentionParams{.n_heads = sh.n_heads,
                          .n_kv_heads = sh.n_kv_heads,
                          .head_dim = cfg_.head_dim,
                          .scale = float(1.0 / std::sqrt(double(cfg_.head_dim))),
                          .sliding_window = cfg_.sliding_window};
}

void LlamaModel::ensure_scratch(int64_t n_tokens, int64_t n_out) {
  if (n_tokens <= s_.cap_tokens && n_out <= s_.cap_out) return;
  for (TensorView* t : {&s_.x, &s_.h, &s_.qkv, &s_.attn, &s_.delta, &s_.gate_up, &s_.act,
                        &s_.out_rows, &s_.logits})
    if (t->data) be_.release(*t);
  const int64_t n = std::max(n_tokens, s_.cap_tokens), o = std::max(n_out, s_.cap_out);
  const DType a = be_.act_dtype();
  const int64_t qkv_dim = (shard_.n_heads + 2 * shard_.n_kv_heads) * cfg_.head_dim;
  s_.x = be_.alloc(a, {n, cfg_.d_model});
  s_.h = be_.alloc(a, {n, cfg_.d_model});
  s_.qkv = be_.alloc(a, {n, qkv_dim});
  s_.attn = be_.alloc(a, {n, shard_.n_heads * cfg_.head_dim});
  s_.delta = be_.alloc(a, {n, cfg_.d_model});
  s_.gate_up = be_.alloc(a, {n, 2 * shard_.d_ff});
  s_.act = be_.alloc(a, {n, shard_.d_ff});
  s_.out_rows = be_.alloc(a, {o, cfg_.d_model});
  s_.logits = be_.alloc(DType::F32, {o, shard_.n_vocab});
  s_.cap_tokens = n;
  s_.cap_out = o;
  be_.graph_reset();  // recordings refer to the old buffers
}

// Decode batches run padded to one of these sizes when the backend records forwards, so a
// handful of recordings cover every batch size (vLLM records a similar list).
int32_t graph_bucket(int32_t n_seqs) {
  static const int32_t kBuckets[] = {1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256};
  for (int32_t b : kBuckets)
    if (n_seqs <= b) return b;
  return 0;  // too large: run eagerly
}
// Block-table strides are padded to multiples of this many blocks (one recording per bucket
// of context length).
constexpr int32_t kGraphBlockQuantum = 64;

TensorView LlamaModel::forward(const Batch& batch) {
  const int64_t n = batch.n_tokens(), n_out = batch.n_out();
  TF_ASSERT(n > 0, "empty batch");
  const int32_t pad_block = be_.pad_kv_block();
  // Decode steps (one token per sequence) and verification steps (1 + k tokens per sequence,
  // logits for all) record; other batches (prefill chunks, mixed widths) run eagerly.
  const int32_t width = pad_block < 0 ? 0 : uniform_width(batch);
  const int32_t bucket = width > 0 && width <= be_.kv_spec().block_size ? graph_bucket(batch.n_seqs()) : 0;
  if (pad_block < 0 || bucket == 0) {
    ensure_scratch(n, std::max<int64_t>(n_out, 1));
    be_.set_batch(batch);
    run_layers(batch.n_tokens(), batch.n_out());
    return rows(s_.logits, n_out);
  }
  // A decode or verification step on a recording backend: pad to the bucket, then replay,
  // record or run.
  const int32_t max_blocks = (batch.max_blocks + kGraphBlockQuantum - 1) / kGraphBlockQuantum * kGraphBlockQuantum;
  const Batch padded = pad_uniform_batch(batch, bucket, max_blocks, pad_block, int32_t(be_.kv_spec().block_size));
  ensure_scratch(padded.n_tokens(), padded.n_out());
  be_.set_batch(padded);
  const uint64_t key = uint64_t(bucket) | uint64_t(max_blocks) << 16 | uint64_t(padded.n_out()) << 36 |
                       uint64_t(width) << 52;
  const GraphStep g = be_.graph_begin(key);
  try {
    if (g != GraphStep::Replayed) run_layers(padded.n_tokens(), padded.n_out());
  } catch (...) {
    if (g == GraphStep::Capture) be_.graph_reset();  // ends the broken recording
    throw;
  }
  if (g == GraphStep::Capture) be_.graph_end();
  return rows(s_.logits, n_out);
}

void LlamaModel::run_layers(int64_t n, int64_t n_out) {
  const TensorView x = rows(s_.x, n), h = rows(s_.h, n), qkv = rows(s_.qkv, n),
                   attn = rows(s_.attn, n), delta = rows(s_.delta, n),
                   gate_up = rows(s_.gate_up, n), act = rows(s_.act, n);
  const TensorView none{};

  be_.embedding(embed_, x);
  using Epi = MatmulFusion::Epilogue;
  // x += y @ w^T: fused into the matmul, or (tensor parallel) the ranks' partial products
  // summed first.
  auto project_add = [&](const TensorView& y, const TensorView& w, const TensorView& b) {
    if (!comm_) return be_.matmul_fused(y, w, b, x, MatmulFusion{.epilogue = Epi::AddTo, .y = delta});
    be_.matmul(y, w, b, delta);
    comm_->all_reduce_sum(delta);  // row-parallel projection: sum the ranks' partial outputs
    be_.add(x, delta);
  };
  for (int64_t il = 0; il < cfg_.n_layers; ++il) {
    const LayerWeights& lw = layers_[size_t(il)];
    be_.matmul_fused(x, lw.wqkv, lw.bqkv, qkv,
                     MatmulFusion{.norm_w = lw.attn_norm, .eps = cfg_.rms_norm_eps, .h = h, .epilogue = Epi::RopeKv,
                                  .rope_layer = int(il), .inv_freq = inv_freq_, .attn = attn_});
    be_.attention(int(il), qkv, attn_, attn);
    project_add(attn, lw.wo, lw.bo);
    be_.matmul_fused(x, lw.wgate_up, none, act,
                     MatmulFusion{.norm_w = lw.mlp_norm, .eps = cfg_.rms_norm_eps, .h = h, .epilogue = Epi::Swiglu,
                                  .y = gate_up});
    project_add(act, lw.wdown, none);
  }
  if (n_out == 0) return;
  // Only the rows that need logits go through the final norm and the LM head.
  const TensorView logits = rows(s_.logits, n_out);
  be_.rms_norm(x, final_norm_, cfg_.rms_norm_eps, h);
  const TensorView out_rows = rows(s_.out_rows, n_out);
  be_.gather_logit_rows(h, out_rows);
  be_.matmul(out_rows, lm_head_, none, logits);
}

}  // namespace

std::unique_ptr<Model> load_model(const std::string& dir, Backend& backend, const LoadOptions& opt) {
  ModelConfig cfg = load_model_config(dir);
  Checkpoint ckpt = opt.dummy_weights ? Checkpoint::random(llama_weight_specs(cfg), opt.dummy_seed)
                                      : Checkpoint::open(dir);
  auto model = std::make_unique<LlamaModel>(std::move(cfg), std::move(ckpt), backend);
  model->load(opt);
  return model;
}

}  // namespace tf

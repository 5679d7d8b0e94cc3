// Model hyper-parameters read from a Hugging Face folder's config.json (and
// generation_config.json for bos/eos), or from a GGUF file's metadata (gguf_config.h). The fields every architecture shares are read here
// (parse_common_config); each architecture file reads its own (src/model/arch/registry.h has
// load_model_config, which dispatches on model_type).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace tf {

// RoPE frequency scaling. "default" = none; "llama3" = Llama-3.1's piecewise scaling;
// "linear" = every frequency divided by `factor` (Gemma 3's global layers); "longrope" =
// Phi-3's per-frequency factors, the short ones for positions below
// original_max_position_embeddings and the long ones from there on, with cos and sin
// multiplied by attention_factor; "factors" = each frequency divided by its own factor at
// every position (a GGUF file's rope_freqs tensor: llama.cpp's form of Llama 3.1's scaling).
struct RopeScaling {
  enum class Type : uint8_t { None, Llama3, Linear, LongRope, Factors } type = Type::None;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int64_t original_max_position_embeddings = 8192;
  std::vector<float> short_factor, long_factor;  // LongRope: [rotary_dim / 2] each
  std::vector<float> factors;                    // Factors: [rotary_dim / 2]
  float attention_factor = 1.0f;                 // LongRope: transformers' attention_factor
};

// RoPE of one kind of layer: base and scaling.
struct RopeParams {
  float theta = 10000.0f;
  RopeScaling scaling;
};

// What a layer's attention sees: every earlier key, or only the last sliding_window ones.
enum class LayerAttention : uint8_t { Full, Sliding };

// The activation of the gated MLP: down(act(gate(x)) * up(x)).
enum class MlpActivation : uint8_t { Silu, GeluTanh };


// config.json's "quantization_config" (docs/QUANT.md, "Quantized model folders"): the linear
// weights of the checkpoint are stored in a quantized layout of src/quant/formats.h, each as
// `<module>.qweight`, `<module>.scales` and (int4) `<module>.zeros`. quant_config.h reads it and
// turns the architecture's weight table into the stored form.
struct QuantConfig {
  DType format = DType::F32;  // W8, W4 or FP8; F32 when the checkpoint is dense (no quantization_config)
  int32_t group_size = 0;     // W4: elements per group along the input dimension
  bool symmetric = false;     // W4: every zero point 8 (informational; the layout stores the zeros)
  std::string method;         // how the weights were made: rtn, awq, gptq (informational)
  std::vector<std::string> modules_to_not_convert;                   // modules stored dense
  std::vector<std::pair<std::string, int32_t>> group_size_overrides;  // W4: module -> its group size
  std::string origin;         // the config file, for messages

  bool quantized() const { return format != DType::F32; }
};

// Upper bounds on a model's sizes, checked when a config is read (config.json: config.cpp,
// GGUF metadata: gguf_config.cpp), before anything is sized from them: the weight table has
// one entry per layer and tensor, and --load-format dummy and the KV pool allocate from these
// sizes. Each is far above every released Llama-family model (the largest seen: 126 layers,
// hidden 16384 and intermediate 53248 in Llama-3.1-405B, 128 heads, head_dim 256, vocab
// 262144, context 10M in Llama 4 Scout) and small enough that the products formed from them
// (weight elements, KV bytes per token) stay far inside int64.
struct ConfigLimits {
  static constexpr int64_t kMaxLayers = 1024;
  static constexpr int64_t kMaxHidden = int64_t(1) << 17;
  static constexpr int64_t kMaxIntermediate = int64_t(1) << 20;
  static constexpr int64_t kMaxHeads = 1024;
  static constexpr int64_t kMaxHeadDim = 1024;
  static constexpr int64_t kMaxVocab = int64_t(1) << 24;
  static constexpr int64_t kMaxPositions = int64_t(1) << 26;  // context, sliding window
  static constexpr int64_t kMaxExperts = 1024;  // MoE experts (the most seen: 256 in DeepSeek-V3)
};

struct ModelConfig {
  std::string model_type;        // as written in config.json: the architecture registry's key
  int64_t d_model = 0;           // hidden_size
  int64_t d_ff = 0;              // intermediate_size (the dense MLP's)
  int64_t n_layers = 0;          // num_hidden_layers
  int64_t n_heads = 0;           // num_attention_heads
  int64_t n_kv_heads = 0;        // num_key_value_heads (defaults to n_heads: MHA)
  // Non-uniform layers (pruned models; docs/PER_LAYER_WIDTHS.md): config.json's
  // layer_num_attention_heads, layer_num_key_value_heads and layer_intermediate_size, each
  // [n_layers] or empty (every layer has the scalar). Read them through heads_of(il),
  // kv_heads_of(il) and d_ff_of(il), never the scalars, wherever a layer's width matters.
  std::vector<int64_t> layer_n_heads, layer_n_kv_heads, layer_d_ff;
  int64_t head_dim = 0;          // head_dim, or d_model / n_heads when absent
  int64_t rotary_dim = 0;        // leading dims of each head RoPE rotates: head_dim x partial_rotary_factor
  int64_t n_vocab = 0;           // vocab_size
  int64_t max_position = 0;      // max_position_embeddings
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;   // top-level rope_theta or rope_parameters.rope_theta
  RopeScaling rope_scaling;
  // Sliding-window attention. Mistral and Qwen2 slide on every layer; Gemma 3 mixes sliding
  // and full layers (layer_types) and gives the sliding ones their own RoPE.
  int64_t sliding_window = 0;    // window of the sliding layers; 0 = none
  std::vector<LayerAttention> layer_types;  // [n_layers] config.json's layer_types; empty: every
                                            // layer Sliding when sliding_window > 0, else Full
  RopeParams rope_local;         // RoPE of Sliding layers when the model mixes kinds (Gemma 3's
                                 // rope_parameters.sliding_attention / rope_local_base_freq)
  bool attention_bias = false;   // q/k/v biases (qwen2 always; llama if attention_bias, with o_proj's)
  bool qk_norm = false;          // RMSNorm over head_dim of every q and k head before RoPE (Qwen3, Gemma 3)
  float attn_scale = 0.0f;       // softmax scale of q.k; 0 = 1/sqrt(head_dim) (Gemma: query_pre_attn_scalar^-0.5)
  float embed_scale = 1.0f;      // embeddings multiplied by this (Gemma: sqrt(hidden_size))
  MlpActivation mlp_act = MlpActivation::Silu;
  // Mixture of experts: layers whose MLP is n_experts expert MLPs of d_ff_expert columns, of
  // which a router picks n_experts_per_tok per token (softmax over the experts, top-k, the
  // chosen weights renormalised to sum 1 when moe_renormalize). 0 experts: dense everywhere.
  int64_t n_experts = 0;              // num_local_experts (Mixtral) / num_experts (Qwen3-MoE)
  int64_t n_experts_per_tok = 0;      // num_experts_per_tok
  int64_t d_ff_expert = 0;            // moe_intermediate_size (Qwen3-MoE), intermediate_size (Mixtral)
  bool moe_renormalize = true;        // norm_topk_prob (Mixtral always renormalises)
  std::vector<bool> moe_layers;       // [n_layers] true where the MLP is the experts (empty: none)
  bool tie_word_embeddings = false;
  int32_t bos_id = -1;           // -1 = none
  std::vector<int32_t> eos_ids;  // any of these ends generation
  std::string torch_dtype;       // "bfloat16", "float32", ... (informational)
  QuantConfig quant;             // quantization_config (quant.quantized() false for a dense checkpoint)

  LayerAttention layer_attention(int64_t il) const {
    if (!layer_types.empty()) return layer_types[size_t(il)];
    return sliding_window > 0 ? LayerAttention::Sliding : LayerAttention::Full;
  }
  // The attention window of layer il in tokens (0 = full attention).
  int64_t layer_window(int64_t il) const {
    return layer_attention(il) == LayerAttention::Sliding ? sliding_window : 0;
  }
  // True when some layers slide and others attend to everything (their KV is kept apart).
  bool mixed_attention() const;
  // RoPE of a kind of layer: rope_local for Sliding layers of a mixed model, else the main one.
  RopeParams rope(LayerAttention kind) const;
  // KV groups (backend.h KvCacheSpec): a mixed model keeps the KV of its Full layers in
  // group 0 and of its Sliding layers in group 1, each group with its own blocks, so the
  // sliding layers' blocks are freed as the window moves; every other model has one group.
  // [n_layers] the group of each layer, empty when there is one group.
  std::vector<int32_t> kv_layer_groups() const;
  bool layer_is_moe(int64_t il) const { return !moe_layers.empty() && moe_layers[size_t(il)]; }

  // Query heads, KV heads and dense-MLP columns of layer il.
  int64_t heads_of(int64_t il) const { return layer_n_heads.empty() ? n_heads : layer_n_heads[size_t(il)]; }
  int64_t kv_heads_of(int64_t il) const { return layer_n_kv_heads.empty() ? n_kv_heads : layer_n_kv_heads[size_t(il)]; }
  int64_t d_ff_of(int64_t il) const { return layer_d_ff.empty() ? d_ff : layer_d_ff[size_t(il)]; }
  // True when some layer's widths differ from the scalars (a pruned model).
  bool non_uniform() const;
  // [n_layers] KV heads of every layer, empty when every layer has n_kv_heads (KvCacheSpec::layer_kv_heads).
  std::vector<int64_t> kv_heads_per_layer() const;

  // Bytes of K and V for one token across all layers at the given element size (each layer
  // its own KV heads).
  int64_t kv_bytes_per_token(int64_t elem_bytes) const {
    int64_t heads = 0;
    for (int64_t il = 0; il < n_layers; ++il) heads += kv_heads_of(il);
    return heads * head_dim * 2 * elem_bytes;
  }
};

}  // namespace tf

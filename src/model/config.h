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

// RoPE frequency scaling. "default" = none; "llama3" = Llama-3.1's piecewise scaling.
struct RopeScaling {
  enum class Type : uint8_t { None, Llama3 } type = Type::None;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int64_t original_max_position_embeddings = 8192;
};

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
};

struct ModelConfig {
  std::string model_type;        // as written in config.json: the architecture registry's key
  int64_t d_model = 0;           // hidden_size
  int64_t d_ff = 0;              // intermediate_size
  int64_t n_layers = 0;          // num_hidden_layers
  int64_t n_heads = 0;           // num_attention_heads
  int64_t n_kv_heads = 0;        // num_key_value_heads (defaults to n_heads: MHA)
  int64_t head_dim = 0;          // head_dim, or d_model / n_heads when absent
  int64_t n_vocab = 0;           // vocab_size
  int64_t max_position = 0;      // max_position_embeddings
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;   // top-level rope_theta or rope_parameters.rope_theta
  RopeScaling rope_scaling;
  int64_t sliding_window = 0;    // 0 = none (mistral sets it; qwen2 only with use_sliding_window)
  bool attention_bias = false;   // q/k/v biases (qwen2 always; llama if attention_bias, with o_proj's)
  bool tie_word_embeddings = false;
  int32_t bos_id = -1;           // -1 = none
  std::vector<int32_t> eos_ids;  // any of these ends generation
  std::string torch_dtype;       // "bfloat16", "float32", ... (informational)
  QuantConfig quant;             // quantization_config (quant.quantized() false for a dense checkpoint)

  // Bytes of K and V for one token across all layers at the given element size.
  int64_t kv_bytes_per_token(int64_t elem_bytes) const {
    return n_layers * n_kv_heads * head_dim * 2 * elem_bytes;
  }
};

}  // namespace tf

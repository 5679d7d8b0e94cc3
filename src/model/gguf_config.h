// Model hyper-parameters from a GGUF file's metadata, in the terms of a Hugging Face
// config.json (ModelConfig). general.architecture picks the keys, <arch>.*, and the
// registry's model_type:
//   llama     Llama and Mistral models (llama.cpp writes both as llama); with expert_count,
//             Mixtral (mixtral)
//   qwen2     Qwen2 (q/k/v biases)        qwen3   Qwen3 (q/k norms)
//   qwen3moe  Qwen3-MoE (qwen3_moe)       phi3    Phi-3 / Phi-4-mini (partial RoPE)
//   gemma3    Gemma 3 text (gemma3_text)
//   embedding_length -> d_model, feed_forward_length -> d_ff, block_count -> n_layers,
//   attention.head_count(_kv) -> n_heads (n_kv_heads), attention.key_length -> head_dim,
//   rope.dimension_count -> rotary_dim, context_length -> max_position,
//   attention.layer_norm_rms_epsilon, rope.freq_base, rope.scaling.type / factor (linear),
//   attention.sliding_window, expert_count, expert_used_count, expert_feed_forward_length,
//   vocab_size (else the token count).
// What llama.cpp's converter leaves implicit, and its loader assumes: no output.weight tensor
// means tied embeddings; an attn_q.bias tensor means attention biases; a rope_freqs tensor is
// Llama 3.1's RoPE scaling as per-frequency divisors, rope_factors_short / _long Phi-3's
// LongRoPE; experts' top-k weights are renormalised; Gemma 3's window period, local RoPE base
// and softmax scale (gguf_config.cpp, read_gemma3); tokenizer.ggml.bos/eos_token_id (and the
// eot/eom ids, which also end a turn) are the special ids. What twofold cannot run is
// refused, naming the key or tensor: another architecture, partial RoPE outside phi3, other
// RoPE scalings (yarn), logit soft-capping.
#pragma once

#include <string_view>

#include "model/config.h"

namespace tf {

class GgufFile;

ModelConfig gguf_model_config(const GgufFile& f);
// general.architecture (llama.cpp's name: llama for Mixtral too, qwen3moe, gemma3, ...).
std::string_view gguf_architecture(const GgufFile& f);

}  // namespace tf

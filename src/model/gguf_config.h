// Model hyper-parameters from a GGUF file's metadata, in the terms of a Hugging Face
// config.json (ModelConfig). general.architecture picks the keys, <arch>.*:
//   llama  Llama and Mistral models (llama.cpp writes both as llama); qwen2  Qwen2 (q/k/v biases)
//   embedding_length -> d_model, feed_forward_length -> d_ff, block_count -> n_layers,
//   attention.head_count(_kv) -> n_heads (n_kv_heads), attention.key_length -> head_dim,
//   context_length -> max_position, attention.layer_norm_rms_epsilon, rope.freq_base,
//   attention.sliding_window, vocab_size (else the token count).
// What llama.cpp's converter leaves implicit: no output.weight tensor means tied embeddings;
// llama with attn_q.bias has attention biases; tokenizer.ggml.bos/eos_token_id (and the
// eot/eom ids, which also end a turn) are the special ids. Partial RoPE, RoPE scaling other
// than none, and per-layer head counts are refused, naming the key.
#pragma once

#include "model/config.h"

namespace tf {

class GgufFile;

ModelConfig gguf_model_config(const GgufFile& f);

}  // namespace tf

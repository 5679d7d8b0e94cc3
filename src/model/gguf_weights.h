// A GGUF file's tensors as a TensorSource with Hugging Face names and layouts, so the loader
// and the weight table see the same tensors as from a safetensors folder. llama.cpp's
// conversion conventions are undone:
//   names   token_embd -> model.embed_tokens, output_norm -> model.norm, output -> lm_head,
//           blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up,
//           ffn_down} -> model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj,
//           post_attention_layernorm, mlp.{gate,up,down}_proj} (.weight, .bias);
//   shapes  ggml's ne reversed: matrices are [out_features, in_features];
//   Q, K    (llama only) convert_hf_to_gguf.py reorders the rows of each head so that ggml's
//           RoPE, which rotates adjacent pairs, equals Hugging Face's rotate-half; the rows go
//           back: row t * head_dim/2 + j of a head (t = 0, 1) is row 2j + t in the file;
//   types   F32, F16 and BF16 tensors are used in place from the mapping. Matrices of the
//           block types in GgufWeightOptions::keep_blocks (those the backend's matmul reads:
//           Backend::reads_gguf_block) stay in their blocks, in place (reordered Q/K: a
//           copy of the blocks with the rows moved; rows are whole blocks). Other Q8_0, Q4_0,
//           Q4_1, Q4_K, Q5_K and Q6_K tensors (and reordered float Q/K) are dequantized to F32
//           at load, on all threads, with a progress bar. Other types are refused, naming the
//           tensor.
// A tensor name outside this list is refused too: it would be a part of the model that the
// forward pass leaves out.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/tensor_source.h"

namespace tf {

class GgufFile;

// The Hugging Face name of a GGUF tensor name, or "" when it has none.
std::string gguf_to_hf_name(std::string_view gguf_name);

struct GgufWeightOptions {
  std::vector<DType> keep_blocks;  // GGUF block types whose matrices stay quantized; empty: none
};

std::unique_ptr<TensorSource> gguf_weights(std::shared_ptr<const GgufFile> file, const ModelConfig& cfg,
                                           const GgufWeightOptions& opt = {});
// The same for a path (its config from gguf_model_config).
std::unique_ptr<TensorSource> open_gguf_weights(const std::string& path, const GgufWeightOptions& opt = {});

}  // namespace tf

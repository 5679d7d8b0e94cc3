// A GGUF file's tensors as a TensorSource with Hugging Face names and layouts, so the loader
// and the weight table see the same tensors as from a safetensors folder. llama.cpp's
// conversion conventions are undone:
//   names   token_embd -> model.embed_tokens, output_norm -> model.norm, output -> lm_head,
//           blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, attn_q_norm, attn_k_norm,
//           ffn_gate, ffn_up, ffn_down} -> model.layers.N.{input_layernorm,
//           self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm, mlp.{gate,up,down}_proj} (.weight,
//           .bias); ffn_norm -> post_attention_layernorm, except Gemma 3's:
//           pre_feedforward_layernorm, beside its post_attention_norm and post_ffw_norm
//           (post_attention_layernorm, post_feedforward_layernorm); Phi-3's attn_qkv and ffn_up
//           -> self_attn.qkv_proj, mlp.gate_up_proj; ffn_gate_inp -> the router (Mixtral's
//           block_sparse_moe.gate, Qwen3-MoE's mlp.gate);
//   experts ffn_{gate,up,down}_exps [experts, rows, columns] -> one [rows, columns] tensor per
//           expert (Mixtral's block_sparse_moe.experts.E.{w1,w3,w2}, Qwen3-MoE's
//           mlp.experts.E.{gate,up,down}_proj), each a contiguous slice of the file's bytes;
//           older files' ffn_{gate,up,down}.E (one tensor per expert) -> the same names;
//   shapes  ggml's ne reversed: matrices are [out_features, in_features];
//   Q, K    (llama and Mixtral) convert_hf_to_gguf.py reorders the rows of each head so that
//           ggml's RoPE, which rotates adjacent pairs, equals Hugging Face's rotate-half; the
//           rows go back: row t * head_dim/2 + j of a head (t = 0, 1) is row 2j + t in the file;
//   norms   (Gemma 3) stored as 1 + w: loaded as w, since the weight table adds the one;
//   types   F32, F16 and BF16 tensors are used in place from the mapping. Matrices of the
//           block types in GgufWeightOptions::keep_blocks (those the backend's matmul reads:
//           Backend::reads_gguf_block) stay in their blocks, in place (reordered Q/K: a
//           copy of the blocks with the rows moved; rows are whole blocks). Other Q8_0, Q4_0,
//           Q4_1, Q4_K, Q5_K and Q6_K tensors (and reordered float Q/K, shifted norms) are
//           dequantized to F32 at load, on all threads, with a progress bar. Other types are
//           refused, naming the tensor.
// The RoPE factor tensors (rope_freqs, rope_factors_short / _long) are read by the config
// (gguf_config.h), not loaded. A tensor name outside this list is refused: it would be a part
// of the model that the forward pass leaves out.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/tensor_source.h"

namespace tf {

class GgufFile;

// The Hugging Face name of a GGUF tensor name in a model of `model_type` (the registry's), or
// "" when it has none (stacked expert tensors, which gguf_weights splits, included).
std::string gguf_to_hf_name(std::string_view gguf_name, std::string_view model_type);

struct GgufWeightOptions {
  std::vector<DType> keep_blocks;  // GGUF block types whose matrices stay quantized; empty: none
};

std::unique_ptr<TensorSource> gguf_weights(std::shared_ptr<const GgufFile> file, const ModelConfig& cfg,
                                           const GgufWeightOptions& opt = {});
// The same for a path (its config from gguf_model_config).
std::unique_ptr<TensorSource> open_gguf_weights(const std::string& path, const GgufWeightOptions& opt = {});

}  // namespace tf

// The weight table: every tensor of an architecture described once (checkpoint name, shape,
// whether it may be absent), so loading, validation, quantization and later sharding read
// one list instead of each re-listing tensors.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "model/safetensors.h"

namespace tf {

enum class WeightRole : uint8_t {
  Embedding, FinalNorm, LmHead,
  AttnNorm, Wq, Wk, Wv, Wo, Bq, Bk, Bv,
  MlpNorm, Wgate, Wup, Wdown,
  Bo,  // o_proj bias: Llama with attention_bias (transformers biases o_proj too; Qwen2 does not)
};

struct WeightSpec {
  std::string name;            // checkpoint name, e.g. "model.layers.3.self_attn.q_proj.weight"
  WeightRole role;
  int layer = -1;              // -1 for global tensors
  std::vector<int64_t> shape;  // expected shape, [out_features, in_features] for matrices
  bool optional = false;       // e.g. lm_head.weight when embeddings are tied
};

std::vector<WeightSpec> llama_weight_specs(const ModelConfig& cfg);

// Checks that every required tensor exists with the expected shape and a float dtype
// (F32/F16/BF16). Throws tf::Error naming the tensor, the file, expected and actual shape.
void validate_checkpoint(const ModelConfig& cfg, const Checkpoint& ckpt);

}  // namespace tf

// What a converter reads from a model folder as is: the files it carries over unchanged, and
// a tensor's values in F32.
#pragma once

#include <string>
#include <vector>

#include "model/tensor_source.h"

namespace tf {

// Copies every regular file of `in` but the weights (*.safetensors, the shard index) and
// config.json into `out` (the tokenizer, generation_config.json, ...), replacing what is there.
void copy_model_side_files(const std::string& in, const std::string& out);

// Every element of `t` (any stored dtype the host backend reads) converted to F32.
std::vector<float> tensor_f32(const TensorInfo& t);

}  // namespace tf

// Files of a model folder that a converter carries over unchanged.
#pragma once

#include <string>

namespace tf {

// Copies every regular file of `in` but the weights (*.safetensors, the shard index) and
// config.json into `out` (the tokenizer, generation_config.json, ...), replacing what is there.
void copy_model_side_files(const std::string& in, const std::string& out);

}  // namespace tf

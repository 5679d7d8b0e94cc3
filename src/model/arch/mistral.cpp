// Mistral (model_type "mistral"): Llama's table and forward with sliding-window attention on
// every layer when sliding_window is set; no attention biases.
#include "model/arch/archs.h"

namespace tf {

void read_mistral_config(const ConfigFields& f, ModelConfig& c) {
  require_silu_mlp(f);
  c.sliding_window = f.positive_int_or("sliding_window", ConfigLimits::kMaxPositions, 0);
}

}  // namespace tf

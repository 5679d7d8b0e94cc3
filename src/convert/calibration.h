// What the model converters (`twofold quantize`, `twofold prune`) measure on a model: its
// perplexity on a token stream, and the input rows of every linear weight on calibration
// tokens (quant/capture_backend.h), keyed by the weight-table entry they belong to.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/arch/model.h"
#include "model/weight_table.h"
#include "quant/capture_backend.h"

namespace tf {

// One sequence per window of `window` tokens from position 0, every position's logits:
// exp(mean NLL of tokens 1.. of each window), the method of `twofold perplexity`
// (models/README.md, "Perplexity"). `on_window(done, total)` is called after each window
// when set. 0 when nothing is predicted.
double model_perplexity(Model& model, Backend& be, const std::vector<int32_t>& ids, int32_t window,
                        const std::function<void(int64_t, int64_t)>& on_window = {});

// Each linear weight's input rows (the first `max_rows` of each) on the model in `dir`, run
// in F32 on the CPU backend over `ids` in windows of `window` tokens. The capture keys rows by
// the weight's upload; the forward calls the linear weights of a layer in the table's order
// and the LM head last, which maps them to keys (checked against each weight's input
// dimension). Throws tf::Error when the forward's matmuls do not match the table (experts).
std::map<WeightKey, CaptureBackend::Record> capture_linear_inputs(const std::string& dir, const WeightTable& table,
                                                                 const std::vector<int32_t>& ids, int32_t window,
                                                                 int64_t max_rows);

}  // namespace tf

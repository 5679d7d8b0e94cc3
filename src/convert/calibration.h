// What the model converters (`twofold quantize`, `twofold prune`) measure on a model: its
// perplexity on a token stream, and the input rows of every linear weight on calibration
// tokens (quant/capture_backend.h), keyed by the weight-table entry they belong to.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
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

// The calibration rows of every linear weight's input; for a mixture-of-experts layer, of
// each expert's (the tokens routed to it).
struct Calibration {
  std::map<WeightKey, CaptureBackend::Record> linear;
  std::map<WeightKey, std::vector<CaptureBackend::Record>> experts;  // ExpertsGateUp / ExpertsDown -> [n_experts]
  bool empty() const { return linear.empty(); }
  // The rows of `key` (expert < 0) or of its expert `expert`; nullptr when none were recorded.
  const CaptureBackend::Record* find(WeightKey key, int expert) const;
};

// Each linear weight's input rows (the first `capture.max_rows` of each; each window's first
// `capture.skip_first` left out) over `ids` in windows of `window` tokens, the model made by `load` on a capture backend over the CPU backend. The
// capture keys rows by the weight's upload; the forward calls the matmuls of a layer in the
// table's order (q|k|v, o, the router or gate|up, down) and the LM head last, which maps them
// to keys (checked against each weight's input dimension); the mixture-of-experts layers'
// records come in layer order. Errors name `dir`.
Calibration capture_calibration(const std::string& dir, const WeightTable& table, const std::vector<int32_t>& ids,
                                int32_t window, const CaptureOptions& capture,
                                const std::function<std::unique_ptr<Model>(Backend&)>& load);
// The same for the model folder `dir` loaded in F32.
Calibration capture_calibration(const std::string& dir, const WeightTable& table, const std::vector<int32_t>& ids,
                                int32_t window, const CaptureOptions& capture);

}  // namespace tf

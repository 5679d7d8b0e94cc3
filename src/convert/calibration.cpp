#include "convert/calibration.h"

#include <algorithm>
#include <cmath>

#include "backend/host_backend.h"
#include "core/batch.h"
#include "core/error.h"
#include "model/arch/registry.h"

namespace tf {

double model_perplexity(Model& model, Backend& be, const std::vector<int32_t>& ids, int32_t window,
                        const std::function<void(int64_t, int64_t)>& on_window) {
  const int32_t bs = 16, n_blocks = (window + bs - 1) / bs;
  const ModelConfig& cfg = model.config();
  KvCacheSpec spec = kv_geometry(cfg);
  spec.n_blocks = n_blocks;
  spec.block_size = bs;
  spec.dtype = DType::F32;
  model.init_kv_cache(be, spec);
  std::vector<int32_t> blocks(static_cast<size_t>(n_blocks));
  for (int32_t b = 0; b < n_blocks; ++b) blocks[size_t(b)] = b;
  const int64_t n_windows = (int64_t(ids.size()) + window - 1) / window;
  double nll = 0;
  int64_t n = 0;
  std::vector<float> logits;
  for (size_t at = 0; at + 2 <= ids.size(); at += size_t(window)) {
    const int32_t len = int32_t(std::min<size_t>(size_t(window), ids.size() - at));
    BatchBuilder bb(bs, n_blocks);
    bb.add(SeqChunk{.ids = ids.data() + at, .n_ids = len, .start_pos = 0, .blocks = blocks.data(),
                    .n_blocks = n_blocks, .want_logits = true, .all_logits = true});
    const PreparedStep step = model.prepare(bb.take());
    model.run();
    logits.resize(size_t(step.logits.numel()));
    be.copy_to_host(step.logits, logits.data());
    const int64_t v = step.logits.shape[1];
    for (int32_t t = 0; t + 1 < len; ++t) {
      const float* row = logits.data() + int64_t(t) * v;
      const float mx = *std::max_element(row, row + v);
      double sum = 0;
      for (int64_t j = 0; j < v; ++j) sum += std::exp(double(row[j]) - mx);
      nll += std::log(sum) + mx - row[ids[at + size_t(t) + 1]];
      ++n;
    }
    if (on_window) on_window(int64_t(at) / window + 1, n_windows);
  }
  return n ? std::exp(nll / double(n)) : 0;
}

const CaptureBackend::Record* Calibration::find(WeightKey key, int expert) const {
  if (expert < 0) {
    auto it = linear.find(key);
    return it == linear.end() ? nullptr : &it->second;
  }
  auto it = experts.find(key);
  return it == experts.end() ? nullptr : &it->second[size_t(expert)];
}

Calibration capture_calibration(const std::string& dir, const WeightTable& table, const std::vector<int32_t>& ids,
                                int32_t window, const CaptureOptions& capture_options,
                                const std::function<std::unique_ptr<Model>(Backend&)>& load) {
  using R = WeightRole;
  auto cpu = make_backend(BackendKind::Cpu);
  CaptureBackend capture(*cpu, capture_options);
  auto model = load(capture);
  model_perplexity(*model, capture, ids, window);
  std::vector<WeightKey> order, moe_layers;
  for (const WeightSpec& w : table.weights) {
    const bool expert = w.key.role == R::ExpertsGateUp || w.key.role == R::ExpertsDown;
    if ((is_linear_role(w.key.role) && !expert && w.key.layer >= 0) || w.key.role == R::Router)
      order.push_back(w.key);
    if (w.key.role == R::ExpertsGateUp) moe_layers.push_back(w.key);
  }
  const auto by_layer = [](const WeightKey& a, const WeightKey& b) { return a.layer < b.layer; };
  std::stable_sort(order.begin(), order.end(), by_layer);
  std::stable_sort(moe_layers.begin(), moe_layers.end(), by_layer);
  if (table.find({R::LmHead})) order.push_back({R::LmHead});
  const auto& rec = capture.records();
  if (rec.size() != order.size())
    fail("{}: the calibration forward made {} distinct matmuls, but the {} table has {} linear weights and routers",
         dir, rec.size(), table.arch, order.size());
  Calibration out;
  for (size_t i = 0; i < order.size(); ++i) {
    const WeightSpec* w = table.find(order[i]);
    if (rec[i].k != w->parts[0].shape.back())
      fail("{}: calibration matmul {} has {} inputs, but layer {} {} has {} (the forward's order is not the table's)",
           dir, i, rec[i].k, order[i].layer, weight_role_name(order[i].role), w->parts[0].shape.back());
    if (order[i].role != R::Router) out.linear[order[i]] = rec[i];
  }
  const auto& ex = capture.expert_records();
  if (ex.size() != moe_layers.size())
    fail("{}: the calibration forward ran {} mixture-of-experts layers, but the {} table has {}", dir, ex.size(),
         table.arch, moe_layers.size());
  for (size_t i = 0; i < ex.size(); ++i) {
    out.experts[moe_layers[i]] = ex[i].gate_up;
    out.experts[{R::ExpertsDown, moe_layers[i].layer}] = ex[i].down;
  }
  return out;
}

Calibration capture_calibration(const std::string& dir, const WeightTable& table, const std::vector<int32_t>& ids,
                                int32_t window, const CaptureOptions& capture) {
  return capture_calibration(dir, table, ids, window, capture, [&](Backend& be) {
    return load_model(dir, be, LoadOptions{.keep_stored_dtype = false, .weight_dtype = DType::F32});
  });
}

}  // namespace tf

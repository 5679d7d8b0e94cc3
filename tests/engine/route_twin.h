// A mixture-of-experts model run on two backends in lockstep with the second one's expert
// choices pinned to the first one's: a "routing-pinned twin". It separates the two ways a
// low-precision backend departs from an F32 reference:
//   - arithmetic (BF16 weights and activations): with the routes pinned, the two backends
//     compute the same function, so their logits must agree within the rounding budget;
//   - discrete flips: where the router's logits of two experts are nearly equal, rounding
//     alone can make the test backend choose another expert, after which its output differs
//     by O(1) from the reference's (the expert MLPs are unrelated functions). Each flip is
//     reported with its gap in the reference's own F32 router logits, so a test can require
//     every flip to be a near-tie (gap below a tolerance) and not a wrong kernel.
//
// RouteSpy records every moe_route call (router logits, chosen ids); when `pin` holds ids for
// a call it overwrites that call's choice with them and sets the weights to the softmax of
// its own logits at those ids (renormalized as the config says), as Backend::moe_route
// would for that choice. route_pinned_twin() loads the model on both backends, runs the
// prompt as one prefill and then n_new greedy decode steps (tokens chosen by the test
// backend and fed to both), one sequence, eager (no CUDA Graphs).
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/forwarding_backend.h"
#include "core/batch.h"
#include "core/error.h"
#include "engine/golden_util.h"
#include "model/arch/model.h"
#include "model/config.h"

namespace tf::test {

class RouteSpy : public ForwardingBackend {
 public:
  struct Route {
    int64_t rows = 0, n_experts = 0, top_k = 0;
    std::vector<float> logits;  // [rows, n_experts]
    std::vector<int32_t> ids;   // [rows, top_k]: this backend's own choice (before pinning)
  };
  using ForwardingBackend::ForwardingBackend;

  void moe_route(const TensorView& logits, const MoeParams& p, const TensorView& ids,
                 const TensorView& weights) override {
    inner().moe_route(logits, p, ids, weights);
    Route r{.rows = logits.shape[0], .n_experts = p.n_experts, .top_k = p.top_k};
    r.logits.resize(size_t(r.rows * r.n_experts));
    r.ids.resize(size_t(r.rows * r.top_k));
    inner().copy_to_host(logits, r.logits.data());
    inner().copy_to_host(ids, r.ids.data());
    const size_t call = routes.size();
    if (call < pin.size()) {
      const std::vector<int32_t>& want = pin[call];
      TF_ASSERT(want.size() == r.ids.size(), "route_twin: call {} pins {} ids for {}", call, want.size(), r.ids.size());
      std::vector<float> w(want.size());
      for (int64_t row = 0; row < r.rows; ++row) {
        const float* l = r.logits.data() + row * r.n_experts;
        const double mx = *std::max_element(l, l + r.n_experts);
        double sum = 0, top = 0;
        for (int64_t e = 0; e < r.n_experts; ++e) sum += std::exp(double(l[e]) - mx);
        for (int64_t j = 0; j < r.top_k; ++j) top += std::exp(double(l[want[size_t(row * r.top_k + j)]]) - mx) / sum;
        for (int64_t j = 0; j < r.top_k; ++j) {
          const double pj = std::exp(double(l[want[size_t(row * r.top_k + j)]]) - mx) / sum;
          w[size_t(row * r.top_k + j)] = float(p.renormalize ? pj / top : pj);
        }
      }
      inner().copy_from_host(want.data(), ids);
      inner().copy_from_host(w.data(), weights);
    }
    routes.push_back(std::move(r));
  }

  std::vector<std::vector<int32_t>> pin;  // ids to impose, per moe_route call of the next step
  std::vector<Route> routes;              // every call of the current step, in order
};

// How far a pinned choice is from the reference's own: the largest l[o] - l[p] over experts o
// the reference chose and the pinned route did not, and p the other way round (0 when the
// sets agree). A rounding-induced flip has a gap of the order of the rounding error.
inline double route_gap(const float* l, const int32_t* own, const int32_t* pinned, int64_t k) {
  double gap = 0;
  for (int64_t i = 0; i < k; ++i) {
    if (std::find(pinned, pinned + k, own[i]) != pinned + k) continue;
    for (int64_t j = 0; j < k; ++j)
      if (std::find(own, own + k, pinned[j]) == own + k) gap = std::max(gap, double(l[own[i]]) - double(l[pinned[j]]));
  }
  return gap;
}

struct TwinStep {
  double rel_l2 = 0;            // last-position logits, test vs pinned reference
  int32_t test_top1 = 0, ref_top1 = 0;
  double ref_margin = 0;        // the reference's top-1 minus top-2 logit
};
struct RouteFlip {
  int step = 0, call = 0;  // call: the moe_route call of the step (one per expert layer)
  int64_t row = 0;
  double gap = 0;  // route_gap in the reference's F32 router logits
};
struct TwinResult {
  std::vector<TwinStep> steps;    // the prefill, then each decode step
  std::vector<RouteFlip> flips;   // choices of the test backend the reference would not make
  int64_t n_choices = 0;          // routed rows over all calls and steps
  std::vector<int32_t> test_ids;  // the test backend's greedy tokens
  std::vector<float> test_prompt_logits;  // the test backend's logits at the prompt's last position
};

// The prompt and n_new greedy steps on `test_be` (KV in test_kv, the weights loaded with
// `test_load`) and on `ref_be` (KV F32, weights as stored) with the reference's routes pinned
// to the test backend's. The model must have one KV group (no sliding-window layers).
inline TwinResult route_pinned_twin(const std::string& dir, Backend& test_be, DType test_kv, Backend& ref_be,
                                    const std::vector<int32_t>& prompt, int n_new, const LoadOptions& test_load = {}) {
  RouteSpy spy_t(test_be), spy_r(ref_be);
  const auto model_t = load_model(dir, spy_t, test_load);
  const auto model_r = load_model(dir, spy_r);
  const ModelConfig& cfg = model_t->config();
  constexpr int32_t kBlock = 16;
  const int32_t n_blocks = int32_t((int64_t(prompt.size()) + n_new + kBlock - 1) / kBlock + 1);
  KvCacheSpec spec{.n_layers = cfg.n_layers, .n_blocks = n_blocks, .block_size = kBlock,
                   .n_kv_heads = cfg.n_kv_heads, .head_dim = cfg.head_dim, .dtype = test_kv};
  model_t->init_kv_cache(spy_t, spec);
  spec.dtype = DType::F32;
  model_r->init_kv_cache(spy_r, spec);
  std::vector<int32_t> blocks(static_cast<size_t>(n_blocks));
  for (int32_t i = 0; i < n_blocks; ++i) blocks[size_t(i)] = i;
  const int64_t n_vocab = cfg.n_vocab;

  auto step = [&](Model& m, Backend& be, const std::vector<int32_t>& ids, int32_t start) {
    BatchBuilder b(kBlock, n_blocks);
    b.add(SeqChunk{.ids = ids.data(), .n_ids = int32_t(ids.size()), .start_pos = start, .blocks = blocks.data(),
                   .n_blocks = n_blocks});
    const PreparedStep p = m.prepare(b.take());
    m.run();
    std::vector<float> logits(static_cast<size_t>(n_vocab));
    be.copy_to_host(p.logits, logits.data());
    return logits;
  };
  auto argmax = [&](const std::vector<float>& l) {
    return int32_t(std::max_element(l.begin(), l.end()) - l.begin());
  };

  TwinResult res;
  std::vector<int32_t> chunk = prompt;
  int32_t start = 0;
  for (int s = 0; s <= n_new; ++s) {
    spy_t.routes.clear();
    spy_r.routes.clear();
    const std::vector<float> lt = step(*model_t, spy_t, chunk, start);
    spy_r.pin.clear();
    for (const RouteSpy::Route& r : spy_t.routes) spy_r.pin.push_back(r.ids);
    const std::vector<float> lr = step(*model_r, spy_r, chunk, start);
    TF_ASSERT(spy_r.routes.size() == spy_t.routes.size(), "route_twin: {} and {} moe_route calls",
              spy_t.routes.size(), spy_r.routes.size());
    for (size_t c = 0; c < spy_r.routes.size(); ++c) {
      const RouteSpy::Route& r = spy_r.routes[c];
      for (int64_t row = 0; row < r.rows; ++row) {
        ++res.n_choices;
        const double gap = route_gap(r.logits.data() + row * r.n_experts, r.ids.data() + row * r.top_k,
                                     spy_t.routes[c].ids.data() + row * r.top_k, r.top_k);
        std::vector<int32_t> own(r.ids.begin() + row * r.top_k, r.ids.begin() + (row + 1) * r.top_k);
        std::vector<int32_t> got(spy_t.routes[c].ids.begin() + row * r.top_k,
                                 spy_t.routes[c].ids.begin() + (row + 1) * r.top_k);
        std::sort(own.begin(), own.end());
        std::sort(got.begin(), got.end());
        if (own != got) res.flips.push_back(RouteFlip{.step = s, .call = int(c), .row = row, .gap = gap});
      }
    }
    double d2 = 0, w2 = 0;
    for (size_t i = 0; i < lr.size(); ++i) {
      d2 += (double(lt[i]) - lr[i]) * (double(lt[i]) - lr[i]);
      w2 += double(lr[i]) * lr[i];
    }
    res.steps.push_back(TwinStep{.rel_l2 = std::sqrt(d2 / w2), .test_top1 = argmax(lt), .ref_top1 = argmax(lr),
                                 .ref_margin = top2_margin(lr.data(), n_vocab)});
    if (s == 0) res.test_prompt_logits = lt;
    start += int32_t(chunk.size());
    chunk = {argmax(lt)};
    if (s < n_new) res.test_ids.push_back(chunk[0]);
  }
  return res;
}

}  // namespace tf::test

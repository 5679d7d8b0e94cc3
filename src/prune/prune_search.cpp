#include "prune/prune_search.h"

#include <fmt/format.h>

#include <optional>

#include "core/error.h"

namespace tf {

namespace {

struct Candidate {
  PrunedModel model;
  PruneScore score;
};

// The model of target t under each score; with several, the one with the lower perplexity
// on the held-out calibration tokens.
Candidate best_of(const Pruner& pruner, const PruneRequest& r, const PlanTarget& t) {
  TF_ASSERT(!r.scores.empty(), "prune: no score");
  Candidate best{pruner.build(pruner.plan(r.scores[0], t), r.recovery), r.scores[0]};
  if (r.scores.size() == 1) return best;
  if (r.select_ids.size() < 2) fail("prune: choosing between scores needs held-out calibration tokens");
  double best_ppl = pruner.perplexity(best.model, r.select_ids, "selecting " + std::string(prune_score_name(r.scores[0])));
  for (size_t i = 1; i < r.scores.size(); ++i) {
    Candidate c{pruner.build(pruner.plan(r.scores[i], t), r.recovery), r.scores[i]};
    const double ppl = pruner.perplexity(c.model, r.select_ids, "selecting " + std::string(prune_score_name(r.scores[i])));
    if (ppl < best_ppl) {
      best_ppl = ppl;
      best = std::move(c);
    }
  }
  return best;
}

}  // namespace

PruneOutcome prune_with(const Pruner& pruner, const PruneRequest& r) {
  const bool search = r.target.heads_pct <= 0 && r.target.ffn_pct <= 0 && r.target.params_pct <= 0;
  if (search && r.max_ppl_increase < 0)
    fail("prune: give a cut (--heads, --ffn or --target-params) or --max-ppl-increase to search for the largest one");
  if (r.max_ppl_increase >= 0 && r.eval_ids.size() < 2)
    fail("prune: --max-ppl-increase needs evaluation tokens (--eval FILE)");
  PruneOutcome out;
  const bool measure = r.eval_ids.size() >= 2;
  if (measure) out.ppl_before = pruner.perplexity(pruner.build(keep_all(pruner.shapes()), Recovery::None), r.eval_ids,
                                                  "perplexity unpruned");
  const double limit = out.ppl_before * (1 + r.max_ppl_increase / 100);
  auto measure_at = [&](const PlanTarget& t, const std::string& what) {
    Candidate c = best_of(pruner, r, t);
    const double ppl = measure ? pruner.perplexity(c.model, r.eval_ids, what) : 0;
    return std::pair{std::move(c), ppl};
  };
  if (!search) {
    auto [c, ppl] = measure_at(r.target, "perplexity pruned");
    out.model = std::move(c.model);
    out.score = c.score;
    out.params_pct = r.target.params_pct;
    out.ppl_after = ppl;
    out.within_limit = r.max_ppl_increase < 0 || ppl <= limit;
    return out;
  }
  // Binary search over whole percents: lo is within the limit (0: nothing cut), hi is not.
  int lo = 0, hi = int(r.search_max_pct) + 1;
  std::optional<std::pair<Candidate, double>> found;
  double first_ppl = 0;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    PlanTarget t = r.target;
    t.params_pct = mid;
    auto m = measure_at(t, fmt::format("search {}%", mid));
    if (m.second <= limit) {
      lo = mid;
      found = std::move(m);
    } else {
      hi = mid;
      first_ppl = m.second;
    }
  }
  if (!found) {
    out.within_limit = false;
    out.ppl_after = first_ppl;
    out.params_pct = hi;
    return out;
  }
  out.model = std::move(found->first.model);
  out.score = found->first.score;
  out.params_pct = lo;
  out.ppl_after = found->second;
  return out;
}

std::vector<SweepPoint> prune_sweep(const Pruner& pruner, const std::vector<double>& params_pcts,
                                    const std::vector<PruneScore>& scores, const std::vector<Recovery>& recoveries,
                                    const PlanTarget& base, const std::vector<int32_t>& eval_ids) {
  if (eval_ids.size() < 2) fail("prune --sweep needs evaluation tokens (--eval FILE)");
  std::vector<SweepPoint> out;
  for (PruneScore s : scores)
    for (double pct : params_pcts) {
      PlanTarget t = base;
      t.params_pct = pct;
      const std::vector<LayerKeep> keep = pruner.plan(s, t);
      for (Recovery r : recoveries) {
        const PrunedModel m = pruner.build(keep, r);
        const std::string what = fmt::format("sweep {} {} {}%", prune_score_name(s), recovery_name(r), pct);
        out.push_back(SweepPoint{.score = s, .recovery = r, .params_pct = pct,
                                 .removed_layer_pct = 100.0 * double(m.n_layer_params_removed) /
                                                      double(pruner.shapes().n_layer_params),
                                 .removed_model_pct = 100.0 * (1 - double(m.n_params) / double(pruner.n_params())),
                                 .ppl = pruner.perplexity(m, eval_ids, what)});
      }
    }
  return out;
}

}  // namespace tf

#include "prune/prune_search.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "prune/greedy.h"

namespace tf {

namespace {

struct Candidate {
  PrunedModel model;
  PruneScore score;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Planned {
  std::vector<LayerKeep> keep;
  double select_ppl = -1;  // perplexity on the held-out tokens of the recovered model, when measured
};

// The plan of target t under score s: the global ranking, or the greedy allocation whose loss
// is the log-perplexity on `select` of the model recovered by r.
Planned plan_with(const Pruner& pruner, PruneScore s, const PlanTarget& t, Recovery r, Allocation a, double step_pct,
                  const std::vector<int32_t>& select, AllocationCost& cost,
                  const std::function<void(const std::string&)>& log) {
  if (a == Allocation::Global) return {pruner.plan(s, t), -1};
  if (select.size() < 2) fail("prune: the greedy allocation needs held-out calibration tokens");
  const auto t0 = std::chrono::steady_clock::now();
  int64_t n = 0;
  const GreedyPlan g = greedy_plan(pruner.shapes(), pruner.scores(s), t, step_pct, [&](const std::vector<LayerKeep>& keep) {
    return std::log(pruner.perplexity(pruner.build(keep, r), select,
                                      fmt::format("greedy {} {}% (evaluation {})", prune_score_name(s), t.params_pct, ++n)));
  }, [&](const GreedyStep& st) {
    if (log)
      log(fmt::format("greedy {} {}%: layer {} {} (-{} parameters), held-out perplexity {:.4f}, {} evaluations, {:.0f} s",
                      prune_score_name(s), t.params_pct, st.layer, st.heads ? "head unit" : "channels", st.params,
                      std::exp(st.loss), n, seconds_since(t0)));
  });
  cost.evaluations += g.evaluations;
  cost.seconds += seconds_since(t0);
  return {g.keep, std::exp(g.loss)};
}

// The model of target t under each score; with several, the one with the lower perplexity
// on the held-out calibration tokens.
Candidate best_of(const Pruner& pruner, const PruneRequest& r, const PlanTarget& t, AllocationCost& cost) {
  TF_ASSERT(!r.scores.empty(), "prune: no score");
  const auto t0 = std::chrono::steady_clock::now();
  AllocationCost greedy;
  auto candidate = [&](PruneScore s, double& select_ppl) {
    const Planned p = plan_with(pruner, s, t, r.recovery, r.allocation, r.greedy_step_pct, r.select_ids, greedy, r.log);
    Candidate c{pruner.build(p.keep, r.recovery), s};
    select_ppl = p.select_ppl;
    if (r.scores.size() > 1 && select_ppl < 0)
      select_ppl = pruner.perplexity(c.model, r.select_ids, "selecting " + std::string(prune_score_name(s)));
    return c;
  };
  if (r.scores.size() > 1 && r.select_ids.size() < 2)
    fail("prune: choosing between scores needs held-out calibration tokens");
  double best_ppl = 0;
  Candidate best = candidate(r.scores[0], best_ppl);
  for (size_t i = 1; i < r.scores.size(); ++i) {
    double ppl = 0;
    Candidate c = candidate(r.scores[i], ppl);
    if (ppl < best_ppl) {
      best_ppl = ppl;
      best = std::move(c);
    }
  }
  cost.evaluations += greedy.evaluations;
  cost.seconds += seconds_since(t0);
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
    Candidate c = best_of(pruner, r, t, out.cost);
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

std::string_view allocation_name(Allocation a) { return a == Allocation::Global ? "global" : "greedy"; }

Allocation parse_allocation(std::string_view name, std::string_view flag) {
  if (name == "global") return Allocation::Global;
  if (name == "greedy") return Allocation::Greedy;
  fail("{}: unknown allocation '{}' (expected global or greedy)", flag, name);
}

std::vector<SweepPoint> prune_sweep(const Pruner& pruner, const std::vector<double>& params_pcts,
                                    const std::vector<PruneScore>& scores, const std::vector<Recovery>& recoveries,
                                    const PlanTarget& base, const std::vector<int32_t>& eval_ids,
                                    const SweepAllocation& alloc) {
  if (eval_ids.size() < 2) fail("prune --sweep needs evaluation tokens (--eval FILE)");
  std::vector<SweepPoint> out;
  for (PruneScore s : scores)
    for (double pct : params_pcts) {
      PlanTarget t = base;
      t.params_pct = pct;
      AllocationCost global_cost;
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<LayerKeep> global = alloc.allocation == Allocation::Global ? pruner.plan(s, t) : std::vector<LayerKeep>{};
      global_cost.seconds = seconds_since(t0);
      for (Recovery r : recoveries) {
        AllocationCost cost = global_cost;
        const std::vector<LayerKeep> keep =
            alloc.allocation == Allocation::Global
                ? global
                : plan_with(pruner, s, t, r, alloc.allocation, alloc.greedy_step_pct, alloc.select_ids, cost, alloc.log).keep;
        const PrunedModel m = pruner.build(keep, r);
        const std::string what = fmt::format("sweep {} {} {}%", prune_score_name(s), recovery_name(r), pct);
        out.push_back(SweepPoint{.score = s, .recovery = r, .params_pct = pct,
                                 .removed_layer_pct = 100.0 * double(m.n_layer_params_removed) /
                                                      double(pruner.shapes().n_layer_params),
                                 .removed_model_pct = 100.0 * (1 - double(m.n_params) / double(pruner.n_params())),
                                 .ppl = pruner.perplexity(m, eval_ids, what), .cost = cost});
      }
    }
  return out;
}

}  // namespace tf

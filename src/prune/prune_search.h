// What `twofold prune` does with a Pruner (prune_model.h): one cut (the better score of
// several, by perplexity on held-out calibration tokens), the largest cut within a
// perplexity limit on the evaluation tokens, or a sweep of cuts for the curve.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "prune/prune_model.h"

namespace tf {

// How a parameter cut is split between layers: Global ranks every unit on one scale
// (plan_pruning); Greedy grows the cut step by step where the held-out calibration loss
// rises least (greedy.h), the scores only ordering units within a layer.
enum class Allocation : uint8_t { Global, Greedy };
std::string_view allocation_name(Allocation a);                             // "global", "greedy"
Allocation parse_allocation(std::string_view name, std::string_view flag);  // throws tf::Error naming flag

struct AllocationCost {
  int64_t evaluations = 0;  // greedy: loss evaluations (build + perplexity on the held-out tokens)
  double seconds = 0;       // wall time of the planning (and, for several scores, choosing)
};

struct PruneRequest {
  PlanTarget target;                 // the cut; none of heads/ffn/params set: search (needs max_ppl_increase)
  std::vector<PruneScore> scores;    // one, or several: each candidate keeps the better one on select_ids
  Recovery recovery = Recovery::Lsq;
  Allocation allocation = Allocation::Global;  // Greedy: a params_pct target (or the search) only
  double greedy_step_pct = 1.5;      // Greedy: channels per candidate, percent of the layers' parameters
  std::function<void(const std::string&)> log;  // Greedy: a line per step taken; may be empty
  std::vector<int32_t> select_ids;   // held-out calibration tokens (several scores; Greedy's loss)
  std::vector<int32_t> eval_ids;     // evaluation tokens (held-out validation); empty: not measured
  double max_ppl_increase = -1;      // percent over the unpruned perplexity on eval_ids; < 0: no limit
  double search_max_pct = 90;        // search: the largest params_pct tried
};

struct PruneOutcome {
  PrunedModel model;
  PruneScore score = PruneScore::Flap;
  double params_pct = 0;             // the target the cut came from (search: the one found)
  double ppl_before = 0, ppl_after = 0;  // on eval_ids; 0 when not measured
  bool within_limit = true;          // false: the cut (or every cut of the search) passes max_ppl_increase
  AllocationCost cost;               // summed over the search's cuts
};

// The cut of r.target, or with no cut given the largest whole-percent params_pct in
// (0, search_max_pct] whose perplexity stays within max_ppl_increase (binary search, which
// assumes perplexity grows with the cut). Throws tf::Error for a search without a limit or
// evaluation tokens.
PruneOutcome prune_with(const Pruner& pruner, const PruneRequest& r);

struct SweepPoint {
  PruneScore score = PruneScore::Flap;
  Recovery recovery = Recovery::None;
  double params_pct = 0;          // requested
  double removed_layer_pct = 0;   // of the layers' parameters, as cut
  double removed_model_pct = 0;   // of the whole model's
  double ppl = 0;                 // on the evaluation tokens
  AllocationCost cost;            // of planning this cut
};

struct SweepAllocation {
  Allocation allocation = Allocation::Global;
  double greedy_step_pct = 1.5;
  std::vector<int32_t> select_ids;  // Greedy: the held-out calibration tokens its loss reads
  std::function<void(const std::string&)> log;  // Greedy: a line per step taken; may be empty
};

// Every (score, recovery, params_pct) of the lists, measured on eval_ids. With Greedy each
// (score, recovery, params_pct) is planned on its own (the loss reads the recovered model).
std::vector<SweepPoint> prune_sweep(const Pruner& pruner, const std::vector<double>& params_pcts,
                                    const std::vector<PruneScore>& scores, const std::vector<Recovery>& recoveries,
                                    const PlanTarget& base, const std::vector<int32_t>& eval_ids,
                                    const SweepAllocation& alloc = {});

}  // namespace tf

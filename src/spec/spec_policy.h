// How many tokens to propose: per sequence from its running acceptance rate, per step from the
// batch size and the measured cost of verifying extra tokens at that batch size.
//
// Rule (adaptive). Let T_v(B, j) be the time of a target step in which each of B sequences
// verifies j proposals, T_d(B) the time of one draft step for B sequences (0 for prompt
// lookup) and a a sequence's acceptance rate. A plain step yields B tokens per T_v(B, 0). The
// j-th proposal of a sequence is used with probability a^j (all before it kept) and costs
// (T_v(B, j) - T_v(B, j - 1) + T_d(B)) / B. It pays when its tokens per second are at least
// the plain step's, a^j >= tau_j = (T_v(B, j) - T_v(B, j - 1) + T_d(B)) / T_v(B, 0); a step
// made of the plain work plus only such proposals is then at least as fast as plain decoding
// (the mediant of ratios each >= B / T_v(B, 0) is >= it), under the cost model. A sequence
// gets the longest run j = 1..k_max of proposals that all pay; none where the first does not
// (large batches on a compute-bound device, sequences whose proposals keep failing).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tf {

// Measured step times. verify_s[ib * ks.size() + ik]: seconds of a target step where each of
// batches[ib] sequences verifies ks[ik] proposals (ks[0] == 0: plain decoding); draft_s[ib]:
// seconds of one proposal step for batches[ib] sequences.
struct SpecCostModel {
  std::vector<int32_t> batches;  // ascending, from 1
  std::vector<int32_t> ks;       // ascending, from 0
  std::vector<double> verify_s;  // [batches.size() * ks.size()]
  std::vector<double> draft_s;   // [batches.size()]

  bool empty() const { return batches.empty(); }
  // Interpolated linearly in batch and in k; past the largest batch measured, time grows in
  // proportion to the batch (as when compute-bound: the cautious guess); past the largest k,
  // linearly from the last two.
  double verify(int32_t batch, int32_t k) const;
  double draft(int32_t batch) const;

  // {"batches": [...], "ks": [...], "verify_s": [[per k] per batch], "draft_s": [...]}
  nlohmann::json to_json() const;
  // Throws tf::Error naming `where` and the field at fault.
  static SpecCostModel from_json(const nlohmann::json& j, const std::string& where);
};

// Times each grid point with the callbacks (which run the steps and return seconds).
struct CostGrid {
  std::vector<int32_t> batches;
  std::vector<int32_t> ks;
};
SpecCostModel measure_cost_model(const CostGrid& grid, const std::function<double(int32_t batch, int32_t k)>& verify_s,
                                 const std::function<double(int32_t batch)>& draft_s,
                                 const std::function<void(int32_t done, int32_t total)>& progress = {});
// The grid for batches up to max_batch and proposals up to k_max: batches 1, 4, 16, 64, ...
// (and max_batch), ks 0, 1, 2, 4, ... (and k_max).
CostGrid default_cost_grid(int32_t max_batch, int32_t k_max);

// A sequence's running acceptance rate: exponentially weighted counts of kept and rejected
// proposals (each verification is a run of keeps ended by one rejection, unless all were
// kept), with a prior of one keep and one rejection, so a new sequence starts at 0.5. Steps
// without proposals decay the counts toward the prior, so a sequence whose proposals stopped
// paying is offered some again later (its text may have changed).
class AcceptanceRate {
 public:
  void observe(int32_t n_proposed, int32_t n_accepted);
  void idle();
  double rate() const { return (kept_ + 1.0) / (seen_ + 2.0); }

 private:
  static constexpr double kDecay = 0.8;      // per verification: about the last 5 count
  static constexpr double kIdleDecay = 0.9;  // per step without proposals
  double kept_ = 0, seen_ = 0;
};

// tau[j - 1] for j = 1..k_max at batch size `batch` (the rule at the top).
std::vector<double> proposal_costs(const SpecCostModel& m, int32_t batch, int32_t k_max);
// The longest run of proposals that pay at acceptance rate `rate`: the largest j <= tau.size()
// with rate^i >= tau[i - 1] for every i <= j.
int32_t proposal_length(double rate, const std::vector<double>& tau);

}  // namespace tf

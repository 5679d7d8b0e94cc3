// How many tokens to propose: per sequence from its running acceptance rate, per step from the
// batch size and the measured cost of verifying extra tokens at that batch size.
//
// Rule (adaptive). Let T_v(B, j) be the time of a target step in which each of B sequences
// verifies j proposals, T_d(B) the time of one draft step for B sequences (0 for prompt
// lookup), and a a sequence's acceptance rate. With j proposals a sequence yields
// E_j = 1 + a + ... + a^j tokens per step (proposal i is used when all before it are kept,
// probability a^i, acceptances taken as independent) at a relative cost
// c_j = (T_v(B, j) + j T_d(B)) / T_v(B, 0) of the step; plain decoding is j = 0, E_0 = c_0 = 1.
// Each sequence takes the j in [0, k_max] that maximises E_j / c_j, its expected tokens per
// unit of step time. As every sequence's ratio is at least plain decoding's, so is the step's
// (a mediant), as far as the cost model holds and the batch's costs add up per sequence: no
// speculation where it does not pay (large batches on a compute-bound device, text the
// proposer cannot guess), long proposals where it does (batch 1, good acceptance).
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

// Seconds `step` takes (it runs it to completion, results on the host): the median of `runs`
// after `warmup` unreported runs (per-shape kernel choices, CUDA Graph recording). The median,
// not the best: the model predicts throughput, which a shared machine's interruptions are
// part of, and on a quiet device the two agree.
double median_step_seconds(const std::function<void()>& step, int warmup = 2, int runs = 7);

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

// A running acceptance rate: exponentially weighted counts of kept and rejected proposals
// (each verification is a run of keeps ended by one rejection, unless all were kept), read
// against a prior worth 2 observations. A sequence's prior is the engine's rate over all
// sequences (itself read against 0.5), so a new sequence starts where its neighbours are; steps
// without proposals decay a sequence's counts toward that prior, so a sequence whose proposals
// stopped paying is offered some again later (its text may have changed).
class AcceptanceRate {
 public:
  explicit AcceptanceRate(double decay = 0.8) : decay_(decay) {}  // 0.8: about the last 5 count
  void observe(int32_t n_proposed, int32_t n_accepted);
  void idle();
  double rate(double prior = 0.5) const { return (kept_ + 2.0 * prior) / (seen_ + 2.0); }

 private:
  static constexpr double kIdleDecay = 0.9;  // per step without proposals
  double decay_;
  double kept_ = 0, seen_ = 0;
};

// c[j] for j = 0..k_max at batch size `batch` (the rule at the top; c[0] == 1).
std::vector<double> proposal_costs(const SpecCostModel& m, int32_t batch, int32_t k_max);
// The j in [0, c.size() - 1] that maximises (1 + rate + ... + rate^j) / c[j] (the shortest
// among equals).
int32_t proposal_length(double rate, const std::vector<double>& c);
// Whether some length pays at all, at acceptance rate 1 (j + 1 tokens per step at cost c[j]):
// where none does (a large batch on a compute-bound device), nothing is proposed, not even to
// probe a sequence's acceptance.
bool proposals_can_pay(const std::vector<double>& c);

}  // namespace tf

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
#include <map>
#include <span>
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
  double verify(int32_t batch, double k) const;
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

// Times each grid point with the callbacks, which run the steps and return seconds: verify_s
// the target steps of one batch size for every k of the grid at once (so that it can
// interleave them, and a load that changes while it measures shifts every k alike), draft_s
// one proposal step. A batch size's verification times are made non-decreasing in k (a step
// that verifies more tokens is not cheaper; a lower reading is noise).
struct CostGrid {
  std::vector<int32_t> batches;
  std::vector<int32_t> ks;
};
SpecCostModel measure_cost_model(
    const CostGrid& grid, const std::function<std::vector<double>(int32_t batch, const std::vector<int32_t>& ks)>& verify_s,
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
  void idle(int64_t n_steps = 1);  // n_steps steps without proposals
  double rate(double prior = 0.5) const { return (kept_ + 2.0 * prior) / (seen_ + 2.0); }

 private:
  static constexpr double kIdleDecay = 0.9;  // per step without proposals
  double decay_;
  double kept_ = 0, seen_ = 0;
};

// What a step really took against what the cost model predicts for it: per batch size (to the
// next power of two) and verification width (proposals per sequence, rounded up; 0 for plain
// decoding), an exponentially weighted ratio of measured to predicted seconds. It scales the
// model's costs for the adaptive rule, so that what the model leaves out (host work per
// step, a draft model's catch-up forward, a step the device runs unrecorded) counts, and
// speculation stops where in fact it does not pay. The first kSkip steps of each kind are
// left out (per-shape kernel choice and CUDA Graph recording happen there), and one reading
// moves the ratio at most 4x. Each plain step moves the speculating widths' ratios at its
// batch size kFade of the way to plain decoding's: a width the policy stopped using is not
// measured again, so one slow reading (a load spike, a first-sight kernel choice) would
// otherwise keep its proposals priced out for good; faded, it is tried and measured again.
class StepCalibration {
 public:
  static constexpr int32_t kSkip = 2;
  static constexpr double kFade = 0.03;
  void observe(int32_t batch, int32_t width, double predicted_s, double measured_s);
  // The ratio for (batch, width); a width not measured at this batch size takes the nearest
  // measured width's (speculating ones only for width > 0), a speculating width with none
  // measured plain decoding's (what the model leaves out of a plain step, host work, is in
  // a verification step too, so unmeasured proposals do not look cheaper than plain steps
  // measured slow); 1 where nothing was measured.
  double factor(int32_t batch, int32_t width) const;

 private:
  struct Entry {
    int32_t n = 0;
    double ratio = 1.0;
  };
  static int32_t bucket(int32_t batch);
  std::map<std::pair<int32_t, int32_t>, Entry> entries_;
};

// The adaptive policy's check on itself: the rate at which steps with proposals and steps
// without them emitted tokens, per batch size (to the next power of two). The cost model and
// the acceptance rates predict that proposals pay; unless steps with proposals in fact
// emitted at least (1 + kMargin) times plain steps' rate at that batch size, the engine
// proposes nothing there but in retry steps, which measure again (text and load change):
// the first kRetryEvery steps after the gate closes, the gap doubling after each retry that
// finds proposals still losing, up to kRetryMax (a retry at a large batch can cost a few
// plain steps: a fraction of a percent at the longest gap). A retry that emits kReopen times
// plain steps' rate opens the gate at once (the steps with proposals are measured afresh from
// it, and close it again after kMin of them if they lose); kReopen is well above 1 because one
// step's rate is noisy (how many proposals were kept, a shared machine's load), and each
// false opening costs kMin losing steps.
//
// While plain steps are too few to compare, one step in kPlainEvery is plain, but only once
// kMin steps with proposals are measured (before that the gate cannot close) and only while
// they emit less than kSure times the rate plain steps emit at the cost model's plain step
// time (rate 1 in observe()'s units, below): a forced plain step costs what the proposals
// gain, and could change the decision only where the model's plain step time (measured at
// load) were off by more than that factor (prompt lookup on tiny-main at batch 1 on the
// H200 emits about 4.5 tokens a step at about a plain step's time: no forced plain step).
// Where the steps with proposals fall below kSure, forced plain steps resume.
//
// Each side's rate is over its last kWindow steps (after the first kSkip of each kind per
// batch size): tokens summed over seconds summed, each step's seconds capped at kOutlier
// times the window's median. A step that records a CUDA Graph or times a new matmul shape
// for the first time costs 10-50 plain steps on a small model; uncapped, a few of them made
// the steps with proposals look slower than plain ones for hundreds of steps (measured on
// the H200, docs/PERF.md). What a step emitted is given in tokens per sequence times the cost
// model's plain step time at its batch size (the engine's calibrate()), so that steps of
// different batch sizes in one bucket compare, and a plain step that takes the model's time
// emits at rate 1.
class SpeculationGate {
 public:
  static constexpr int32_t kSkip = 2, kMin = 3, kWindow = 8, kPlainEvery = 4, kRetryEvery = 64, kRetryMax = 512;
  static constexpr double kMargin = 0.02, kOutlier = 3.0, kReopen = 1.25, kSure = 1.5;
  enum class Step { Plain, Policy };  // propose nothing / as the policy says
  // What the next step at `batch` does (counts the step).
  Step decide(int32_t batch);
  // A step of decodes and verifications at `batch` (with proposals or not) emitted `tokens`
  // (weighted as above) in `seconds`.
  void observe(int32_t batch, bool speculated, double tokens, double seconds);
  // Whether proposals are off at `batch` (but for retries): for tests and metrics.
  bool closed(int32_t batch) const;

 private:
  struct Side {
    int32_t n_seen = 0, n = 0, next = 0;  // steps seen, in the window, next slot
    double tokens[kWindow] = {}, seconds[kWindow] = {};
    void add(double t, double s);
    void restart() { n = next = 0; }
    bool measured() const { return n >= kMin; }
    double rate() const;
  };
  struct Bucket {
    Side plain, spec;
    int64_t steps = 0;
    int64_t next_retry = 0;             // the step of the next retry while closed
    int32_t retry_every = kRetryEvery;  // the gap after it
    bool closed() const { return plain.measured() && spec.measured() && spec.rate() < plain.rate() * (1.0 + kMargin); }
  };
  std::map<int32_t, Bucket> buckets_;
};

// c[j] for j = 0..k_max at batch size `batch` (the rule at the top; c[0] == 1); with_draft
// false leaves the draft steps out (T_d = 0: proposals already made cost nothing more); cal
// scales each step's predicted time by what such steps measured.
std::vector<double> proposal_costs(const SpecCostModel& m, int32_t batch, int32_t k_max, bool with_draft = true,
                                   const StepCalibration* cal = nullptr);
// The j in [0, c.size() - 1] that maximises (1 + rate + ... + rate^j) / c[j] (the shortest
// among equals).
int32_t proposal_length(double rate, const std::vector<double>& c);
// One width for a whole step (a backend that records forwards runs a step fast only when every
// sequence computes the same number of tokens, so proposals are padded to the longest and the
// step costs c[w] whatever each sequence verifies): the w in [0, c.size() - 1] that maximises
// sum_i E_i(w) / c[w], E_i(w) = 1 + rate_i + ... + rate_i^min(w, n_i), where n_i is the
// number of proposals sequence i has (or could have); the shortest among equals. 0 (plain
// decoding) unless the step's expected tokens per unit of time beat plain decoding's.
// rates.size() == n.size().
int32_t step_width(std::span<const double> rates, std::span<const int32_t> n, const std::vector<double>& c);
// A draft model proposes for a sequence only after running the tokens it has not seen (its
// backlog: the prompt of a new sequence, the tokens emitted while it proposed nothing); in the
// steady state that is one token per sequence, which the draft step's cost already counts.
// The seconds the draft's first forward takes beyond that: `extra_rows` more rows on top of
// `batch` sequences' one each, read off the draft's measured step times (m.draft at
// batch + extra_rows: interpolated, and linear past the largest batch measured, the cautious
// side for long catch-ups); 0 for a proposer that runs no model (draft_s all 0).
double catch_up_seconds(const SpecCostModel& m, int32_t batch, int64_t extra_rows);
// Adds `extra` (a catch-up's cost in plain steps, already spread over the steps it serves)
// to every length that proposes: c[j] for j >= 1.
void add_catch_up(std::vector<double>& c, double extra);
// Where the policy proposes nothing, a probe (one proposal, verified whatever the rate says)
// keeps the acceptance rates following the text. A probe is due after at least `every` idle
// steps and only where its cost fits the budget: `probe_cost` (what it adds to a plain step,
// in plain steps: c[1] - 1 and the whole catch-up it runs) at most kProbeBudget of the plain
// steps since the last probe. A draft model whose catch-up grows as fast as the idle steps
// (one that costs about what the target does) is then never probed, which is right: probing
// it cannot pay for itself; where proposals cost little (prompt lookup) probes come every
// `every` steps.
constexpr double kProbeBudget = 0.02;
bool probe_due(int64_t idle_steps, int32_t every, double probe_cost);
// Idle steps from now (at least 1) before probe_due(idle_steps + n, every, cost) can first
// hold, for a probe whose cost only grows while the sequence idles (a draft's catch-up):
// none earlier than where the present cost fits the budget.
int64_t steps_to_probe(int64_t idle_steps, int32_t every, double probe_cost);
// Where the policy proposes nothing, whether that holds whatever the idle steps do to the
// rates: an idle sequence's rate moves only toward the prior (AcceptanceRate), and a new
// sequence starts at it, so no rate passes max_rate = max(prior, every sequence's rate now);
// if no length pays at max_rate with costs c (those without a catch-up, which only adds),
// none pays for any sequence, alone or in a one-width step (step_width: each sequence's
// ratio at most 1, so is their sum's), until the costs change.
bool proposals_stay_off(double max_rate, const std::vector<double>& c);

// Whether some length pays at all, at acceptance rate 1 (j + 1 tokens per step at cost c[j]):
// where none does (a large batch on a compute-bound device), nothing is proposed, not even to
// probe a sequence's acceptance.
bool proposals_can_pay(const std::vector<double>& c);

}  // namespace tf

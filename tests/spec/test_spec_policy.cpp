// Adaptive proposal lengths: the cost model's interpolation and JSON form, the acceptance
// rate, and the rule "the length with the most expected tokens per unit of step time". Its
// promise is checked on a synthetic device-like cost model: the expected throughput of a step
// with the chosen length (iid acceptance, E[tokens] = 1 + rate + ... + rate^j) is never below
// plain decoding and is the best of every fixed length.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <span>

#include "core/error.h"
#include "spec/spec_policy.h"

namespace tf {
namespace {

// A device-like model: a step costs max(weights read, FLOPs) with the crossover at 64 tokens,
// plus a per-step overhead; the draft step costs a tenth of a plain one.
SpecCostModel device_like() {
  SpecCostModel m{.batches = {1, 4, 16, 64}, .ks = {0, 1, 2, 4, 8}};
  for (int32_t b : m.batches) {
    for (int32_t k : m.ks) m.verify_s.push_back(1e-3 * (0.1 + std::max(1.0, double(b * (1 + k)) / 64.0)));
    m.draft_s.push_back(1e-4 * (0.1 + std::max(1.0, double(b) / 64.0)));
  }
  return m;
}

TEST(SpecCostModel, InterpolatesAndExtrapolates) {
  const SpecCostModel m = device_like();
  EXPECT_DOUBLE_EQ(m.verify(4, 2), m.verify_s[1 * 5 + 2]);
  EXPECT_DOUBLE_EQ(m.verify(8, 0), (m.verify(4, 0) * 8 + m.verify(16, 0) * 4) / 12) << "linear in batch";
  EXPECT_DOUBLE_EQ(m.verify(16, 3), (m.verify(16, 2) + m.verify(16, 4)) / 2) << "linear in k";
  EXPECT_DOUBLE_EQ(m.verify(128, 0), 2 * m.verify(64, 0)) << "past the grid: proportional to the batch";
  EXPECT_DOUBLE_EQ(m.verify(1, 16), m.verify(1, 8) + 8 * (m.verify(1, 8) - m.verify(1, 4)) / 4);
  EXPECT_DOUBLE_EQ(m.draft(2), (m.draft(1) * 2 + m.draft(4)) / 3);
}

TEST(SpecCostModel, JsonRoundTripAndErrorsNameTheField) {
  const SpecCostModel m = device_like();
  const SpecCostModel back = SpecCostModel::from_json(m.to_json(), "x.json");
  EXPECT_EQ(back.batches, m.batches);
  EXPECT_EQ(back.ks, m.ks);
  EXPECT_EQ(back.verify_s, m.verify_s);
  EXPECT_EQ(back.draft_s, m.draft_s);
  auto error_of = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = m.to_json();
    edit(j);
    try {
      SpecCostModel::from_json(j, "costs.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of([](nlohmann::json& j) { j.erase("ks"); }).find("costs.json"), std::string::npos);
  EXPECT_NE(error_of([](nlohmann::json& j) { j["ks"][0] = 1; }).find("'ks'"), std::string::npos);
  EXPECT_NE(error_of([](nlohmann::json& j) { j["batches"] = {4, 1, 16, 64}; }).find("'batches'"), std::string::npos);
  EXPECT_NE(error_of([](nlohmann::json& j) { j["verify_s"][1][2] = -1.0; }).find("positive"), std::string::npos);
  EXPECT_NE(error_of([](nlohmann::json& j) { j["verify_s"][1].erase(0); }).find("'verify_s'"), std::string::npos);
  EXPECT_NE(error_of([](nlohmann::json& j) { j["draft_s"].erase(0); }).find("'draft_s'"), std::string::npos);
}

TEST(SpecCostModel, DefaultGridAndMeasurement) {
  const CostGrid g = default_cost_grid(64, 4);
  EXPECT_EQ(g.batches, (std::vector<int32_t>{1, 4, 16, 64}));
  EXPECT_EQ(g.ks, (std::vector<int32_t>{0, 1, 2, 4}));
  EXPECT_EQ(default_cost_grid(10, 6).batches, (std::vector<int32_t>{1, 4, 10}));
  EXPECT_EQ(default_cost_grid(1, 1).ks, (std::vector<int32_t>{0, 1}));
  int32_t calls = 0;
  const SpecCostModel m = measure_cost_model(
      g,
      [&](int32_t b, const std::vector<int32_t>& ks) {
        ++calls;
        std::vector<double> t;
        for (int32_t k : ks) t.push_back(double(b * 100 + k));
        if (b == 4) t[2] = 350;  // a noisy reading below k = 1's
        return t;
      },
      [](int32_t b) { return double(b); });
  EXPECT_EQ(calls, 4);
  EXPECT_DOUBLE_EQ(m.verify(16, 2), 1602);
  EXPECT_DOUBLE_EQ(m.draft(64), 64);
  EXPECT_DOUBLE_EQ(m.verify(4, 2), 401) << "made non-decreasing in k";
  EXPECT_DOUBLE_EQ(m.verify(4, 4), 404);
}

TEST(AcceptanceRate, FollowsRecentVerificationsAndDriftsBackWhenIdle) {
  AcceptanceRate a;
  EXPECT_DOUBLE_EQ(a.rate(), 0.5);
  for (int i = 0; i < 20; ++i) a.observe(4, 4);
  EXPECT_GT(a.rate(), 0.9);
  for (int i = 0; i < 20; ++i) a.observe(4, 0);
  EXPECT_LT(a.rate(), 0.2);
  for (int i = 0; i < 100; ++i) a.idle();
  EXPECT_NEAR(a.rate(), 0.5, 0.01);
  a.observe(0, 0);  // nothing verified: no information
  EXPECT_NEAR(a.rate(), 0.5, 0.01);
  EXPECT_NEAR(a.rate(0.9), 0.9, 0.01) << "without data: the prior";
  AcceptanceRate slow(0.98);
  for (int i = 0; i < 5; ++i) slow.observe(4, 4);
  EXPECT_GT(slow.rate(0.5), 0.85);
}

TEST(ProposalLength, ProposalsCanPayOnlyWhereSomeLengthBeatsPlainAtFullAcceptance) {
  EXPECT_TRUE(proposals_can_pay({1.0, 1.9}));
  EXPECT_FALSE(proposals_can_pay({1.0, 2.0, 3.1, 4.5}));
  EXPECT_FALSE(proposals_can_pay({1.0}));
  EXPECT_FALSE(proposals_can_pay(proposal_costs(device_like(), 128, 8)));
  EXPECT_TRUE(proposals_can_pay(proposal_costs(device_like(), 1, 8)));
}

// Expected tokens per second of a step at batch b where every sequence proposes j tokens at
// acceptance rate r (iid acceptance), draft steps included.
double throughput(const SpecCostModel& m, int32_t b, int32_t j, double r) {
  double tokens = 1, used = 1;
  for (int32_t i = 0; i < j; ++i) tokens += (used *= r);
  return b * tokens / (m.verify(b, j) + j * m.draft(b));
}

TEST(ProposalLength, NeverSlowerThanPlainAndLongAtBatchOne) {
  const SpecCostModel m = device_like();
  for (int32_t b : {1, 2, 4, 8, 16, 32, 64, 128}) {
    const std::vector<double> c = proposal_costs(m, b, 8);
    ASSERT_EQ(c.size(), 9u);
    EXPECT_DOUBLE_EQ(c[0], 1.0);
    for (double r : {0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99}) {
      const int32_t j = proposal_length(r, c);
      double best = 0;
      for (int32_t f = 0; f <= 8; ++f) best = std::max(best, throughput(m, b, f, r));
      EXPECT_GE(throughput(m, b, j, r), throughput(m, b, 0, r) * (1 - 1e-12)) << "batch " << b << " rate " << r;
      EXPECT_GE(throughput(m, b, j, r), best * (1 - 1e-12)) << "batch " << b << " rate " << r;
    }
  }
  // Memory-bound batch 1, good acceptance: long proposals; compute-bound batch 128: none.
  EXPECT_GE(proposal_length(0.8, proposal_costs(m, 1, 8)), 6);
  EXPECT_EQ(proposal_length(0.95, proposal_costs(m, 128, 8)), 0);
  EXPECT_EQ(proposal_length(0.0, proposal_costs(m, 1, 8)), 0);
}

// Where verifying k proposals costs little more than a plain step (a latency-bound model at
// batch 1, prompt lookup: no draft steps) and acceptance is high, the policy verifies all k,
// also with the costs scaled by a calibration that found every width alike slow.
TEST(StepWidth, FullWidthWhereVerificationCostsAboutAPlainStep) {
  const SpecCostModel m{.batches = {1}, .ks = {0, 1, 2, 4}, .verify_s = {1e-3, 1.02e-3, 1.04e-3, 1.08e-3}, .draft_s = {0}};
  StepCalibration cal;
  for (int32_t i = 0; i < 8; ++i) {
    cal.observe(1, 0, m.verify(1, 0), 1.3 * m.verify(1, 0));
    cal.observe(1, 4, m.verify(1, 4), 1.3 * m.verify(1, 4));
  }
  const StepCalibration* cals[] = {nullptr, &cal};
  for (const StepCalibration* c : cals) {
    const std::vector<double> costs = proposal_costs(m, 1, 4, /*with_draft=*/true, c);
    for (double rate : {0.6, 0.8, 0.95}) {
      EXPECT_EQ(proposal_length(rate, costs), 4) << rate;
      const int32_t n = 4;
      EXPECT_EQ(step_width(std::span<const double>(&rate, 1), std::span<const int32_t>(&n, 1), costs), 4) << rate;
    }
  }
}

// Expected tokens per second of a padded step at batch rates.size() where every sequence
// computes 1 + w tokens and sequence i verifies min(w, n[i]) proposals (iid acceptance), the
// draft steps left out (the proposals exist already).
double padded_throughput(const SpecCostModel& m, const std::vector<double>& rates, const std::vector<int32_t>& n,
                         int32_t w) {
  double tokens = 0;
  for (size_t i = 0; i < rates.size(); ++i) {
    double used = 1;
    tokens += 1;
    for (int32_t j = 0; j < std::min(w, n[i]); ++j) tokens += (used *= rates[i]);
  }
  return tokens / m.verify(int32_t(rates.size()), w);
}

TEST(StepWidth, BestPaddedWidthAndNeverBelowPlain) {
  const SpecCostModel m = device_like();
  for (int32_t b : {1, 4, 16, 64, 128}) {
    const std::vector<double> c = proposal_costs(m, b, 8, /*with_draft=*/false);
    for (double spread : {0.0, 0.3, 0.6}) {
      for (double r : {0.0, 0.2, 0.5, 0.8, 0.95}) {
        std::vector<double> rates;
        std::vector<int32_t> n;
        for (int32_t i = 0; i < b; ++i) {
          rates.push_back(std::clamp(r + spread * (double(i % 3) - 1.0), 0.0, 1.0));
          n.push_back(i % 4 == 3 ? 0 : 2 + i % 7);  // some have nothing to offer, others 2..8
        }
        const int32_t w = step_width(rates, n, c);
        double best = 0;
        for (int32_t f = 0; f <= 8; ++f) best = std::max(best, padded_throughput(m, rates, n, f));
        EXPECT_GE(padded_throughput(m, rates, n, w), best * (1 - 1e-12)) << "batch " << b << " rate " << r;
        EXPECT_GE(padded_throughput(m, rates, n, w), padded_throughput(m, rates, n, 0) * (1 - 1e-12));
      }
    }
  }
  const std::vector<double> c1 = proposal_costs(m, 1, 8, false), c128 = proposal_costs(m, 128, 8, false);
  const std::vector<double> high(128, 0.95);
  const std::vector<int32_t> eight(128, 8), none(128, 0);
  EXPECT_EQ(step_width(std::span(high).first(1), std::span(eight).first(1), c1), proposal_length(0.95, c1))
      << "one sequence: the per-sequence rule";
  EXPECT_GE(step_width(std::span(high).first(1), std::span(eight).first(1), c1), 6);
  EXPECT_EQ(step_width(std::vector<double>(128, 0.8), eight, c128), 0) << "compute-bound: plain decoding";
  EXPECT_EQ(step_width(std::span(high).first(1), std::span(none).first(1), c1), 0) << "nothing proposed: plain";
  const std::vector<int32_t> two(1, 2);
  EXPECT_LE(step_width(std::span(high).first(1), two, c1), 2) << "never wider than the longest proposal";
  EXPECT_EQ(step_width({}, {}, c1), 0);
}

TEST(StepCalibration, MeasuredOverPredictedPerBatchAndWidth) {
  StepCalibration cal;
  EXPECT_DOUBLE_EQ(cal.factor(16, 4), 1.0) << "nothing measured: the model as it is";
  for (int i = 0; i < StepCalibration::kSkip; ++i) cal.observe(16, 4, 1e-3, 50e-3);  // recording steps
  EXPECT_DOUBLE_EQ(cal.factor(16, 4), 1.0) << "the first steps of a kind are left out";
  cal.observe(16, 4, 1e-3, 2e-3);
  EXPECT_DOUBLE_EQ(cal.factor(16, 4), 2.0);
  EXPECT_DOUBLE_EQ(cal.factor(9, 4), 2.0) << "batch sizes to the next power of two share a ratio";
  EXPECT_DOUBLE_EQ(cal.factor(8, 4), 1.0);
  EXPECT_DOUBLE_EQ(cal.factor(16, 1), 2.0) << "an unmeasured width takes the nearest measured one's";
  EXPECT_DOUBLE_EQ(cal.factor(16, 0), 1.0) << "but plain decoding only its own";
  cal.observe(16, 4, 1e-3, 1.0);  // one wild reading moves the ratio at most 4x (weight 0.1)
  EXPECT_NEAR(cal.factor(16, 4), 0.9 * 2.0 + 0.1 * 8.0, 1e-12);
  for (int i = 0; i < 200; ++i) cal.observe(16, 4, 1e-3, 3e-3);
  EXPECT_NEAR(cal.factor(16, 4), 3.0, 1e-6) << "follows what steps take now";
  for (int i = 0; i < 3; ++i) cal.observe(16, 0, 1e-3, 1.5e-3);
  EXPECT_DOUBLE_EQ(cal.factor(16, 0), 1.5);
  // The third plain step (the first past its skip) moved width 4 kFade of the way to 1.5.
  const double spec_ratio = 3.0 + StepCalibration::kFade * (1.5 - 3.0);
  EXPECT_NEAR(cal.factor(16, 4), spec_ratio, 1e-6);
  cal.observe(16, 2, 0.0, 1e-3);  // no prediction: ignored
  cal.observe(16, 2, 1e-3, -1.0);
  EXPECT_NEAR(cal.factor(16, 2), spec_ratio, 1e-6);

  // A speculating width measured once at 6x (a slow step) and then left unused fades to
  // plain decoding's ratio as plain steps go by, so its proposals are tried again.
  StepCalibration faded;
  for (int i = 0; i < StepCalibration::kSkip + 1; ++i) faded.observe(1, 4, 1e-3, 6e-3);
  for (int i = 0; i < StepCalibration::kSkip + 1; ++i) faded.observe(1, 0, 1e-3, 2e-3);
  EXPECT_NEAR(faded.factor(1, 4), 6.0 - StepCalibration::kFade * 4.0, 1e-12) << "one plain step past its skip";
  for (int i = 0; i < 200; ++i) faded.observe(1, 0, 1e-3, 2e-3);
  EXPECT_NEAR(faded.factor(1, 4), 2.0, 0.01);
  EXPECT_DOUBLE_EQ(faded.factor(2, 4), 1.0) << "other batch sizes untouched";

  // Only plain steps measured (1.5x): a speculating width takes their ratio, so c_j stays as
  // the model has it until verification steps are measured.
  StepCalibration fresh;
  for (int i = 0; i < StepCalibration::kSkip + 1; ++i) fresh.observe(8, 0, 1e-3, 1.5e-3);
  EXPECT_DOUBLE_EQ(fresh.factor(8, 3), 1.5);
  EXPECT_DOUBLE_EQ(fresh.factor(4, 3), 1.0) << "another batch size: nothing measured";
  {
    const SpecCostModel m = device_like();
    const std::vector<double> raw = proposal_costs(m, 8, 4), scaled = proposal_costs(m, 8, 4, true, &fresh);
    for (size_t j = 0; j < raw.size(); ++j) EXPECT_NEAR(scaled[j], raw[j], 1e-12);
  }

  // The scaled costs: verification measured about 3x its prediction, plain 1.5x, so c_j
  // about doubles, and where the model said proposals pay they may no longer.
  const SpecCostModel m = device_like();
  const std::vector<double> raw = proposal_costs(m, 16, 4), scaled = proposal_costs(m, 16, 4, true, &cal);
  EXPECT_DOUBLE_EQ(scaled[0], 1.0);
  for (size_t j = 1; j < raw.size(); ++j) EXPECT_NEAR(scaled[j], spec_ratio / 1.5 * raw[j], 1e-9);
  EXPECT_GT(proposal_length(0.7, raw), 0);
  EXPECT_EQ(proposal_length(0.7, scaled), 0);
}

// The gate's token unit: a plain step of 10 tokens in 1 ms (the cost model's plain step
// time, in these tests) emits at rate 1.
constexpr double kUnit = 1e-4;

// Steps at one batch size where plain steps emit 10 tokens in 1 ms and steps with proposals
// `spec_tokens` in 2 ms; returns how many of `n` steps the gate let the policy speculate.
int32_t gated_steps(SpeculationGate& g, int32_t batch, double spec_tokens, int32_t n) {
  int32_t speculated = 0;
  for (int32_t i = 0; i < n; ++i) {
    const bool spec = g.decide(batch) == SpeculationGate::Step::Policy;  // the policy always proposes here
    speculated += spec;
    g.observe(batch, spec, (spec ? spec_tokens : 10.0) * kUnit, spec ? 2e-3 : 1e-3);
  }
  return speculated;
}

TEST(SpeculationGate, ProposesNothingWhereProposalsEmittedFewerTokensPerSecond) {
  SpeculationGate losing;
  const int32_t first = gated_steps(losing, 16, 15, 64);  // 7.5 tokens/ms against 10
  EXPECT_LT(first, 64) << "plain steps are measured too";
  EXPECT_GE(first, SpeculationGate::kSkip + SpeculationGate::kMin);
  EXPECT_TRUE(losing.closed(16));
  // Retries after kRetryEvery steps, then after gaps that double: 64, 128, 256 in 640 steps.
  const int32_t later = gated_steps(losing, 16, 15, 640);
  EXPECT_LE(later, 4) << "only the retries speculate, ever more rarely";
  EXPECT_GE(later, 2);
  // At the longest gap, a retry per kRetryMax steps.
  gated_steps(losing, 16, 15, 4 * SpeculationGate::kRetryMax);
  const int32_t rare = gated_steps(losing, 16, 15, 4 * SpeculationGate::kRetryMax);
  EXPECT_GE(rare, 3);
  EXPECT_LE(rare, 5);

  SpeculationGate winning;
  gated_steps(winning, 16, 28, 64);  // 14 tokens/ms against 10 (below kSure: plain steps are forced)
  EXPECT_FALSE(winning.closed(16));
  EXPECT_EQ(gated_steps(winning, 16, 28, 640), 640) << "once plain is measured, the policy decides";

  EXPECT_GT(gated_steps(losing, 2, 30, 64), 40) << "another batch size is judged on its own steps";
  // Text changes: proposals that lost start paying; a retry sees it and the gate opens (and
  // its retry gap is back to kRetryEvery for the next time it closes).
  EXPECT_GT(gated_steps(losing, 16, 60, SpeculationGate::kRetryMax + 1), 0);
  EXPECT_FALSE(losing.closed(16));
  EXPECT_EQ(gated_steps(losing, 16, 60, 64), 64);
}

// Steps with proposals that emit 2x plain steps' rate, three of the first ones 25x slower
// (a CUDA Graph recorded, a matmul shape timed): the gate stays open (each step's time is
// capped at kOutlier times its window's median); without the cap those three alone would
// close it.
TEST(SpeculationGate, SlowFirstStepsDoNotCloseIt) {
  SpeculationGate g;
  int32_t n_spec = 0, n_closed = 0;
  for (int32_t i = 0; i < 256; ++i) {
    const bool spec = g.decide(1) == SpeculationGate::Step::Policy;
    const bool slow = spec && (n_spec == 3 || n_spec == 5 || n_spec == 8);
    n_spec += spec;
    // 20 against 10 tokens/ms: 2 in the gate's unit, 1.2 (below kSure) where the plain step
    // as modeled took 1/0.6 of the measured one.
    g.observe(1, spec, (spec ? 4.0 : 1.0) * 1e-4 * 0.6, spec ? (slow ? 5e-3 : 2e-4) : 1e-4);
    n_closed += g.closed(1);
  }
  EXPECT_EQ(n_closed, 0);
  EXPECT_GT(n_spec, 200);
}

TEST(SpeculationGate, ARetryThatClearlyWinsOpensIt) {
  SpeculationGate g;
  gated_steps(g, 32, 15, 64);  // 7.5 against 10 tokens/ms: closed
  ASSERT_TRUE(g.closed(32));
  int32_t until_open = 0;
  while (g.closed(32) && until_open < 1000) {
    ++until_open;
    const bool spec = g.decide(32) == SpeculationGate::Step::Policy;
    g.observe(32, spec, (spec ? 40.0 : 10.0) * kUnit, spec ? 2e-3 : 1e-3);  // 20 tokens/ms now
  }
  EXPECT_LE(until_open, SpeculationGate::kRetryMax) << "the first retry that wins opens it";
  EXPECT_EQ(gated_steps(g, 32, 40, 64), 64);
  // A retry at 1.1x plain's rate (below kReopen) leaves it closed.
  SpeculationGate h;
  gated_steps(h, 32, 15, 64);
  ASSERT_TRUE(h.closed(32));
  for (int32_t i = 0; i < 2 * SpeculationGate::kRetryMax; ++i) {
    const bool spec = h.decide(32) == SpeculationGate::Step::Policy;
    h.observe(32, spec, (spec ? 22.0 : 10.0) * kUnit, spec ? 2e-3 : 1e-3);  // 11 against 10 tokens/ms
  }
  EXPECT_TRUE(h.closed(32));
}

TEST(SpeculationGate, ProposalsMustBeatPlainByTheMargin) {
  // 10.1 tokens/ms against 10: within kMargin (2%), so nothing is proposed but retries.
  SpeculationGate g;
  gated_steps(g, 8, 20.2, 64);
  EXPECT_TRUE(g.closed(8));
  EXPECT_LE(gated_steps(g, 8, 20.2, 640), 4);
  // 10.5 against 10: proposals pay.
  SpeculationGate h;
  gated_steps(h, 8, 21, 64);
  EXPECT_FALSE(h.closed(8));
}


// Before plain steps are measured, one step in kPlainEvery is plain only where the steps with
// proposals emit less than kSure times the plain rate the cost model predicts (1 in the gate's
// unit): at 3x (prompt lookup at batch 1) every step follows the policy; at 1.25x plain steps
// are forced and measured; and where a sure rate later falls, they resume.
TEST(SpeculationGate, NoForcedPlainStepsWhereProposalsClearlyBeatTheModeledPlainStep) {
  SpeculationGate sure;
  EXPECT_EQ(gated_steps(sure, 1, 60, 256), 256) << "60 tokens in 2 ms: 3x the modeled plain rate";
  EXPECT_FALSE(sure.closed(1));
  SpeculationGate unsure;
  const int32_t n = gated_steps(unsure, 1, 25, 64);  // 1.25x: not sure
  EXPECT_LE(n, 64 - SpeculationGate::kSkip - SpeculationGate::kMin) << "plain steps forced until measured";
  EXPECT_FALSE(unsure.closed(1));
  // The sure gate's proposals fall to 0.75x the modeled plain rate: forced plain steps
  // resume, and once they are measured the gate closes.
  EXPECT_LT(gated_steps(sure, 1, 15, 64), 64 - SpeculationGate::kSkip - SpeculationGate::kMin);
  EXPECT_TRUE(sure.closed(1));
  // Before kMin steps with proposals are measured no plain step is forced: the gate could
  // not close yet.
  SpeculationGate fresh;
  EXPECT_EQ(gated_steps(fresh, 4, 15, SpeculationGate::kSkip + SpeculationGate::kMin), SpeculationGate::kSkip + SpeculationGate::kMin);
}

// A draft model that costs what the target does (tiny-draft against tiny-main on the H200: a
// draft step 0.11-0.16 ms, a plain step 0.11-0.21 ms), on device_like()'s verification times.
SpecCostModel costly_draft() {
  SpecCostModel m = device_like();
  for (size_t ib = 0; ib < m.batches.size(); ++ib) m.draft_s[ib] = 0.8 * m.verify_s[ib * m.ks.size()];
  return m;
}

TEST(CatchUp, CostsTheDraftsRowsBeyondOnePerSequence) {
  const SpecCostModel m = device_like();
  EXPECT_EQ(catch_up_seconds(m, 8, 0), 0.0) << "the steady state: one row per sequence, in the draft step";
  EXPECT_DOUBLE_EQ(catch_up_seconds(m, 1, 15), m.draft(16) - m.draft(1));
  // Past the largest batch measured, linear: 64 more rows on 64 cost a 64-row step again.
  EXPECT_NEAR(catch_up_seconds(m, 64, 64), m.draft(64), 1e-15);
  EXPECT_LT(catch_up_seconds(m, 8, 100), catch_up_seconds(m, 8, 1000));
  SpecCostModel lookup = m;  // a proposer that runs no model measures 0 s a step
  std::fill(lookup.draft_s.begin(), lookup.draft_s.end(), 0.0);
  EXPECT_EQ(catch_up_seconds(lookup, 8, 1000), 0.0);
  std::vector<double> c = {1.0, 1.5, 2.0};
  add_catch_up(c, 0.25);
  EXPECT_EQ(c, (std::vector<double>{1.0, 1.75, 2.25})) << "plain decoding runs no catch-up";
}

TEST(CatchUp, ProbesOnlyWithinTheirBudget) {
  EXPECT_FALSE(probe_due(31, 32, 0.0)) << "never before `every` idle steps";
  EXPECT_TRUE(probe_due(32, 32, 0.1));
  EXPECT_FALSE(probe_due(32, 32, 0.7)) << "0.7 plain steps is more than 2% of 32";
  EXPECT_TRUE(probe_due(35, 32, 0.7));
  // Prompt lookup (no draft) at batch 1: a probe every 32 idle steps, as without a budget.
  SpecCostModel lookup = device_like();
  std::fill(lookup.draft_s.begin(), lookup.draft_s.end(), 0.0);
  const std::vector<double> cl = proposal_costs(lookup, 1, 4);
  EXPECT_TRUE(probe_due(32, 32, cl[1] - 1.0 + catch_up_seconds(lookup, 1, 31) / lookup.verify(1, 0)));
  // A cheap draft (a tenth of a step) at batch 1 after 32 idle steps: its catch-up of 32
  // tokens fits one draft step, so the probe is due.
  const SpecCostModel cheap = device_like();
  const std::vector<double> cc = proposal_costs(cheap, 1, 4);
  ASSERT_TRUE(proposals_can_pay(cc));
  EXPECT_TRUE(probe_due(32, 32, cc[1] - 1.0 + catch_up_seconds(cheap, 1, 31) / cheap.verify(1, 0)));
  // A draft that costs what the target does, at batches 2-16 (larger ones are compute-bound
  // in this model: proposals cannot pay there at all): proposals could pay at full
  // acceptance, but the catch-up grows with every idle step faster than the budget does, so
  // no probe is ever due (each would cost more than 2% of the plain steps it follows).
  const SpecCostModel costly = costly_draft();
  for (int32_t b : {2, 4, 8, 16}) {
    const std::vector<double> c = proposal_costs(costly, b, 4);
    ASSERT_TRUE(proposals_can_pay(c)) << "batch " << b;
    for (int64_t idle = 1; idle <= 20000; idle = idle < 256 ? idle + 1 : idle * 2)
      ASSERT_FALSE(probe_due(idle, 32, c[1] - 1.0 + catch_up_seconds(costly, b, b * (idle - 1)) / costly.verify(b, 0)))
          << "batch " << b << ", " << idle << " idle steps";
  }
}

TEST(CatchUp, ANewSequencesPromptSpreadOverItsProposingSteps) {
  // Batch 1, a 1,000-token prompt the draft has not seen, acceptance 0.8: a cheap draft's
  // catch-up spread over 16 steps leaves proposals paying; a draft as costly as the target
  // proposes nothing (it did not pay even without the catch-up).
  const SpecCostModel cheap = device_like(), costly = costly_draft();
  std::vector<double> c = proposal_costs(cheap, 1, 8);
  add_catch_up(c, catch_up_seconds(cheap, 1, 999) / cheap.verify(1, 0) / 16.0);
  EXPECT_GE(proposal_length(0.8, c), 4);
  std::vector<double> d = proposal_costs(costly, 1, 8);
  add_catch_up(d, catch_up_seconds(costly, 1, 999) / costly.verify(1, 0) / 16.0);
  EXPECT_EQ(proposal_length(0.8, d), 0);
  // Unspread (a probe pays all of it), the cheap draft's catch-up of 999 rows costs more
  // than the 2% budget allows after 32 idle steps.
  const std::vector<double> plain_c = proposal_costs(cheap, 1, 8);
  EXPECT_FALSE(probe_due(32, 32, plain_c[1] - 1.0 + catch_up_seconds(cheap, 1, 999) / cheap.verify(1, 0)));
}

TEST(QuietSteps, IdleStepsAtOnceEqualOneByOne) {
  AcceptanceRate a, b;
  for (int i = 0; i < 5; ++i) a.observe(4, 1), b.observe(4, 1);
  for (int i = 0; i < 37; ++i) a.idle();
  b.idle(37);
  EXPECT_NEAR(a.rate(0.7), b.rate(0.7), 1e-12);
  b.idle(0);
  EXPECT_NEAR(a.rate(0.7), b.rate(0.7), 1e-12) << "no steps: no change";
}

TEST(QuietSteps, StepsToProbeIsTheFirstStepProbeDueCanHold) {
  // For a fixed cost, probe_due first holds exactly steps_to_probe steps on (or one later:
  // the answer may be early by rounding, never late).
  for (double cost : {0.0, 0.1, 0.7, 0.71, 3.3, 50.0})
    for (int64_t idle : {0, 5, 31, 32, 100})
      for (int32_t every : {32, 128}) {
        const int64_t n = steps_to_probe(idle, every, cost);
        ASSERT_GE(n, 1);
        for (int64_t m = 1; m < n; ++m)
          ASSERT_FALSE(probe_due(idle + m, every, cost)) << cost << " " << idle << " " << every << " " << m;
        EXPECT_TRUE(probe_due(idle + n, every, cost) || probe_due(idle + n + 1, every, cost))
            << cost << " " << idle << " " << every;
      }
  EXPECT_EQ(steps_to_probe(0, 32, 0.1), 32);
  EXPECT_EQ(steps_to_probe(40, 32, 0.1), 1) << "overdue: the next step";
  EXPECT_GE(steps_to_probe(0, 32, 1e300), int64_t(1e18)) << "never, in effect; no overflow";
}

TEST(QuietSteps, ProposalsStayOffOnlyWhereNoRateUpToTheMaxPays) {
  const SpecCostModel m = device_like();
  const std::vector<double> c1 = proposal_costs(m, 1, 4);
  EXPECT_FALSE(proposals_stay_off(0.8, c1)) << "batch 1, good acceptance: proposals pay";
  EXPECT_TRUE(proposals_stay_off(0.0, c1)) << "nothing is ever accepted";
  // Whatever the max rate, where it stays off no lower rate proposes, alone or in a step.
  for (double max_rate : {0.1, 0.3, 0.5, 0.7, 0.9})
    for (int32_t b : {1, 4, 16, 64}) {
      const std::vector<double> c = proposal_costs(m, b, 4);
      if (!proposals_stay_off(max_rate, c)) continue;
      for (double r = 0; r <= max_rate; r += 0.05) {
        ASSERT_EQ(proposal_length(r, c), 0) << b << " " << r;
        const std::vector<double> rates = {r, max_rate, r / 2};
        const std::vector<int32_t> n = {4, 4, 4};
        ASSERT_EQ(step_width(rates, n, c), 0) << b << " " << r;
      }
    }
}

}  // namespace
}  // namespace tf

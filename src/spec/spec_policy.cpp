#include "spec/spec_policy.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>

#include "core/error.h"

namespace tf {
namespace {

// Index i and weight w such that x lies between grid[i] and grid[i + 1] (w = 0 at grid[i]),
// clamped to the first interval below the grid; above it, the last interval is extended.
std::pair<size_t, double> bracket(const std::vector<int32_t>& grid, double x) {
  if (grid.size() == 1) return {0, 0.0};
  size_t i = 0;
  while (i + 2 < grid.size() && x > grid[i + 1]) ++i;
  const double w = (x - grid[i]) / double(grid[i + 1] - grid[i]);
  return {i, std::max(0.0, w)};
}

double lerp(double a, double b, double w) { return a + (b - a) * w; }

// Batch sizes to the next power of two: the steps StepCalibration and SpeculationGate pool.
int32_t pow2_bucket(int32_t batch) {
  int32_t b = 1;
  while (b < batch) b *= 2;
  return b;
}

}  // namespace

double SpecCostModel::verify(int32_t batch, double k) const {
  TF_ASSERT(!empty() && verify_s.size() == batches.size() * ks.size(), "empty or malformed cost model");
  auto at_batch = [&](size_t ib) {
    const auto [ik, w] = bracket(ks, k);
    const double a = verify_s[ib * ks.size() + ik];
    return ks.size() == 1 ? a : std::max(0.0, lerp(a, verify_s[ib * ks.size() + ik + 1], w));
  };
  if (batch >= batches.back()) return at_batch(batches.size() - 1) * double(batch) / batches.back();
  const auto [ib, w] = bracket(batches, batch);
  return lerp(at_batch(ib), at_batch(ib + 1), w);
}

double SpecCostModel::draft(int32_t batch) const {
  TF_ASSERT(!empty() && draft_s.size() == batches.size(), "empty or malformed cost model");
  if (batch >= batches.back()) return draft_s.back() * double(batch) / batches.back();
  const auto [ib, w] = bracket(batches, batch);
  return lerp(draft_s[ib], draft_s[ib + 1], w);
}

nlohmann::json SpecCostModel::to_json() const {
  nlohmann::json v = nlohmann::json::array();
  for (size_t ib = 0; ib < batches.size(); ++ib)
    v.push_back(std::vector<double>(verify_s.begin() + ptrdiff_t(ib * ks.size()),
                                    verify_s.begin() + ptrdiff_t((ib + 1) * ks.size())));
  return {{"batches", batches}, {"ks", ks}, {"verify_s", v}, {"draft_s", draft_s}};
}

SpecCostModel SpecCostModel::from_json(const nlohmann::json& j, const std::string& where) {
  SpecCostModel m;
  try {
    m.batches = j.at("batches").get<std::vector<int32_t>>();
    m.ks = j.at("ks").get<std::vector<int32_t>>();
    m.draft_s = j.at("draft_s").get<std::vector<double>>();
    for (const auto& row : j.at("verify_s")) {
      const auto r = row.get<std::vector<double>>();
      if (r.size() != m.ks.size()) fail("{}: each row of 'verify_s' needs one time per entry of 'ks'", where);
      m.verify_s.insert(m.verify_s.end(), r.begin(), r.end());
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not a speculation cost model ({})", where, e.what());
  }
  auto strictly_ascending = [](const std::vector<int32_t>& v) {
    return !v.empty() && std::adjacent_find(v.begin(), v.end(), std::greater_equal<>()) == v.end();
  };
  if (!strictly_ascending(m.batches) || m.batches[0] < 1)
    fail("{}: 'batches' must be strictly ascending positive batch sizes", where);
  if (!strictly_ascending(m.ks) || m.ks[0] != 0) fail("{}: 'ks' must be strictly ascending from 0", where);
  if (m.verify_s.size() != m.batches.size() * m.ks.size() || m.draft_s.size() != m.batches.size())
    fail("{}: 'verify_s' needs one row per batch size and 'draft_s' one time per batch size", where);
  for (double t : m.verify_s)
    if (!(t > 0.0 && std::isfinite(t))) fail("{}: step times in 'verify_s' must be positive", where);
  for (double t : m.draft_s)
    if (!(t >= 0.0 && std::isfinite(t))) fail("{}: step times in 'draft_s' must be >= 0", where);
  return m;
}

double median_step_seconds(const std::function<void()>& step, int warmup, int runs) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < warmup; ++i) step();
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = Clock::now();
    step();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::nth_element(t.begin(), t.begin() + ptrdiff_t(t.size() / 2), t.end());
  return t[t.size() / 2];
}

CostGrid default_cost_grid(int32_t max_batch, int32_t k_max) {
  CostGrid g;
  for (int32_t b = 1; b < max_batch; b *= 4) g.batches.push_back(b);
  g.batches.push_back(std::max(1, max_batch));
  for (int32_t k = 0; k < k_max; k = k == 0 ? 1 : 2 * k) g.ks.push_back(k);
  g.ks.push_back(std::max(0, k_max));
  g.batches.erase(std::unique(g.batches.begin(), g.batches.end()), g.batches.end());
  g.ks.erase(std::unique(g.ks.begin(), g.ks.end()), g.ks.end());
  return g;
}

SpecCostModel measure_cost_model(
    const CostGrid& grid, const std::function<std::vector<double>(int32_t, const std::vector<int32_t>&)>& verify_s,
    const std::function<double(int32_t)>& draft_s, const std::function<void(int32_t, int32_t)>& progress) {
  SpecCostModel m{.batches = grid.batches, .ks = grid.ks};
  const int32_t total = int32_t(grid.batches.size() * 2);
  int32_t done = 0;
  for (int32_t b : grid.batches) {
    const std::vector<double> t = verify_s(b, grid.ks);
    TF_ASSERT(t.size() == grid.ks.size(), "{} verification times for {} proposal counts", t.size(), grid.ks.size());
    for (size_t i = 0; i < t.size(); ++i) m.verify_s.push_back(i == 0 ? t[i] : std::max(t[i], m.verify_s.back()));
    if (progress) progress(++done, total);
    m.draft_s.push_back(draft_s(b));
    if (progress) progress(++done, total);
  }
  return m;
}

void AcceptanceRate::observe(int32_t n_proposed, int32_t n_accepted) {
  if (n_proposed <= 0) return;
  kept_ = decay_ * kept_ + n_accepted;
  seen_ = decay_ * seen_ + n_accepted + (n_accepted < n_proposed ? 1 : 0);
}

void AcceptanceRate::idle(int64_t n_steps) {
  if (n_steps <= 0) return;
  const double f = n_steps == 1 ? kIdleDecay : std::pow(kIdleDecay, double(n_steps));
  kept_ *= f;
  seen_ *= f;
}

bool proposals_can_pay(const std::vector<double>& c) {
  for (size_t j = 1; j < c.size(); ++j)
    if (double(j + 1) > c[j]) return true;
  return false;
}

int32_t StepCalibration::bucket(int32_t batch) { return pow2_bucket(batch); }

void StepCalibration::observe(int32_t batch, int32_t width, double predicted_s, double measured_s) {
  if (!(predicted_s > 0.0) || !(measured_s > 0.0) || !std::isfinite(measured_s)) return;
  Entry& e = entries_[{bucket(batch), width}];
  if (++e.n <= kSkip) return;
  const double r = measured_s / predicted_s;
  e.ratio = e.n == kSkip + 1 ? r : 0.9 * e.ratio + 0.1 * std::clamp(r, e.ratio / 4.0, e.ratio * 4.0);
  if (width != 0) return;
  const int32_t b = bucket(batch);
  for (auto it = entries_.upper_bound({b, 0}); it != entries_.end() && it->first.first == b; ++it)
    if (it->second.n > kSkip) it->second.ratio += kFade * (e.ratio - it->second.ratio);
}

double StepCalibration::factor(int32_t batch, int32_t width) const {
  const int32_t b = bucket(batch);
  const Entry* best = nullptr;
  int32_t best_d = 0;
  for (auto it = entries_.lower_bound({b, 0}); it != entries_.end() && it->first.first == b; ++it) {
    const int32_t w = it->first.second;
    if (it->second.n <= kSkip || (w == 0) != (width == 0)) continue;
    const int32_t d = std::abs(w - width);
    if (!best || d < best_d) best = &it->second, best_d = d;
  }
  if (!best && width > 0) {  // no speculating width measured yet: plain decoding's ratio
    const auto plain = entries_.find({b, 0});
    if (plain != entries_.end() && plain->second.n > kSkip) best = &plain->second;
  }
  return best ? best->ratio : 1.0;
}

SpeculationGate::Step SpeculationGate::decide(int32_t batch) {
  Bucket& b = buckets_[pow2_bucket(batch)];
  const int64_t step = ++b.steps;
  if (!b.plain.measured()) {
    const bool unsure = b.spec.measured() && b.spec.rate() < kSure;
    return unsure && step % kPlainEvery == 0 ? Step::Plain : Step::Policy;
  }
  if (!b.closed()) {
    b.next_retry = 0;
    b.retry_every = kRetryEvery;
    return Step::Policy;
  }
  if (b.next_retry == 0) b.next_retry = step + b.retry_every;  // just closed
  if (step < b.next_retry) return Step::Plain;
  b.retry_every = std::min(2 * b.retry_every, kRetryMax);  // reset if the retries open the gate
  b.next_retry = step + b.retry_every;
  return Step::Policy;
}

void SpeculationGate::Side::add(double t, double s) {
  tokens[next] = t;
  seconds[next] = s;
  next = (next + 1) % kWindow;
  n = std::min(n + 1, kWindow);
}

double SpeculationGate::Side::rate() const {
  if (n == 0) return 0;
  double sorted[kWindow];
  std::copy(seconds, seconds + n, sorted);
  std::nth_element(sorted, sorted + n / 2, sorted + n);
  const double cap = kOutlier * sorted[n / 2];
  double t = 0, s = 0;
  for (int32_t i = 0; i < n; ++i) {
    t += tokens[i];
    s += std::min(seconds[i], cap);
  }
  return s > 0 ? t / s : 0;
}

void SpeculationGate::observe(int32_t batch, bool speculated, double tokens, double seconds) {
  if (!(seconds > 0.0) || !std::isfinite(seconds) || !(tokens >= 0.0)) return;
  Bucket& b = buckets_[pow2_bucket(batch)];
  Side& s = speculated ? b.spec : b.plain;
  if (++s.n_seen <= kSkip) return;
  // A retry (proposals while closed) that clearly beats plain steps opens the gate: the side
  // starts again from it.
  if (speculated && b.closed() && tokens / seconds >= b.plain.rate() * kReopen) s.restart();
  s.add(tokens, seconds);
}

bool SpeculationGate::closed(int32_t batch) const {
  const auto it = buckets_.find(pow2_bucket(batch));
  return it != buckets_.end() && it->second.closed();
}

double catch_up_seconds(const SpecCostModel& m, int32_t batch, int64_t extra_rows) {
  if (extra_rows <= 0 || m.empty()) return 0.0;
  const int64_t rows = std::min<int64_t>(int64_t(batch) + extra_rows, std::numeric_limits<int32_t>::max());
  return std::max(0.0, m.draft(int32_t(rows)) - m.draft(batch));
}

void add_catch_up(std::vector<double>& c, double extra) {
  for (size_t j = 1; j < c.size(); ++j) c[j] += extra;
}

bool probe_due(int64_t idle_steps, int32_t every, double probe_cost) {
  return idle_steps >= every && probe_cost <= kProbeBudget * double(idle_steps);
}

int64_t steps_to_probe(int64_t idle_steps, int32_t every, double probe_cost) {
  // The least idle count with probe_cost <= kProbeBudget * idle, or one before it (rounding
  // may only make the answer early); clamped below int64's range.
  const double fit = std::floor(std::max(0.0, probe_cost) / kProbeBudget);
  const double first = std::max(double(every), std::min(fit, 4e18));
  return std::max<int64_t>(1, int64_t(first) - idle_steps);
}

bool proposals_stay_off(double max_rate, const std::vector<double>& c) { return proposal_length(max_rate, c) == 0; }

std::vector<double> proposal_costs(const SpecCostModel& m, int32_t batch, int32_t k_max, bool with_draft,
                                   const StepCalibration* cal) {
  auto f = [&](int32_t j) { return cal ? cal->factor(batch, j) : 1.0; };
  const double plain = m.verify(batch, 0) * f(0), draft = with_draft ? m.draft(batch) : 0.0;
  std::vector<double> c;
  for (int32_t j = 0; j <= k_max; ++j) c.push_back((m.verify(batch, j) + j * draft) * f(j) / plain);
  return c;
}

int32_t proposal_length(double rate, const std::vector<double>& c) {
  const int32_t n = int32_t(c.size()) - 1;
  return step_width(std::span<const double>(&rate, 1), std::span<const int32_t>(&n, 1), c);
}

int32_t step_width(std::span<const double> rates, std::span<const int32_t> n, const std::vector<double>& c) {
  TF_ASSERT(rates.size() == n.size() && !c.empty(), "step_width: {} rates for {} sequences", rates.size(), n.size());
  // used[i] = rate_i^w, the chance that sequence i's proposal w is used.
  std::vector<double> used(rates.size(), 1.0);
  double tokens = double(rates.size()), best = 0.0;
  int32_t best_w = 0;
  for (size_t w = 0; w < c.size(); ++w) {
    if (w > 0)
      for (size_t i = 0; i < rates.size(); ++i)
        if (int32_t(w) <= n[i]) tokens += (used[i] *= rates[i]);
    const double ratio = tokens / c[w];
    if (ratio > best * (1.0 + 1e-12)) {
      best = ratio;
      best_w = int32_t(w);
    }
  }
  return best_w;
}

}  // namespace tf

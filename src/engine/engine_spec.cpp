// Speculative decoding inside the engine step: proposals before schedule(), verification of
// each sequence's logits rows after the forward, and the cost model adaptive lengths use.
//
// A step: propose() asks the proposer for up to k tokens for every running sequence that is
// decoding (one token left to compute), capped so that the step cannot pass max_len. k is
// SpecOptions::k, or adaptive, from the acceptance rates and the cost model at this batch
// size (spec_policy.h): per sequence (proposal_length), or in a one-width step (every running
// sequence decodes, SpecOptions::uniform_width) one width for the batch (step_width), chosen
// again once the proposals are known (prompt lookup may offer fewer, or none) and then
// padded to. The costs are the model's scaled by what such steps measured (StepCalibration,
// fed by calibrate() after every step of decodes and verifications), and where steps with
// proposals emitted fewer tokens per second than plain ones at this batch size, nothing is
// proposed (SpeculationGate) but to measure again now and then. A draft model's catch-up
// (the tokens it has not run: a new prompt, the output of steps it sat out) counts in the
// costs (spec_policy.h: catch_up_seconds). Where the policy proposes nothing, a sequence (or,
// one-width, the whole batch) gets one proposal after kProbeEvery (kStepProbeEvery) such
// steps if any length could pay at this batch size and the probe's cost, catch-up included,
// fits its budget (probe_due), so that the rates follow the text. Where the policy proposes
// nothing and no rate the sequences can drift to would pay (proposals_stay_off), the next steps
// are quiet: O(1) each, no sequence looked at and no proposer call, until a probe may be due
// (steps_to_probe), the batch size changes, a request is added, or kQuietRecheck steps pass;
// each sequence takes in its idle steps when next looked at (sync_quiet). On a recording
// backend the cost model's measurement also warms every verification width at every recorded
// batch size (warm_spec_shapes) and every shape of the proposer's catch-up (warm_catch_up).
// The scheduler takes proposals where budget and free blocks allow (scheduler.h). The batch
// runs each such sequence's last token and its proposals with logits for all, beside the
// other sequences' decodes and prefill chunks. emit_verified() keeps the proposals the target
// would have produced (verifier.h) and emits them and the token after them; the scheduler's
// commit rolls back the rest (padding too).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <span>

#include <nlohmann/json.hpp>

#include "core/json_bounded.h"
#include "core/progress.h"
#include "engine/engine_impl.h"
#include "engine/forward_runner.h"
#include "sample/logprobs.h"
#include "spec/draft_proposer.h"
#include "spec/ngram_proposer.h"
#include "spec/verifier.h"

namespace tf {

void Engine::Impl::init_spec() {
  const SpecOptions& so = opt.spec;
  if (so.method.empty()) return;
  if (so.k < 1) fail("speculative decoding: k (--spec-k) must be at least 1, got {}", so.k);
  if (so.method == "ngram") {
    proposer = std::make_unique<NgramProposer>(NgramParams{.min_n = so.ngram_min, .max_n = so.ngram_max});
  } else if (so.method == "draft") {
    if (so.draft_model_dir.empty()) fail("speculative decoding with a draft model needs its folder (--spec draft:DIR)");
    proposer = std::make_unique<DraftProposer>(DraftParams{
        .model_dir = so.draft_model_dir, .backend = opt.backend, .backend_options = backend_options(opt.kernels),
        .n_blocks = kv->pool().n_blocks_total(), .block_size = opt.block_size,
        .kv_dtype = parse_kv_dtype(opt.kv_dtype), .max_batch_tokens = opt.max_batch_tokens,
        .enable_prefix_caching = opt.enable_prefix_caching, .n_vocab = model->config().n_vocab,
        .forward = run_forward});
  } else {
    fail("unknown speculative decoding method '{}' (expected ngram or draft:DIR)", so.method);
  }
  if (so.uniform_width != "auto" && so.uniform_width != "on" && so.uniform_width != "off")
    fail("speculative decoding: uniform width must be auto, on or off, got '{}'", so.uniform_width);
  spec_mode = SpecMode{.enabled = true, .k = so.k, .adaptive = so.adaptive};
  if (!so.adaptive) return;
  if (so.cost_model_file.empty()) {
    spec_costs = measure_spec_costs(default_cost_grid(opt.max_seqs, so.k));
    return;
  }
  std::ifstream in(so.cost_model_file);
  if (!in) fail("cannot open speculation cost model {}", so.cost_model_file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const nlohmann::json j = parse_json_bounded(text, so.cost_model_file);
  // A bench result holds the model under "spec_cost_model"; a saved model is the object itself.
  spec_costs = SpecCostModel::from_json(j.contains("spec_cost_model") ? j["spec_cost_model"] : j, so.cost_model_file);
}

void Engine::Impl::set_spec_costs(const SpecCostModel& m) {
  if (!proposer) fail("a speculation cost model for an engine built without speculation (--spec)");
  spec_costs = m;
  spec_calibration = {};  // its ratios were against the old model
  spec_quiet = {};        // decided on the old costs
}

void Engine::Impl::set_spec_mode(const SpecMode& m) {
  if (!proposer) fail("speculation settings for an engine built without speculation (--spec)");
  if (m.k < 1) fail("speculative decoding: k must be at least 1, got {}", m.k);
  if (m.adaptive && spec_costs.empty()) set_spec_costs(measure_spec_costs(default_cost_grid(opt.max_seqs, m.k)));
  spec_mode = m;
  spec_quiet = {};
}

// A probe costs a one-width step the whole batch's verification, a per-sequence one only that
// sequence's extra token: the first are rarer.
constexpr int32_t kProbeEvery = 32, kStepProbeEvery = 128;
// Steps of proposals a catch-up is spread over in the policy's costs (fewer when the output
// is nearly complete).
constexpr int64_t kCatchUpSpread = 16;
// The most quiet steps in a row before the policy looks at the sequences again.
constexpr int64_t kQuietRecheck = 32;

bool Engine::Impl::uniform_step(int32_t n_decoding) const {
  const std::string& u = opt.spec.uniform_width;
  if (u == "off" || (u == "auto" && backend->pad_kv_block(0) < 0)) return false;
  // Every running sequence decodes, and none is admitted this step (a prefill would join).
  return n_decoding == sched->n_running() && (sched->n_waiting() == 0 || sched->n_running() >= opt.max_seqs);
}

void Engine::Impl::sync_quiet(SpecState& s) const {
  s.acceptance.idle(spec_quiet_idle - s.quiet_idle_seen);
  const int64_t probe = spec_quiet_probe - s.quiet_probe_seen;
  s.n_idle = int32_t(std::min<int64_t>(int64_t(s.n_idle) + probe, std::numeric_limits<int32_t>::max()));
  s.quiet_idle_seen = spec_quiet_idle;
  s.quiet_probe_seen = spec_quiet_probe;
}

void Engine::Impl::propose() {
  spec_draft_steps = 0;
  if (!spec_mode.enabled) return;
  const int32_t batch = std::max(1, sched->n_running());
  // A quiet step: O(1), no sequence looked at (each takes in the idle step when next looked
  // at, sync_quiet), no proposer call.
  if (spec_mode.adaptive && spec_quiet.left > 0) {
    if (spec_quiet.batch == batch && spec_quiet.next_id == next_id) {
      --spec_quiet.left;
      ++spec_quiet_steps;
      const bool policy = spec_gate.decide(batch) == SpeculationGate::Step::Policy;  // counts the step
      ++spec_quiet_idle;
      if (policy && spec_quiet.count_probe) ++(spec_quiet.uniform ? spec_idle_steps : spec_quiet_probe);
      return;
    }
    spec_quiet = {};
  }
  // The decoding sequences, with their states looked up once (a step at batch 64 on a small
  // model lasts 0.2 ms: a few lookups per sequence and step are measurable there).
  std::vector<std::pair<RequestId, RequestState*>> live;
  for (auto& [id, r] : requests)
    if (!r.finished && sched->is_running(id) && sched->n_computed(id) + 1 == int32_t(r.all_tokens.size()))
      live.emplace_back(id, &r);
  if (live.empty()) return;
  // A fixed order: the proposer's batches do not depend on hashing.
  std::sort(live.begin(), live.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<RequestId> ids;
  std::vector<RequestState*> rs;
  for (const auto& l : live) {
    ids.push_back(l.first);
    rs.push_back(l.second);
    sync_quiet(*l.second->spec);
  }
  if (spec_mode.adaptive && spec_gate.decide(batch) == SpeculationGate::Step::Plain) {
    ++spec_quiet_idle;  // every sequence idles this step
    return;
  }
  const bool uniform = uniform_step(int32_t(ids.size()));
  const double prior = spec_acceptance.rate();
  std::vector<int32_t> want(ids.size(), spec_mode.k);
  std::vector<double> rates;
  std::vector<char> probe(ids.size(), 0);  // proposals offered to learn the rate: verified whatever it says
  if (spec_mode.adaptive) {
    ++spec_policy_steps;
    const std::vector<double> costs = proposal_costs(spec_costs, batch, spec_mode.k, true, &spec_calibration);
    const bool can_pay = proposals_can_pay(costs);
    // The proposer's catch-up (a draft model's tokens beyond one per sequence), in plain steps:
    // a probe pays all of it; a sequence that starts proposing pays it once for the steps it
    // then proposes in, so the policy spreads it over up to kCatchUpSpread of them.
    const double plain_s = spec_costs.verify(batch, 0);
    auto catch_up = [&](int64_t extra_rows) { return catch_up_seconds(spec_costs, batch, extra_rows) / plain_s; };
    std::vector<int64_t> extra;  // per sequence
    int64_t extra_sum = 0, left_sum = 0;
    double max_rate = prior;
    for (size_t i = 0; i < ids.size(); ++i) {
      const RequestState& r = *rs[i];
      rates.push_back(r.spec->acceptance.rate(prior));
      max_rate = std::max(max_rate, rates.back());
      extra.push_back(std::max(0, proposer->backlog(ids[i], r.all_tokens) - 1));
      extra_sum += extra.back();
      left_sum += std::max(1, r.max_len - int32_t(r.all_tokens.size()));
    }
    auto spread = [](int64_t tokens_left) { return double(std::clamp<int64_t>(tokens_left, 1, kCatchUpSpread)); };
    // Steps before a probe may be due (can_pay: idle steps count toward one), and the least
    // catch-up cost the policy added for a sequence (plain steps), for the quiet span.
    int64_t probe_in = std::numeric_limits<int64_t>::max();
    double min_catch_up = std::numeric_limits<double>::infinity();
    if (uniform) {
      const double x = catch_up(extra_sum);
      std::vector<double> c = costs;
      min_catch_up = x / spread(left_sum / int64_t(ids.size()));
      add_catch_up(c, min_catch_up);
      int32_t w = step_width(rates, want, c);
      if (w > 0) {
        spec_idle_steps = 0;
      } else if (can_pay && probe_due(++spec_idle_steps, kStepProbeEvery, costs[1] - 1.0 + x)) {
        w = 1;
        probe.assign(ids.size(), 1);
        spec_idle_steps = 0;
      } else if (can_pay) {
        probe_in = steps_to_probe(spec_idle_steps, kStepProbeEvery, costs[1] - 1.0 + x);
      }
      want.assign(ids.size(), w);
    } else {
      for (size_t i = 0; i < ids.size(); ++i) {
        RequestState& r = *rs[i];
        SpecState& s = *r.spec;
        // Costs as if every sequence had this one's backlog (the rule's costs are the step's).
        const double x = catch_up(int64_t(batch) * extra[i]);
        std::vector<double> c;
        const double added = x > 0 ? x / spread(r.max_len - int32_t(r.all_tokens.size())) : 0.0;
        min_catch_up = std::min(min_catch_up, added);
        if (x > 0) {
          c = costs;
          add_catch_up(c, added);
        }
        want[i] = proposal_length(rates[i], x > 0 ? c : costs);
        if (want[i] > 0) {
          s.n_idle = 0;
        } else if (can_pay && probe_due(++s.n_idle, kProbeEvery, costs[1] - 1.0 + x)) {
          want[i] = 1;
          probe[i] = 1;
          s.n_idle = 0;
        } else if (can_pay) {
          probe_in = std::min(probe_in, steps_to_probe(s.n_idle, kProbeEvery, costs[1] - 1.0 + x));
        }
      }
    }
    // Nothing proposed, and nothing would be for any rate the sequences can drift to, with
    // the least catch-up any of them has (a draft's backlog only grows while it idles, and
    // its spread over the tokens left only shrinks): the next steps are quiet while the
    // batch size stays and no request is added (a new one brings its own backlog), until a
    // probe may be due, for at most kQuietRecheck of them (the calibration moves the costs).
    std::vector<double> off = costs;
    add_catch_up(off, std::isfinite(min_catch_up) ? min_catch_up : 0.0);
    if (std::all_of(want.begin(), want.end(), [](int32_t w) { return w == 0; }) &&
        proposals_stay_off(max_rate, off)) {
      const int64_t left = std::min<int64_t>(kQuietRecheck, probe_in - 1);
      if (left > 0)
        spec_quiet = {.batch = batch, .next_id = next_id, .left = left, .uniform = uniform, .count_probe = can_pay};
    }
  }
  std::vector<ProposeRequest> reqs;
  std::vector<size_t> req_of(ids.size(), SIZE_MAX);
  std::vector<int32_t> room(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    RequestState& r = *rs[i];
    SpecState& s = *r.spec;
    s.proposal.clear();
    s.q.clear();
    s.n_real = 0;
    room[i] = r.max_len - int32_t(r.all_tokens.size()) - 1;  // the step yields up to k + 1 tokens
    const int32_t k = std::min(want[i], room[i]);
    if (k <= 0) continue;
    req_of[i] = reqs.size();
    spec_draft_steps = std::max(spec_draft_steps, k);
    reqs.push_back({.seq = ids[i], .tokens = &r.all_tokens, .n_prompt = r.prompt.size(), .k = k, .sampling = &r.params,
                    .rng = &s.rng});
  }
  if (reqs.empty()) {  // a plain step (cleared above): what the rest would do with no proposals
    if (spec_mode.adaptive) ++spec_quiet_idle;  // every sequence idles this step
    return;
  }
  std::vector<Proposal> props;
  proposer->propose(reqs, props);
  std::vector<int32_t> n(ids.size(), 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (req_of[i] == SIZE_MAX) continue;
    Proposal& p = props[req_of[i]];
    TF_ASSERT(int32_t(p.tokens.size()) <= reqs[req_of[i]].k, "proposer {} offered {} tokens for {}",
              proposer->name(), p.tokens.size(), reqs[req_of[i]].k);
    SpecState& s = *rs[i]->spec;
    s.proposal = std::move(p.tokens);
    s.q = std::move(p.q);
    n[i] = int32_t(s.proposal.size());
  }
  // How many of the proposals to verify, now that they are known (the draft steps are spent).
  const int32_t n_max = *std::max_element(n.begin(), n.end());
  const std::vector<double> verify_costs =
      spec_mode.adaptive ? proposal_costs(spec_costs, batch, n_max, /*with_draft=*/false, &spec_calibration)
                         : std::vector<double>{};
  int32_t width = n_max;
  if (uniform && spec_mode.adaptive && !probe[0]) width = step_width(rates, n, verify_costs);
  for (size_t i = 0; i < ids.size(); ++i) {
    SpecState& s = *rs[i]->spec;
    int32_t keep = std::min(n[i], width);
    if (!uniform && spec_mode.adaptive && keep > 0 && !probe[i])
      keep = step_width(std::span(rates).subspan(i, 1), std::span(n).subspan(i, 1), verify_costs);
    s.n_real = keep;
    // A one-width step pads every sequence to the width, also one whose output is nearly
    // complete (the padding's KV slots may lie past max_len: they are rolled back, and
    // emission stops at max_len), unless the positions would pass the model's context (then
    // that step runs unrecorded).
    const int32_t positions_left = int32_t(model->config().max_position) - int32_t(rs[i]->all_tokens.size());
    const int32_t len = uniform && width > 0 && width <= positions_left ? width : keep;
    const int32_t filler = s.proposal.empty() ? rs[i]->all_tokens.back() : s.proposal.back();
    s.proposal.resize(size_t(len), filler);
    if (spec_mode.adaptive && keep == 0) s.acceptance.idle();
    if (len > 0) sched->set_spec_tokens(ids[i], len);
  }
}

void Engine::Impl::calibrate(const ScheduleOutput& so, double seconds, int64_t tokens) {
  if (!spec_mode.enabled || !spec_mode.adaptive || spec_costs.empty() || so.seqs.empty()) return;
  int32_t n_spec = 0;
  for (const ScheduledSeq& q : so.seqs) {
    if (!q.samples || q.n_new != 1 + q.n_spec) return;  // a prefill chunk: not a step the model describes
    n_spec += q.n_spec;
  }
  const int32_t b = int32_t(so.seqs.size());
  const double mean_k = double(n_spec) / double(b);
  const double predicted = spec_costs.verify(b, mean_k) + spec_draft_steps * spec_costs.draft(b);
  spec_calibration.observe(b, (n_spec + b - 1) / b, predicted, seconds);
  // Tokens per sequence in units of the model's plain step at this batch size (see
  // SpeculationGate): steps of other batch sizes in the gate's bucket compare.
  spec_gate.observe(b, n_spec > 0, double(tokens) / double(b) * spec_costs.verify(b, 0), seconds);
}

// Row i (0..n) of the sequence's rows scores the token after its first i proposals. Greedy
// sequences compare argmaxes (ids_host when the rows stayed on the device, else the argmax of
// the row after the repetition penalty over the tokens and proposals before it); sampled ones
// build p_i lazily, as the sampler would (rows after a rejection are never looked at). Rows
// past the real proposals (padding) are never looked at; a sequence with padding only
// samples row 0 as a plain decode does.
int32_t Engine::Impl::emit_verified(RequestState& r, const ScheduledSeq& q, int32_t row0, bool ids_ready,
                                    RequestOutput& o) {
  SpecState& s = *r.spec;
  const int32_t n = std::min(q.n_spec, s.n_real);
  if (n == 0) {
    emit_sampled(r, row0, ids_ready, o);
    return 0;
  }
  const std::span<const int32_t> proposals(s.proposal.data(), size_t(n));
  const int64_t n_vocab = model->config().n_vocab;
  auto row = [&](int32_t i) {
    return std::span<const float>(logits_host.data() + int64_t(row0 + i) * n_vocab, size_t(n_vocab));
  };
  // Prompt + output + proposals: history i (tokens before row i's prediction) is its first
  // all_tokens.size() + i entries.
  std::vector<int32_t> history;
  if (uses_history(r.params)) {
    history = r.all_tokens;
    history.insert(history.end(), proposals.begin(), proposals.end());
  }
  auto history_at = [&](int32_t i) {
    return history.empty() ? std::span<const int32_t>() : std::span<const int32_t>(history.data(), r.all_tokens.size() + size_t(i));
  };
  // A constrained output: the constraint after each accepted-so-far prefix of the proposals,
  // up to the first proposal it refuses (row i is then masked with states[i]). A refused
  // proposal has probability 0 under the masked row, so verification rejects it there (and
  // samples that row's residual, as for any rejection): rows past it are never looked at.
  std::vector<std::unique_ptr<TokenConstraint>> states;
  if (r.constraint) {
    states.push_back(r.constraint->clone());
    for (int32_t i = 0; i < n && states.back()->allows(proposals[size_t(i)]); ++i) {
      states.push_back(states.back()->clone());
      states.back()->accept(proposals[size_t(i)]);
    }
  }
  auto masked = [&](int32_t i) {
    std::vector<float> m(row(i).begin(), row(i).end());
    if (r.constraint) {
      TF_ASSERT(size_t(i) < states.size(), "row {} of a constrained verification has no state", i);
      states[size_t(i)]->mask(m);
    }
    return m;
  };
  VerifyResult v;
  if (ids_ready) {
    v = verify_greedy(proposals, [&](int32_t i) { return ids_host[size_t(row0 + i)]; });
  } else if (r.params.greedy()) {
    v = verify_greedy(proposals, [&](int32_t i) {
      std::vector<float> penalised = masked(i);
      adjust_logits(penalised, history_at(i), r.prompt.size(), r.params);
      return argmax(penalised);
    });
  } else {
    std::vector<std::vector<float>> p(size_t(n) + 1);
    auto p_at = [&](int32_t i) -> std::span<const float> {
      if (p[size_t(i)].empty()) p[size_t(i)] = r.sampler->distribution(masked(i), history_at(i));
      return p[size_t(i)];
    };
    DistributionFn q_at;
    if (!s.q.empty()) q_at = [&](int32_t i) -> std::span<const float> { return s.q[size_t(i)]; };
    v = verify_sampled(proposals, p_at, q_at, s.rng);
  }
  ++s.n_drafts;
  s.n_draft_tokens += n;
  s.n_accepted += v.n_accepted;
  s.acceptance.observe(n, v.n_accepted);
  spec_acceptance.observe(n, v.n_accepted);
  ++spec_drafts;
  spec_draft_tokens += n;
  spec_accepted += v.n_accepted;

  int32_t n_appended = 0;
  for (int32_t i = 0; i <= v.n_accepted && !r.finished; ++i) {
    const int32_t token = i < v.n_accepted ? proposals[size_t(i)] : v.token;
    if (r.params.logprobs >= 0) o.logprobs.push_back(sampled_logprobs(row(i), token, r.params.logprobs));
    if (r.constraint) r.constraint->accept(token);
    on_token(r, token, o);
    n_appended += i < v.n_accepted ? 1 : 0;
  }
  return n_appended;
}

// `batch` scratch sequences (ids below any request's) with 64 cached positions each run
// 1 + k tokens with logits for all, as a verification does, and the greedy ids come back; the
// ks take turns, 2 unreported runs each (per-shape kernel choices, CUDA Graph recording) then
// 7 timed rounds, and each k's median counts (median_step_seconds says why the median). Fewer
// sequences (scaled up) or shorter contexts when the pool is short.
std::vector<double> Engine::Impl::time_verify_steps(int32_t batch, const std::vector<int32_t>& ks, int rounds) {
  constexpr int kWarmup = 2;
  const int32_t bs = kv->block_size(), n_avail = kv->pool().n_blocks_free();
  const int32_t max_width = 1 + *std::max_element(ks.begin(), ks.end());
  const int32_t per_seq = std::min(KvManager::blocks_for(64 + max_width, bs), std::max(1, n_avail / std::max(1, batch)));
  const int32_t n_fit = std::min(batch, n_avail / per_seq);
  TF_ASSERT(n_fit > 0 && per_seq * bs >= max_width, "no free KV blocks to time a verification step");
  const int32_t ctx = std::min(per_seq * bs - max_width, int32_t(model->config().max_position) - max_width);
  std::vector<int64_t> seqs;
  for (int32_t b = 0; b < n_fit; ++b) {
    seqs.push_back(-2 - b);
    TF_ASSERT(kv->grow(seqs.back(), ctx + max_width), "free blocks vanished");
  }
  std::vector<Batch> steps;
  const std::vector<int32_t> ids(size_t(max_width), 0);
  for (int32_t k : ks) {
    BatchBuilder bb(bs, per_seq, kv->n_groups());
    for (int64_t id : seqs)
      bb.add(SeqChunk{.ids = ids.data(), .n_ids = 1 + k, .start_pos = ctx, .tables = kv->tables(id),
                      .all_logits = true});
    steps.push_back(bb.take());
  }
  auto run = [&](const Batch& b) {
    const TensorView logits = run_forward(*model, *backend, b);
    if (!ids_dev.data || ids_dev.numel() < logits.shape[0]) {
      if (ids_dev.data) backend->release(ids_dev);
      ids_dev = backend->alloc(DType::I32, {std::max<int64_t>(logits.shape[0], opt.max_seqs)});
    }
    TensorView dev = ids_dev;
    dev.shape[0] = logits.shape[0];
    backend->argmax_rows(logits, dev);
    ids_host.resize(size_t(logits.shape[0]));
    backend->copy_to_host(dev, ids_host.data());
  };
  std::vector<std::vector<double>> t(ks.size());
  for (int round = 0; round < kWarmup + rounds; ++round)
    for (size_t i = 0; i < ks.size(); ++i) {
      const auto t0 = Clock::now();
      run(steps[i]);
      if (round >= kWarmup) t[i].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  for (int64_t id : seqs) kv->free(id);
  std::vector<double> out;
  if (rounds == 0) return out;
  for (std::vector<double>& v : t) {
    std::nth_element(v.begin(), v.begin() + ptrdiff_t(v.size() / 2), v.end());
    out.push_back(v[v.size() / 2] * double(batch) / double(n_fit));
  }
  return out;
}

SpecCostModel Engine::Impl::measure_spec_costs(const CostGrid& grid) {
  if (!proposer) fail("measuring speculation costs on an engine built without speculation (--spec)");
  auto ascending_from = [](const std::vector<int32_t>& v, int32_t lo) {
    return !v.empty() && v[0] >= lo && std::adjacent_find(v.begin(), v.end(), std::greater_equal<>()) == v.end();
  };
  if (!ascending_from(grid.batches, 1) || !ascending_from(grid.ks, 0) || grid.ks[0] != 0)
    fail("speculation cost grid: batch sizes must ascend from >= 1 and proposal counts from 0");
  warm_catch_up();  // first: it sizes the draft's scratch, which the grid's recordings then keep
  ProgressBar bar("measuring speculation costs", int64_t(grid.batches.size() * 2));
  SpecCostModel m = measure_cost_model(
      grid, [&](int32_t b, const std::vector<int32_t>& ks) { return time_verify_steps(b, ks); },
      [&](int32_t b) { return proposer->measure_step_seconds(b); },
      [&](int32_t done, int32_t) { bar.update(done); });
  bar.finish();
  warm_spec_shapes(grid);
  return m;
}

// A step whose shapes the backend meets for the first time chooses its kernels (cuBLASLt
// candidates timed per row count) and the next one records its CUDA Graph: on a small model
// each costs tens of plain steps, which a probe or a width the grid never timed would pay
// while the adaptive policy runs (and a slow first reading would price the width out). So on
// a recording backend every width 1..k_max + 1 at every recorded batch size up to the grid's
// largest runs twice here, untimed, and the proposer's step (a draft model's decode) at each
// recorded batch size the grid left out. A draft's catch-up forward (eager, any row count up
// to max_batch_tokens) is warmed before the grid (warm_catch_up).
void Engine::Impl::warm_spec_shapes(const CostGrid& grid) {
  if (backend->pad_kv_block(0) < 0 || grid.batches.empty() || grid.ks.empty()) return;
  auto has = [](const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); };
  for (int32_t b : recorded_batch_sizes(grid.batches.back())) {
    const bool timed = has(grid.batches, b);
    std::vector<int32_t> ks;
    for (int32_t k = 0; k <= grid.ks.back(); ++k)
      if (!timed || !has(grid.ks, k)) ks.push_back(k);
    if (!ks.empty()) time_verify_steps(b, ks, /*rounds=*/0);
    if (!timed) proposer->measure_step_seconds(b);
  }
}

// The proposer's catch-up forwards (a draft model's: eager, 1..max_batch_tokens rows, logits
// for up to max_seqs sequences) at every shape they can take, untimed, on a recording
// backend: a probe's catch-up at a row count met for the first time would otherwise pay the
// backend's kernel choice for it (cuBLASLt candidates timed, tens of plain steps on a small
// model) and, when it outgrows the draft's scratch, every recording the draft made. Prints
// what it took.
void Engine::Impl::warm_catch_up() {
  if (backend->pad_kv_block(0) < 0) return;
  const auto t0 = Clock::now();
  const int32_t n = proposer->warm_catch_up(opt.max_seqs);
  if (n > 0)
    std::fprintf(stderr, "warmed %s catch-up shapes: %d forwards in %.2f s\n", proposer->name().c_str(), n,
                 std::chrono::duration<double>(Clock::now() - t0).count());
}

}  // namespace tf

// Speculative decoding inside the engine step: proposals before schedule(), verification of
// each sequence's logits rows after the forward, and the cost model adaptive lengths use.
//
// A step: propose() asks the proposer for up to k tokens for every running sequence that is
// decoding (one token left to compute), k from SpecOptions or, adaptive, from the sequence's
// acceptance rate and the cost model at this batch size (spec_policy.h), capped so that the
// step cannot pass max_len. A sequence the policy left without proposals for kProbeEvery
// steps in a row gets one, if any length could pay at this batch size, so that its rate
// follows its text (at most one extra token per sequence every kProbeEvery steps); the scheduler takes them where budget and free blocks allow
// (scheduler.h). The batch runs each such sequence's last token and its proposals with logits
// for all, beside the other sequences' decodes and prefill chunks. emit_verified() keeps the
// proposals the target would have produced (verifier.h) and emits them and the token after
// them; the scheduler's commit rolls back the rest.
#include <algorithm>
#include <fstream>
#include <functional>

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
}

void Engine::Impl::set_spec_mode(const SpecMode& m) {
  if (!proposer) fail("speculation settings for an engine built without speculation (--spec)");
  if (m.k < 1) fail("speculative decoding: k must be at least 1, got {}", m.k);
  if (m.adaptive && spec_costs.empty()) spec_costs = measure_spec_costs(default_cost_grid(opt.max_seqs, m.k));
  spec_mode = m;
}

constexpr int32_t kProbeEvery = 16;

void Engine::Impl::propose() {
  if (!spec_mode.enabled) return;
  std::vector<RequestId> ids;
  for (const auto& [id, r] : requests)
    if (!r.finished && sched->is_running(id) && sched->n_computed(id) + 1 == int32_t(r.all_tokens.size()))
      ids.push_back(id);
  std::sort(ids.begin(), ids.end());  // a fixed order: the proposer's batches do not depend on hashing
  const int32_t batch = std::max(1, sched->n_running());
  const std::vector<double> costs =
      spec_mode.adaptive ? proposal_costs(spec_costs, batch, spec_mode.k) : std::vector<double>{};
  const bool can_pay = spec_mode.adaptive && proposals_can_pay(costs);
  const double prior = spec_acceptance.rate();
  std::vector<ProposeRequest> reqs;
  for (RequestId id : ids) {
    RequestState& r = state(id);
    SpecState& s = *r.spec;
    s.proposal.clear();
    s.q.clear();
    const int32_t room = r.max_len - int32_t(r.all_tokens.size()) - 1;  // the step yields up to k + 1 tokens
    int32_t k = spec_mode.adaptive ? proposal_length(s.acceptance.rate(prior), costs) : spec_mode.k;
    if (spec_mode.adaptive && k == 0) {
      s.acceptance.idle();
      if (can_pay && ++s.n_idle % kProbeEvery == 0) k = 1;
    } else {
      s.n_idle = 0;
    }
    k = std::min(k, room);
    if (k <= 0) continue;
    reqs.push_back({.seq = id, .tokens = &r.all_tokens, .k = k, .sampling = &r.params, .rng = &s.rng});
  }
  if (reqs.empty()) return;
  std::vector<Proposal> props;
  proposer->propose(reqs, props);
  for (size_t i = 0; i < reqs.size(); ++i) {
    SpecState& s = *state(reqs[i].seq).spec;
    TF_ASSERT(int32_t(props[i].tokens.size()) <= reqs[i].k, "proposer {} offered {} tokens for {}", proposer->name(),
              props[i].tokens.size(), reqs[i].k);
    s.proposal = std::move(props[i].tokens);
    s.q = std::move(props[i].q);
    if (!s.proposal.empty()) sched->set_spec_tokens(reqs[i].seq, int32_t(s.proposal.size()));
  }
}

// Row i (0..n) of the sequence's rows scores the token after its first i proposals. Greedy
// sequences compare argmaxes (ids_host when the rows stayed on the device, else the argmax of
// the row after the repetition penalty over the tokens and proposals before it); sampled ones
// build p_i lazily, as the sampler would (rows after a rejection are never looked at).
int32_t Engine::Impl::emit_verified(RequestState& r, const ScheduledSeq& q, int32_t row0, bool ids_ready,
                                    RequestOutput& o) {
  SpecState& s = *r.spec;
  const int32_t n = q.n_spec;
  const std::span<const int32_t> proposals(s.proposal.data(), size_t(n));
  const int64_t n_vocab = model->config().n_vocab;
  auto row = [&](int32_t i) {
    return std::span<const float>(logits_host.data() + int64_t(row0 + i) * n_vocab, size_t(n_vocab));
  };
  // Prompt + output + proposals: history i (tokens before row i's prediction) is its first
  // all_tokens.size() + i entries.
  std::vector<int32_t> history;
  if (r.params.repetition_penalty != 1.0f) {
    history = r.all_tokens;
    history.insert(history.end(), proposals.begin(), proposals.end());
  }
  auto history_at = [&](int32_t i) {
    return history.empty() ? std::span<const int32_t>() : std::span<const int32_t>(history.data(), r.all_tokens.size() + size_t(i));
  };
  VerifyResult v;
  if (ids_ready) {
    v = verify_greedy(proposals, [&](int32_t i) { return ids_host[size_t(row0 + i)]; });
  } else if (r.params.greedy()) {
    v = verify_greedy(proposals, [&](int32_t i) {
      std::vector<float> penalised(row(i).begin(), row(i).end());
      apply_repetition_penalty(penalised, history_at(i), r.params.repetition_penalty);
      return argmax(penalised);
    });
  } else {
    std::vector<std::vector<float>> p(size_t(n) + 1);
    auto p_at = [&](int32_t i) -> std::span<const float> {
      if (p[size_t(i)].empty()) p[size_t(i)] = r.sampler->distribution(row(i), history_at(i));
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
    on_token(r, token, o);
    n_appended += i < v.n_accepted ? 1 : 0;
  }
  return n_appended;
}

// `batch` scratch sequences (ids below any request's) with 64 cached positions each run
// 1 + k tokens with logits for all, as a verification does; the greedy ids come back
// (median_step_seconds). Fewer sequences (scaled up) or shorter contexts when the pool is short.
double Engine::Impl::time_verify_step(int32_t batch, int32_t k) {
  const int32_t bs = kv->block_size(), n_avail = kv->pool().n_blocks_free();
  const int32_t width = 1 + k;
  const int32_t per_seq = std::min(KvManager::blocks_for(64 + width, bs), std::max(1, n_avail / std::max(1, batch)));
  const int32_t n_fit = std::min(batch, n_avail / per_seq);
  TF_ASSERT(n_fit > 0 && per_seq * bs >= width, "no free KV blocks to time a verification step");
  const int32_t ctx = std::min(per_seq * bs - width, int32_t(model->config().max_position) - width);
  std::vector<int64_t> seqs;
  for (int32_t b = 0; b < n_fit; ++b) {
    seqs.push_back(-2 - b);
    TF_ASSERT(kv->grow(seqs.back(), ctx + width), "free blocks vanished");
  }
  BatchBuilder bb(bs, per_seq, kv->n_groups());
  const std::vector<int32_t> ids(size_t(width), 0);
  for (int64_t id : seqs)
    bb.add(SeqChunk{.ids = ids.data(), .n_ids = width, .start_pos = ctx, .tables = kv->tables(id),
                    .all_logits = true});
  const Batch b = bb.take();
  const double t = median_step_seconds([&] {
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
  });
  for (int64_t id : seqs) kv->free(id);
  return t * double(batch) / double(n_fit);
}

SpecCostModel Engine::Impl::measure_spec_costs(const CostGrid& grid) {
  if (!proposer) fail("measuring speculation costs on an engine built without speculation (--spec)");
  auto ascending_from = [](const std::vector<int32_t>& v, int32_t lo) {
    return !v.empty() && v[0] >= lo && std::adjacent_find(v.begin(), v.end(), std::greater_equal<>()) == v.end();
  };
  if (!ascending_from(grid.batches, 1) || !ascending_from(grid.ks, 0) || grid.ks[0] != 0)
    fail("speculation cost grid: batch sizes must ascend from >= 1 and proposal counts from 0");
  ProgressBar bar("measuring speculation costs", int64_t(grid.batches.size() * (grid.ks.size() + 1)));
  SpecCostModel m = measure_cost_model(
      grid, [&](int32_t b, int32_t k) { return time_verify_step(b, k); },
      [&](int32_t b) { return proposer->measure_step_seconds(b); },
      [&](int32_t done, int32_t) { bar.update(done); });
  bar.finish();
  return m;
}

}  // namespace tf

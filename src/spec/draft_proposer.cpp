#include "spec/draft_proposer.h"

#include <algorithm>

#include "core/error.h"
#include "spec/spec_policy.h"
#include "spec/verifier.h"

namespace tf {
namespace {

bool plain_greedy(const SamplingParams& p) { return p.greedy() && !adjusts_logits(p); }

// n_valid after the proposals written at n_valid, n_valid + 1, ... that are now among the
// tokens: their K/V are right. Never the last token (its logits give proposal 1).
int32_t valid_after(int32_t n_valid, const std::vector<int32_t>& written, const std::vector<int32_t>& tokens) {
  const int32_t len = int32_t(tokens.size());
  for (int32_t x : written) {
    if (n_valid >= len - 1 || tokens[size_t(n_valid)] != x) break;
    ++n_valid;
  }
  return n_valid;
}

}  // namespace

DraftProposer::DraftProposer(const DraftParams& p) : params_(p) {
  backend_ = make_backend(parse_backend_kind(p.backend), p.backend_options);
  model_ = load_model(p.model_dir, *backend_);
  const ModelConfig& cfg = model_->config();
  if (cfg.n_vocab != p.n_vocab)
    fail("draft model {}: its vocabulary has {} tokens but the target's has {} (a draft model must use the "
         "target's tokenizer)", p.model_dir, cfg.n_vocab, p.n_vocab);
  // At least one full-context sequence fits, as for the target's pool. The draft's KV is one
  // group: a model mixing sliding-window and full layers keeps every block (no window on the
  // manager) and its sliding layers mask what lies outside their window.
  const int32_t per_seq = KvManager::blocks_for(int32_t(cfg.max_position), p.block_size);
  const int32_t n_blocks = std::max(p.n_blocks, per_seq);
  KvCacheSpec spec = kv_geometry(cfg);
  spec.n_blocks = n_blocks;
  spec.block_size = p.block_size;
  spec.dtype = p.kv_dtype;
  model_->init_kv_cache(*backend_, spec);
  kv_ = std::make_unique<KvManager>(KvManagerParams{.n_blocks = n_blocks, .block_size = p.block_size,
                                                    .sliding_window = int32_t(cfg.kv_layer_groups().empty() ? cfg.sliding_window : 0),
                                                    .enable_prefix_caching = p.enable_prefix_caching});
}

DraftProposer::~DraftProposer() = default;

TensorView DraftProposer::run_forward(const Batch& batch) {
  if (params_.forward) return params_.forward(*model_, *backend_, batch);
  const PreparedStep p = model_->prepare(batch);
  model_->run();
  return p.logits;
}

void DraftProposer::release(int64_t seq) {
  kv_->free(seq);
  seqs_.erase(seq);
}

// As prepare() counts it. Prefix-cache hits of a new sequence are not looked up (the cautious
// side).
int32_t DraftProposer::backlog(int64_t seq, const std::vector<int32_t>& tokens) const {
  const int32_t len = int32_t(tokens.size());
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) return len;
  return std::max(0, len - valid_after(it->second.n_valid, it->second.written, tokens));
}

// Positions n_valid.. may hold last step's proposals; those now among the tokens are kept.
// The last token is always run again (its logits give proposal 1), so n_valid stays below
// len; a sequence with no new token since its last proposals (n_valid == len) sits out.
bool DraftProposer::prepare(const ProposeRequest& r, Work& w) {
  const std::vector<int32_t>& t = *r.tokens;
  const int32_t len = int32_t(t.size());
  const int32_t k = std::min<int32_t>(r.k, int32_t(model_->config().max_position) - len + 1);
  if (k <= 0) return false;
  auto it = seqs_.find(r.seq);
  if (it == seqs_.end()) {
    const PrefixHit hit = kv_->find_prefix(t);
    if (!kv_->start(r.seq, &t, hit, hit.n_tokens)) return false;
    it = seqs_.emplace(r.seq, SeqState{.n_valid = hit.n_tokens}).first;
  }
  SeqState& s = it->second;
  s.n_valid = valid_after(s.n_valid, s.written, t);
  s.written.clear();
  kv_->on_computed(r.seq, s.n_valid);
  if (s.n_valid >= len) return false;
  const int32_t need = len - 1 + k;  // positions 0 .. len + k - 2
  kv_->truncate(r.seq, need);
  if (!kv_->grow(r.seq, need)) return false;
  w = Work{.from = s.n_valid, .len = len, .k = k};
  if (uses_history(*r.sampling)) w.history = t;
  return true;
}

void DraftProposer::propose(std::span<const ProposeRequest> reqs, std::vector<Proposal>& out) {
  out.assign(reqs.size(), {});
  std::vector<Work> work;
  for (size_t i = 0; i < reqs.size(); ++i) {
    Work w;
    if (reqs[i].k <= 0 || !prepare(reqs[i], w)) continue;
    w.req = i;
    work.push_back(std::move(w));
  }
  if (work.empty()) return;
  catch_up(reqs, work, out);
  decode(reqs, work, out);
}

// Forwards of at most max_batch_tokens tokens until every sequence ran its last token; a
// sequence gets its logits row (and proposal 1) in the forward that reaches its end.
void DraftProposer::catch_up(std::span<const ProposeRequest> reqs, std::vector<Work>& work,
                             std::vector<Proposal>& out) {
  size_t first = 0;  // work[first..] still has tokens to run
  while (first < work.size()) {
    int32_t max_blocks = 1;
    for (size_t i = first; i < work.size(); ++i)
      max_blocks = std::max(max_blocks, int32_t(kv_->table(reqs[work[i].req].seq).size()));
    BatchBuilder bb(params_.block_size, max_blocks);
    std::vector<Work*> rows;
    int32_t budget = params_.max_batch_tokens;
    for (size_t i = first; i < work.size() && budget > 0; ++i) {
      Work& w = work[i];
      const ProposeRequest& r = reqs[w.req];
      const std::vector<int32_t>& table = kv_->table(r.seq);
      const int32_t n = std::min(w.len - w.from, budget);
      const bool last = w.from + n == w.len;
      bb.add(SeqChunk{.ids = r.tokens->data() + w.from, .n_ids = n, .start_pos = w.from, .blocks = table.data(),
                      .n_blocks = int32_t(table.size()), .want_logits = last});
      w.from += n;
      budget -= n;
      if (last) rows.push_back(&w);
      if (last && i == first) ++first;
    }
    const Batch b = bb.take();
    if (b.n_tokens() > warm_rows_ || b.n_out() > warm_seqs_) ++n_cold_;
    forward_and_draw(b, reqs, rows, out);
  }
  for (Work& w : work) {
    const int64_t seq = reqs[w.req].seq;
    seqs_.at(seq).n_valid = w.len;
    kv_->on_computed(seq, w.len);
  }
}

// Proposal j + 1 of each sequence that wants it comes from running proposal j at position
// len - 1 + j: one token per sequence, a decode step (recorded as a CUDA Graph where the
// backend records).
void DraftProposer::decode(std::span<const ProposeRequest> reqs, std::vector<Work>& work, std::vector<Proposal>& out) {
  int32_t k_max = 0;
  for (const Work& w : work) k_max = std::max(k_max, w.k);
  for (int32_t j = 1; j < k_max; ++j) {
    std::vector<Work*> rows;
    int32_t max_blocks = 1;
    for (Work& w : work) {
      if (w.k <= j || int32_t(out[w.req].tokens.size()) < j) continue;
      rows.push_back(&w);
      max_blocks = std::max(max_blocks, int32_t(kv_->table(reqs[w.req].seq).size()));
    }
    if (rows.empty()) return;
    BatchBuilder bb(params_.block_size, max_blocks);
    for (Work* w : rows) {
      const int64_t seq = reqs[w->req].seq;
      const std::vector<int32_t>& table = kv_->table(seq);
      const int32_t token = out[w->req].tokens[size_t(j - 1)];
      bb.add(SeqChunk{.ids = &token, .n_ids = 1, .start_pos = w->len - 1 + j, .blocks = table.data(),
                      .n_blocks = int32_t(table.size())});
      seqs_.at(seq).written.push_back(token);
    }
    forward_and_draw(bb.take(), reqs, rows, out);
  }
}

void DraftProposer::forward_and_draw(const Batch& batch, std::span<const ProposeRequest> reqs,
                                     std::vector<Work*>& rows, std::vector<Proposal>& out) {
  const TensorView logits = run_forward(batch);
  if (rows.empty()) return;
  const int64_t n_vocab = model_->config().n_vocab;
  bool all_plain_greedy = true;
  for (const Work* w : rows) all_plain_greedy &= plain_greedy(*reqs[w->req].sampling);
  std::vector<int32_t> ids(rows.size());
  if (all_plain_greedy) {  // only ids leave the device
    if (!ids_dev_.data || ids_dev_.numel() < int64_t(rows.size())) {
      if (ids_dev_.data) backend_->release(ids_dev_);
      ids_dev_ = backend_->alloc(DType::I32, {std::max<int64_t>(int64_t(rows.size()), 64)});
    }
    TensorView dev = ids_dev_;
    dev.shape[0] = int64_t(rows.size());
    backend_->argmax_rows(logits, dev);
    backend_->copy_to_host(dev, ids.data());
  } else {
    logits_host_.resize(size_t(logits.numel()));
    backend_->copy_to_host(logits, logits_host_.data());
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    Work& w = *rows[i];
    const ProposeRequest& r = reqs[w.req];
    Proposal& o = out[w.req];
    if (!all_plain_greedy) {
      const std::span<const float> row(logits_host_.data() + int64_t(i) * n_vocab, size_t(n_vocab));
      if (r.sampling->greedy()) {
        std::vector<float> penalised(row.begin(), row.end());
        adjust_logits(penalised, w.history, r.n_prompt, *r.sampling);
        ids[i] = argmax(penalised);
      } else {
        std::vector<float> q = Sampler(*r.sampling, r.n_prompt).distribution(row, w.history);
        ids[i] = draw_from(q, r.rng->uniform());
        o.q.push_back(std::move(q));
      }
    }
    o.tokens.push_back(ids[i]);
    if (!w.history.empty()) w.history.push_back(ids[i]);
  }
}

// `batch` sequences of 64 cached tokens each decode one token: the draft's step in the
// steady state (median_step_seconds). Shorter contexts, or fewer sequences (scaled up), when
// the pool is small.
double DraftProposer::measure_step_seconds(int32_t batch) {
  const int32_t n_fit = std::min(batch, kv_->pool().n_blocks_available());
  const int32_t ctx = std::clamp(kv_->pool().n_blocks_available() / std::max(1, n_fit) * params_.block_size - 1, 1,
                                 std::min<int32_t>(64, int32_t(model_->config().max_position) - 1));
  std::vector<int64_t> ids;
  for (int32_t b = 0; b < n_fit; ++b) {
    ids.push_back(-2 - b);  // never a request id
    TF_ASSERT(kv_->grow(ids.back(), ctx + 1), "draft pool too small to measure a step");
  }
  int32_t max_blocks = 1;
  for (int64_t id : ids) max_blocks = std::max(max_blocks, int32_t(kv_->table(id).size()));
  BatchBuilder bb(params_.block_size, max_blocks);
  const int32_t token = 0;
  for (int64_t id : ids)
    bb.add(SeqChunk{.ids = &token, .n_ids = 1, .start_pos = ctx, .blocks = kv_->table(id).data(),
                    .n_blocks = int32_t(kv_->table(id).size())});
  const Batch b = bb.take();
  std::vector<int32_t> host(static_cast<size_t>(n_fit));
  const double t = median_step_seconds([&] {
    const TensorView logits = run_forward(b);
    if (!ids_dev_.data || ids_dev_.numel() < n_fit) {
      if (ids_dev_.data) backend_->release(ids_dev_);
      ids_dev_ = backend_->alloc(DType::I32, {std::max<int64_t>(n_fit, 64)});
    }
    TensorView dev = ids_dev_;
    dev.shape[0] = n_fit;
    backend_->argmax_rows(logits, dev);
    backend_->copy_to_host(dev, host.data());
  });
  for (int64_t id : ids) kv_->free(id);
  return t * double(batch) / double(n_fit);
}

int32_t DraftProposer::warm_catch_up(int32_t max_seqs) {
  const int32_t max_rows = std::max(1, params_.max_batch_tokens), bs = params_.block_size;
  max_seqs = std::max(1, max_seqs);
  if (max_rows <= warm_rows_ && max_seqs <= warm_seqs_) return 0;
  int32_t n_run = 0;
  std::vector<char> seqs_seen(size_t(max_seqs) + 1, 0);  // logits row counts run
  std::vector<int64_t> ids;
  const std::vector<int32_t> tokens(size_t(max_rows), 0);
  for (int32_t rows = max_rows; rows >= 1; --rows) {
    // Sequence 0 takes the rows the others (one token each) leave; fewer sequences where the
    // pool is short.
    int32_t n_seqs = std::min(rows, max_seqs);
    while (n_seqs > 1 && KvManager::blocks_for(rows - n_seqs + 1, bs) + n_seqs - 1 > kv_->pool().n_blocks_available())
      --n_seqs;
    BatchBuilder bb(bs, KvManager::blocks_for(rows - n_seqs + 1, bs));
    for (int32_t is = 0; is < n_seqs; ++is) {
      const int32_t n = is == 0 ? rows - n_seqs + 1 : 1;
      ids.push_back(-2 - is);  // never a request id
      TF_ASSERT(kv_->grow(ids.back(), n), "draft pool too small to warm a catch-up of {} rows", rows);
      const std::vector<int32_t>& table = kv_->table(ids.back());
      bb.add(SeqChunk{.ids = tokens.data(), .n_ids = n, .start_pos = 0, .blocks = table.data(),
                      .n_blocks = int32_t(table.size()), .want_logits = true});
    }
    const Batch b = bb.take();
    // Eagerly, as a catch-up of mixed lengths runs (a decode-shaped one is recorded, and its
    // recordings are warmed with the draft's step).
    const PreparedStep p = model_->prepare(b);
    if (p.buffers_moved) backend_->graph_reset();
    model_->run();
    const int32_t n_out = int32_t(b.n_out());
    seqs_seen[size_t(n_out)] = 1;
    if (!ids_dev_.data || ids_dev_.numel() < n_out) {
      if (ids_dev_.data) backend_->release(ids_dev_);
      ids_dev_ = backend_->alloc(DType::I32, {std::max<int64_t>(n_out, 64)});
    }
    TensorView dev = ids_dev_;
    dev.shape[0] = n_out;
    std::vector<int32_t> host(static_cast<size_t>(n_out));
    backend_->argmax_rows(p.logits, dev);
    backend_->copy_to_host(dev, host.data());
    for (int64_t id : ids) kv_->free(id);
    ids.clear();
    ++n_run;
  }
  int32_t seqs = 0;  // every logits row count up to it ran
  while (seqs < max_seqs && seqs_seen[size_t(seqs) + 1]) ++seqs;
  warm_rows_ = std::max(warm_rows_, max_rows);
  warm_seqs_ = std::max(warm_seqs_, seqs);
  return n_run;
}

std::string DraftProposer::check_invariants() const {
  if (std::string e = kv_->check_invariants(); !e.empty()) return "draft kv: " + e;
  for (const auto& [seq, s] : seqs_) {
    if (!kv_->has(seq)) return fmt::format("draft sequence {} has no block table", seq);
    const int64_t covered = int64_t(kv_->table(seq).size()) * params_.block_size;
    if (s.n_valid + int64_t(s.written.size()) > covered)
      return fmt::format("draft sequence {}: {} valid + {} written positions past its blocks", seq, s.n_valid,
                         s.written.size());
  }
  return "";
}

}  // namespace tf

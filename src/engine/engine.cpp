// One step = schedule -> build the packed batch -> forward -> sample -> update -> stream.
#include "twofold/engine.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "core/error.h"
#include "engine/engine_impl.h"
#include "engine/forward_runner.h"
#include "engine/weight_copies.h"
#include "model/arch/tensor_parallel_model.h"
#include "sample/logprobs.h"

namespace tf {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Abort: return "abort";
    case FinishReason::None: return "none";
  }
  return "none";
}

namespace {

struct KvPlan {
  KvCacheSpec spec;
  KvManagerParams params;
};

// The KV pools and their block counts. Group 0 (every layer, or a mixed model's full-attention
// layers): enough blocks for max_seqs full-context sequences, capped by kv_memory_mb (less
// what group 1 takes), but never fewer than one full-context sequence needs; n_kv_blocks
// overrides. Group 1 (a mixed model's sliding-window layers): a sequence there holds at most
// ceil((window - 1 + n_new) / block_size) + 1 blocks while it computes n_new tokens, so
// (max_seqs + 1) * (ceil((window - 1) / block_size) + 2) + ceil(max_batch_tokens /
// block_size) blocks always suffice (the + 1 sequence is Engine::score's); twice that, so
// its prefix-cache blocks survive a while, and group 0 alone limits admission.
KvPlan plan_kv(const ModelConfig& cfg, const EngineOptions& opt, DType kv_dtype) {
  KvPlan p;
  p.spec = kv_geometry(cfg);
  p.spec.block_size = opt.block_size;
  p.spec.dtype = kv_dtype;
  p.spec.layer_group = cfg.kv_layer_groups();
  // Bytes of one block of the layers of group g, summed over them (each layer its own KV heads).
  auto group_block_bytes = [&](int32_t g) {
    KvCacheSpec one{.n_layers = 1, .head_dim = cfg.head_dim, .dtype = kv_dtype};
    int64_t bytes = 0;
    for (int64_t il = 0; il < cfg.n_layers; ++il) {
      if (p.spec.group_of(il) != g) continue;
      one.n_kv_heads = p.spec.kv_heads_of(il);
      bytes += tf::kv_bytes_per_token(one) * opt.block_size;
    }
    return bytes;
  };
  int64_t n_blocks1 = 0, bytes1 = 0;
  const bool grouped = !p.spec.layer_group.empty();
  if (grouped) {
    const int64_t bs = opt.block_size, per_seq = (cfg.sliding_window - 1 + bs - 1) / bs + 2;
    n_blocks1 = 2 * ((int64_t(opt.max_seqs) + 1) * per_seq + (opt.max_batch_tokens + bs - 1) / bs);
    bytes1 = n_blocks1 * group_block_bytes(1);
  }
  const int32_t per_seq = KvManager::blocks_for(int32_t(cfg.max_position), opt.block_size);
  int64_t n_blocks = opt.n_kv_blocks;
  if (n_blocks <= 0) {
    const int64_t budget = std::max<int64_t>(0, opt.kv_memory_mb * (1 << 20) - bytes1);
    n_blocks = std::min<int64_t>(int64_t(per_seq) * opt.max_seqs, budget / group_block_bytes(0));
    n_blocks = std::max<int64_t>(n_blocks, per_seq);
  }
  p.spec.n_blocks = n_blocks;
  p.params = KvManagerParams{.n_blocks = int32_t(n_blocks), .block_size = opt.block_size,
                             .sliding_window = int32_t(grouped ? 0 : cfg.sliding_window),
                             .enable_prefix_caching = opt.enable_prefix_caching};
  if (grouped) {
    p.spec.group_blocks = {n_blocks, n_blocks1};
    p.params.more_groups.push_back(KvGroupParams{.n_blocks = int32_t(n_blocks1),
                                                 .sliding_window = int32_t(cfg.sliding_window)});
  }
  return p;
}

}  // namespace

Engine::Impl::Impl(const EngineOptions& o) : opt(o) {
  if (opt.block_size <= 0) fail("block size must be positive, got {}", opt.block_size);
  if (opt.max_batch_tokens <= 0) fail("max batch tokens must be positive, got {}", opt.max_batch_tokens);
  if (opt.max_seqs <= 0) fail("max sequences must be positive, got {}", opt.max_seqs);
  tokenizer = Tokenizer::from_model(opt.model_dir);
  if (opt.tensor_parallel < 1) fail("tensor parallel size must be at least 1, got {}", opt.tensor_parallel);
  const BackendKind kind = parse_backend_kind(opt.backend);
  backend = make_backend(kind, backend_options(opt.kernels));
  if (opt.load_format != "auto" && opt.load_format != "dummy")
    fail("unknown load format '{}' (expected auto or dummy)", opt.load_format);
  const CopyPlan copies = plan_weight_copies(opt.weights);
  const LoadOptions load{.dequantize_gguf = opt.weights.dequantize_gguf, .dummy_weights = opt.load_format == "dummy",
                         .weight_copies = copies.copies,
                         .quantize_lm_head = opt.weights.quantize_lm_head};
  if (opt.tensor_parallel == 1) {
    model = load_model(opt.model_dir, *backend, load);
  } else {  // rank 0 on `backend` (logits come back there), one more backend per other rank
    std::vector<std::unique_ptr<Backend>> ranks;
    for (int32_t r = 1; r < opt.tensor_parallel; ++r) ranks.push_back(make_backend(kind, backend_options(opt.kernels)));
    model = std::make_unique<TensorParallelModel>(opt.model_dir, *backend, std::move(ranks), load);
  }
  const ModelConfig& cfg = model->config();
  if (tokenizer->n_vocab() > cfg.n_vocab)
    fail("{}/tokenizer.json: token ids reach {}, but the model's vocab_size is {} ({}/config.json): "
         "every token id must be below it", opt.model_dir, tokenizer->n_vocab() - 1, cfg.n_vocab, opt.model_dir);

  // (A tensor-parallel model gives each rank its share of the KV heads.) Group 0 holds at least
  // one sequence of max_position_embeddings tokens, so config.json sizes it.
  const KvPlan plan = plan_kv(cfg, opt, parse_kv_dtype(opt.kv_dtype));
  try {
    model->init_kv_cache(*backend, plan.spec);
  } catch (const std::bad_alloc&) {
    fail("out of memory allocating the KV cache: {} blocks of {} tokens (the pool holds at least one "
         "sequence of max_position_embeddings = {} tokens, {}/config.json)", plan.spec.n_blocks, opt.block_size,
         cfg.max_position, opt.model_dir);
  }
  kv = std::make_unique<KvManager>(plan.params);
  sched = std::make_unique<Scheduler>(
      SchedulerParams{.max_batch_tokens = opt.max_batch_tokens, .max_seqs = opt.max_seqs}, *kv);
  if (copies.measure) {
    copy_timings = measure_copy_ranges(*model, *backend, opt.max_seqs, opt.max_batch_tokens);
    for (const std::string& line : copy_report(*model, copy_timings)) std::fprintf(stderr, "%s\n", line.c_str());
  }
  copy_policy = model->copy_ranges();
  init_spec();
}

RequestId Engine::Impl::add(GenerateRequest req) {
  const ModelConfig& cfg = model->config();
  validate(req.sampling);
  std::vector<int32_t> ids = req.prompt_ids.empty() ? tokenizer->encode(req.prompt) : req.prompt_ids;
  if (ids.empty()) fail("the prompt is empty (it must have at least one token)");
  for (int32_t id : ids)
    if (id < 0 || id >= cfg.n_vocab) fail("prompt token id {} is outside the vocabulary [0, {})", id, cfg.n_vocab);
  if (int64_t(ids.size()) >= cfg.max_position)
    fail("the prompt has {} tokens but the model's context is {} tokens (max_position_embeddings); "
         "at most {} prompt tokens leave room for one new token",
         ids.size(), cfg.max_position, cfg.max_position - 1);
  const int64_t pool_tokens = int64_t(kv->pool().n_blocks_total()) * kv->block_size();
  if (int64_t(ids.size()) >= pool_tokens)
    fail("the prompt has {} tokens but the KV cache holds only {} tokens", ids.size(), pool_tokens);
  if (req.sampling.logprobs < -1) fail("logprobs must be -1 (off) or at least 0, got {}", req.sampling.logprobs);
  if (req.sampling.prompt_logprobs < -1)
    fail("prompt_logprobs must be -1 (off) or at least 0, got {}", req.sampling.prompt_logprobs);
  const bool scores_prompt = req.sampling.prompt_logprobs >= 0;
  if (req.sampling.max_tokens < (scores_prompt ? 0 : 1))
    fail("max_tokens must be at least {}, got {}", scores_prompt ? 0 : 1, req.sampling.max_tokens);
  for (const auto& [token, bias] : req.sampling.logit_bias)
    if (token < 0 || token >= cfg.n_vocab)
      fail("logit_bias token id {} is outside the vocabulary [0, {})", token, cfg.n_vocab);
  const bool constrained = req.sampling.output_format != OutputFormat::Text;
  const char* what = req.sampling.output_format == OutputFormat::Regex ? "an output held to a regex" : "a JSON output";
  if (constrained && req.sampling.ignore_eos)
    fail("{} ends with the end-of-sequence token: it cannot be combined with ignore_eos", what);
  if (constrained && cfg.eos_ids.empty())
    fail("{}: the model names no end-of-sequence token (eos_token_id), which {} ends with", opt.model_dir, what);
  std::unique_ptr<TokenConstraint> constraint = make_constraint(req.sampling);

  const RequestId id = next_id++;
  RequestState& r = requests[id];
  r.id = id;
  r.prompt = ids;
  r.all_tokens = ids;
  r.params = req.sampling;
  r.sampler = std::make_unique<Sampler>(req.sampling, ids.size());
  r.decoder = std::make_unique<StreamDecoder>(*tokenizer, /*skip_special=*/true);
  r.stop = std::make_unique<StopMatcher>(req.sampling.stop);
  r.constraint = std::move(constraint);
  if (scores_prompt) r.prompt_logprobs.resize(ids.size() - 1);
  r.max_len = int32_t(std::min<int64_t>({int64_t(ids.size()) + req.sampling.max_tokens, cfg.max_position, pool_tokens}));
  r.arrival = Clock::now();
  if (proposer) {
    r.spec = std::make_unique<SpecState>(req.sampling.seed);
    r.spec->quiet_idle_seen = spec_quiet_idle;  // the quiet steps before it are not its own
    r.spec->quiet_probe_seen = spec_quiet_probe;
  }
  sched->add(id, req.priority, &r.all_tokens, /*whole=*/scores_prompt);  // node-based map: the address stays valid
  return id;
}

// A request with prompt_logprobs gets logits at every position of each chunk that holds
// prompt positions (the scheduler never gives it a cached prefix, so every one is computed),
// until they went out with its first token.
bool Engine::Impl::scores_prompt_rows(const RequestState& r, const ScheduledSeq& q) const {
  return r.params.prompt_logprobs >= 0 && r.output.empty() && q.start < int32_t(r.prompt.size()) - 1;
}

// The logprobs of the prompt tokens that the chunk's rows (from logits_host row `row`)
// predict: position p's row gives prompt[p + 1].
void Engine::Impl::take_prompt_logprobs(RequestState& r, const ScheduledSeq& q, int32_t row) {
  const int64_t n_vocab = model->config().n_vocab;
  const int32_t n_prompt = int32_t(r.prompt.size());
  for (int32_t i = 0; i < q.n_new && q.start + i + 1 < n_prompt; ++i) {
    const std::span<const float> lg(logits_host.data() + int64_t(row + i) * n_vocab, size_t(n_vocab));
    const int32_t p = q.start + i;
    r.prompt_logprobs[size_t(p)] = sampled_logprobs(lg, r.prompt[size_t(p + 1)], r.params.prompt_logprobs);
  }
}

// A sequence verifying proposals runs its last token and the proposals, with logits for
// all of them; the proposals live in its SpecState, not in its tokens.
Batch Engine::Impl::build_batch(const ScheduleOutput& so) const {
  int32_t max_blocks = 1;
  for (const ScheduledSeq& q : so.seqs) max_blocks = std::max(max_blocks, int32_t(kv->table(q.id).size()));
  BatchBuilder bb(kv->block_size(), max_blocks, kv->n_groups());
  std::vector<int32_t> ids;
  for (const ScheduledSeq& q : so.seqs) {
    const RequestState& r = state(q.id);
    SeqChunk c{.ids = r.all_tokens.data() + q.start, .n_ids = q.n_new, .start_pos = q.start,
               .tables = kv->tables(q.id), .want_logits = q.samples};
    if (scores_prompt_rows(r, q)) c.want_logits = c.all_logits = true;
    if (q.n_spec > 0) {
      ids.assign(r.all_tokens.begin() + q.start, r.all_tokens.end());
      ids.insert(ids.end(), r.spec->proposal.begin(), r.spec->proposal.begin() + q.n_spec);
      TF_ASSERT(int32_t(ids.size()) == q.n_new, "sequence {}: {} tokens scheduled, {} to run", q.id, q.n_new, ids.size());
      c.ids = ids.data();
      c.all_logits = true;
    }
    bb.add(c);  // copies the ids
  }
  return bb.take();
}

// Greedy rows need only the argmax: when every row of the step is plain greedy, it is taken
// where the logits live and only the ids come back (4 bytes per row instead of n_vocab
// floats); the same ids as the host sampler's (both: lowest id among equal maxima). Rows
// that need nothing from the host but a uniform (temperature, top-k/p, min-p; no penalty, no
// logprobs, no proposals to verify) are drawn there too when the backend can (sample_rows);
// the uniform comes from the request's own RNG, as the host sampler would draw it. The ids
// start on their way to the host (copy_ids_async into `slot`) and are read by finish_step.
bool Engine::Impl::launch_results(const ScheduleOutput& so, const TensorView& logits, int slot) {
  bool all_plain_greedy = true, all_device = true;
  for (const ScheduledSeq& q : so.seqs) {
    const RequestState& r = state(q.id);
    if (scores_prompt_rows(r, q)) all_plain_greedy = all_device = false;  // every row to the host
    if (!q.samples) continue;
    const SamplingParams& p = r.params;
    all_plain_greedy &= plain_greedy(p);
    all_device &= !needs_host_row(p) && (q.n_spec == 0 || p.greedy());
  }
  const bool ids_ready =
      logits.shape[0] > 0 && (all_plain_greedy || (all_device && backend->device() != Device::Host));
  if (!ids_ready) {
    logits_host.resize(size_t(logits.numel()));
    if (!logits_host.empty()) backend->copy_to_host(logits, logits_host.data());  // none: a step of prefill chunks only
    return false;
  }
  if (!ids_dev.data || ids_dev.numel() < logits.shape[0]) {
    if (ids_dev.data) backend->release(ids_dev);
    ids_dev = backend->alloc(DType::I32, {std::max<int64_t>(logits.shape[0], opt.max_seqs)});
  }
  TensorView ids = ids_dev;
  ids.shape[0] = logits.shape[0];
  if (all_plain_greedy) {
    backend->argmax_rows(logits, ids);
  } else {
    std::vector<Backend::SampleParams> sp;
    for (const ScheduledSeq& q : so.seqs) {
      if (!q.samples) continue;
      RequestState& r = state(q.id);
      const SamplingParams& p = r.params;
      for (int32_t i = 0; i <= q.n_spec; ++i)  // proposals only with greedy here: argmax rows
        sp.push_back({.temperature = p.greedy() ? 0.0f : p.temperature, .top_k = p.top_k, .top_p = p.top_p,
                      .min_p = p.min_p, .u = p.greedy() ? 0.0f : float(r.sampler->draw_uniform())});
    }
    const bool sampled = backend->sample_rows(logits, sp, ids);
    TF_ASSERT(sampled, "device backend {} has no sampling kernel", backend->name());
  }
  backend->copy_ids_async(ids, slot);
  return true;
}

void Engine::Impl::emit_sampled(RequestState& r, int32_t row, bool ids_ready, RequestOutput& o) {
  if (ids_ready) return on_token(r, ids_host[size_t(row)], o);
  const int64_t n_vocab = model->config().n_vocab;
  std::span<float> lg(logits_host.data() + int64_t(row) * n_vocab, size_t(n_vocab));
  // Logprobs are of the raw distribution, so they are read before the sampler penalises the
  // row in place.
  std::vector<float> raw;
  if (r.params.logprobs >= 0) raw.assign(lg.begin(), lg.end());
  if (r.constraint) r.constraint->mask(lg);
  const int32_t token = r.sampler->sample(lg, r.all_tokens);
  if (r.constraint) r.constraint->accept(token);
  if (r.params.logprobs >= 0) o.logprobs.push_back(sampled_logprobs(raw, token, r.params.logprobs));
  on_token(r, token, o);
}

Engine::Impl::LaunchedStep Engine::Impl::launch_step(ScheduleOutput so, const DeviceTokenIds* ids,
                                                     Clock::time_point t0) {
  LaunchedStep s;
  s.so = std::move(so);
  s.t0 = t0;
  for (const ScheduledSeq& q : s.so.seqs) {  // a first schedule starts after the cached prefix
    RequestState& r = state(q.id);
    if (r.n_cached_prompt < 0) r.n_cached_prompt = q.start;
  }
  s.slot = ids_slot;
  ids_slot ^= 1;
  const Batch batch = build_batch(s.so);
  const auto t1 = Clock::now();
  const TensorView logits =
      ids ? run_forward_taking_ids(*model, *backend, batch, *ids) : run_forward(*model, *backend, batch);
  const auto t2 = Clock::now();
  s.ids_ready = launch_results(s.so, logits, s.slot);
  const auto t3 = Clock::now();
  auto secs = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  schedule_s += secs(t1 - t0);
  launch_s += secs((s.ids_ready ? t3 : t2) - t1);
  if (!s.ids_ready) wait_s += secs(t3 - t2);  // the logits came to the host
  return s;
}

bool Engine::Impl::overlap_on() const {
  const int o = opt.kernels.overlap_steps;
  return o > 0 || (o < 0 && backend->launches_async());
}

// The step after `cur` may go before cur's ids are read when nothing in it depends on them
// but the token ids themselves: cur is all decodes of device-sampled rows, every running
// sequence is among them and none is waiting (the next schedule is the same sequences, one
// token each, less any it preempts: a step that preempts admits nobody), and none can reach
// its length limit with cur's token. No proposer: proposals read the tokens.
bool Engine::Impl::can_overlap(const LaunchedStep& cur) const {
  if (!overlap_on() || !cur.ids_ready || proposer || opt.tensor_parallel != 1) return false;
  if (sched->n_waiting() > 0 || size_t(sched->n_running()) != cur.so.seqs.size()) return false;
  for (const ScheduledSeq& q : cur.so.seqs) {
    if (!q.samples || q.n_new != 1 || q.n_spec != 0) return false;
    auto it = requests.find(q.id);
    if (it == requests.end() || it->second.finished) return false;
    if (int32_t(it->second.all_tokens.size()) + 1 >= it->second.max_len) return false;
  }
  return true;
}

// Commits `cur` with a placeholder for each sequence's new token (the scheduler counts tokens;
// the placeholder is never computed: cur's own inputs are the last computed tokens), then
// schedules and launches the next step (none when that schedule preempted every sequence),
// whose batch takes those tokens from the device. finish_step puts the real tokens in place
// before anything reads them on the host.
std::optional<Engine::Impl::LaunchedStep> Engine::Impl::launch_overlapped(LaunchedStep& cur) {
  const auto t0 = Clock::now();
  std::vector<int64_t> sampled;
  for (const ScheduledSeq& q : cur.so.seqs) {
    state(q.id).all_tokens.push_back(kPlaceholderToken);
    sampled.push_back(q.id);
  }
  sched->commit(cur.so, sampled);
  cur.committed = true;
  ScheduleOutput next = sched->schedule();
  DeviceTokenIds ids{.ids = ids_dev, .rows = {}};
  size_t row = 0;
  for (const ScheduledSeq& q : next.seqs) {  // cur's sequences in cur's order, less the preempted
    while (row < cur.so.seqs.size() && cur.so.seqs[row].id != q.id) ++row;
    TF_ASSERT(row < cur.so.seqs.size() && q.n_new == 1 && q.samples && q.n_spec == 0,
              "overlapped step: sequence {} was not a decode of the step before", q.id);
    ids.rows.push_back(int32_t(row));
  }
  if (next.seqs.empty()) return std::nullopt;  // everything was preempted: nothing to launch
  ++n_overlapped_steps;
  return launch_step(std::move(next), &ids, t0);
}

void Engine::Impl::finish_step(const LaunchedStep& s, std::vector<RequestOutput>& outs) {
  const auto t2 = Clock::now();
  int32_t n_rows = 0;
  for (const ScheduledSeq& q : s.so.seqs)
    if (q.samples) n_rows += 1 + q.n_spec;
  if (s.ids_ready) {
    const int32_t* ids = backend->ids_copied(s.slot);
    ids_host.assign(ids, ids + n_rows);
  }
  const auto t3 = Clock::now();

  std::vector<int64_t> sampled;
  std::vector<SpecOutcome> spec;
  const size_t first_out = outs.size();
  int32_t row = 0;  // logits rows: one per sampling sequence, 1 + n_spec per verifying one
  for (const ScheduledSeq& q : s.so.seqs) {
    auto it = requests.find(q.id);
    const bool all_rows = it != requests.end() && scores_prompt_rows(it->second, q);
    if (!q.samples && !all_rows) continue;
    // Finished (or aborted, or released) while this step ran after an overlapped launch.
    if (it == requests.end() || it->second.finished) {
      row += all_rows ? q.n_new : 1 + q.n_spec;
      continue;
    }
    RequestState& r = it->second;
    if (all_rows) {  // a row per position; the sampling row, if any, is the last
      take_prompt_logprobs(r, q, row);
      row += q.n_new - 1;
      if (!q.samples) {
        ++row;
        continue;
      }
    }
    if (r.params.max_tokens == 0) {  // the prompt was all it asked for
      RequestOutput o;
      o.id = r.id;
      o.prompt_logprobs = std::move(r.prompt_logprobs);
      o.n_cached_prompt_tokens = r.n_cached_prompt;
      finish(r, FinishReason::Length, o);
      ++row;
      outs.push_back(std::move(o));
      continue;
    }
    if (s.committed) {
      TF_ASSERT(!r.all_tokens.empty() && r.all_tokens.back() == kPlaceholderToken,
                "request {}: no placeholder for its overlapped token", r.id);
      r.all_tokens.pop_back();
    }
    RequestOutput o;
    o.id = r.id;
    if (q.n_spec > 0) spec.push_back({.id = q.id, .n_accepted = emit_verified(r, q, row, s.ids_ready, o)});
    else emit_sampled(r, row, s.ids_ready, o);
    row += 1 + q.n_spec;
    sampled.push_back(q.id);
    outs.push_back(std::move(o));
  }
  if (!s.committed) sched->commit(s.so, sampled, spec);
  for (size_t i = first_out; i < outs.size(); ++i) {
    const RequestOutput& o = outs[i];
    if (!o.finished || o.finish_reason == FinishReason::Abort) continue;
    sched->remove(o.id);
    if (proposer) proposer->release(o.id);
  }
  const auto t4 = Clock::now();
  auto secs = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  if (proposer) {
    int64_t n_emitted = 0;
    for (size_t i = first_out; i < outs.size(); ++i) n_emitted += int64_t(outs[i].new_token_ids.size());
    calibrate(s.so, secs(t4 - s.t0), n_emitted);
  }
  ++n_steps;
  wait_s += secs(t3 - t2);
  output_s += secs(t4 - t3);
}

std::vector<RequestOutput> Engine::Impl::step() {
  std::vector<RequestOutput> outs = std::move(pending);
  pending.clear();
  if (!inflight) {
    const auto t0 = Clock::now();
    if (proposer) propose();
    ScheduleOutput so = sched->schedule();
    if (proposer)
      for (int64_t v : so.preempted) proposer->release(v);
    if (so.seqs.empty()) {
      // Nothing fits: only possible if every sequence waits for blocks held by nobody, which
      // the add() checks rule out; fail loudly rather than spin.
      TF_ASSERT(sched->n_waiting() == 0 || sched->n_running() > 0 || !outs.empty(),
                "scheduler made no progress with {} waiting sequences", sched->n_waiting());
      return outs;
    }
    inflight = launch_step(std::move(so), nullptr, t0);
  }
  LaunchedStep cur = std::move(*inflight);
  inflight.reset();
  if (can_overlap(cur)) inflight = launch_overlapped(cur);
  finish_step(cur, outs);
  return outs;
}

void Engine::Impl::on_token(RequestState& r, int32_t token, RequestOutput& o) {
  if (r.output.empty()) {
    r.first_token = Clock::now();
    o.n_cached_prompt_tokens = r.n_cached_prompt;
    o.prompt_logprobs = std::move(r.prompt_logprobs);
  }
  r.output.push_back(token);
  r.all_tokens.push_back(token);
  o.new_token_ids.push_back(token);
  const auto& eos = model->config().eos_ids;
  const bool is_eos = !r.params.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end();
  if (!is_eos) o.text += r.stop->push(r.decoder->push(token));  // a verification emits several tokens
  if (r.stop->stopped()) return finish(r, FinishReason::Stop, o);
  if (is_eos) return finish(r, FinishReason::Stop, o);
  if (int32_t(r.all_tokens.size()) >= r.max_len) return finish(r, FinishReason::Length, o);
}

void Engine::Impl::finish(RequestState& r, FinishReason why, RequestOutput& o) {
  if (!r.stop->stopped()) {
    o.text += r.stop->push(r.decoder->flush());
    if (!r.stop->stopped()) o.text += r.stop->flush();
  }
  r.finished = true;
  r.finish_reason = why;
  r.finish = Clock::now();
  o.finished = true;
  o.finish_reason = why;
}

void Engine::Impl::abort(RequestId id) {
  auto it = requests.find(id);
  if (it == requests.end() || it->second.finished) return;
  sched->remove(id);  // frees its KV blocks now
  if (proposer) proposer->release(id);
  RequestOutput o;
  o.id = id;
  RequestState& r = it->second;
  r.finished = true;
  r.finish_reason = FinishReason::Abort;
  r.finish = Clock::now();
  o.finished = true;
  o.finish_reason = FinishReason::Abort;
  pending.push_back(std::move(o));
}

// The trie holds every id the tokenizer spells with bytes, special tokens left out (they never
// belong to the JSON text); the model's EOS ids end it. A schema's compiled form and masks are
// kept for the next requests with the same schema and texts around it (the last 8: at most
// 8 x 256 kept masks, 32 MB for a 128k vocabulary); a regex's DFA and masks likewise.
std::unique_ptr<TokenConstraint> Engine::Impl::make_constraint(const SamplingParams& p) {
  if (p.output_format == OutputFormat::Text) return nullptr;
  if (!token_trie) {
    const ModelConfig& cfg = model->config();
    ConstraintVocab v;
    v.bytes.resize(size_t(cfg.n_vocab));
    for (int32_t id = 0; id < tokenizer->n_vocab(); ++id)
      if (!tokenizer->is_special(id)) v.bytes[size_t(id)] = tokenizer->token_bytes(id);
    for (int32_t id : cfg.eos_ids)
      if (id >= 0 && id < cfg.n_vocab) v.eos.push_back(id);
    token_trie = std::make_shared<const TokenTrie>(std::move(v));
    json_masks = std::make_shared<MaskSet<JsonMachine>>(token_trie);
  }
  if (p.output_format == OutputFormat::JsonObject)
    return std::make_unique<MachineConstraint<JsonMachine>>(json_masks, JsonMachine{});
  // The last 8 compiled forms by their text: found, or made (after dropping all when full).
  auto cached = [](auto& cache, const std::string& key, auto make) -> auto& {
    auto it = cache.find(key);
    if (it == cache.end()) {
      if (cache.size() >= 8) cache.clear();
      it = cache.emplace(key, make()).first;
    }
    return it->second;
  };
  if (p.output_format == OutputFormat::Regex) {
    const RegexMasks& c = cached(regex_masks, p.regex, [&] {
      return RegexMasks{std::make_shared<const RegexDfa>(compile_regex(p.regex, "regex", RegexUse::Text)),
                        std::make_shared<MaskSet<RegexMachine>>(token_trie)};
    });
    return std::make_unique<MachineConstraint<RegexMachine>>(c.masks, RegexMachine(*c.dfa), c.dfa);
  }
  if (p.json_after.empty() && !(p.json_before.empty() && p.json_between.empty()))
    fail("json_before or json_between is set but json_after is empty: a wrapped JSON value needs a text after it");
  const std::string key = p.json_schema + '\0' + p.json_before + '\0' + p.json_after + '\0' + p.json_between;
  const SchemaMasks& c = cached(schema_masks, key, [&] {
    return SchemaMasks{std::make_shared<const JsonSchema>(wrap_json_schema(
                           compile_json_schema(p.json_schema, "json_schema"), p.json_before, p.json_after,
                           p.json_between)),
                       std::make_shared<MaskSet<SchemaMachine>>(token_trie)};
  });
  return std::make_unique<MachineConstraint<SchemaMachine>>(c.masks, SchemaMachine(*c.schema), c.schema);
}

RequestState& Engine::Impl::state(RequestId id) {
  auto it = requests.find(id);
  if (it == requests.end()) fail("unknown request id {}", id);
  return it->second;
}
const RequestState& Engine::Impl::state(RequestId id) const {
  auto it = requests.find(id);
  if (it == requests.end()) fail("unknown request id {}", id);
  return it->second;
}

std::vector<float> Engine::Impl::score(const std::vector<int32_t>& ids, bool all_positions) {
  const ModelConfig& cfg = model->config();
  if (ids.empty()) fail("cannot score an empty sequence");
  if (int64_t(ids.size()) > cfg.max_position)
    fail("the sequence has {} tokens but the model's context is {} tokens", ids.size(), cfg.max_position);
  for (int32_t id : ids)
    if (id < 0 || id >= cfg.n_vocab) fail("token id {} is outside the vocabulary [0, {})", id, cfg.n_vocab);
  constexpr int64_t kScoreSeq = -1;  // never a request id
  // Chunk by chunk, each marked computed once run, so sliding-window groups free the blocks
  // their window has passed as they would for a request.
  std::vector<float> out;
  const int32_t n = int32_t(ids.size());
  try {
    for (int32_t start = 0; start < n; start += opt.max_batch_tokens) {
      const int32_t len = std::min(opt.max_batch_tokens, n - start);
      if (!kv->grow(kScoreSeq, start + len)) fail("not enough free KV blocks to score {} tokens", ids.size());
      const std::span<const std::vector<int32_t>> tables = kv->tables(kScoreSeq);
      BatchBuilder bb(kv->block_size(), int32_t(tables[0].size()), kv->n_groups());
      bb.add(SeqChunk{.ids = ids.data() + start, .n_ids = len, .start_pos = start, .tables = tables,
                      .want_logits = all_positions || start + len == n, .all_logits = all_positions});
      const TensorView logits = run_forward(*model, *backend, bb.take());
      const size_t old = out.size();
      out.resize(old + size_t(logits.numel()));
      backend->copy_to_host(logits, out.data() + old);
      kv->on_computed(kScoreSeq, start + len);
    }
  } catch (...) {
    kv->free(kScoreSeq);
    throw;
  }
  kv->free(kScoreSeq);
  return out;
}

// ---- public wrapper ---------------------------------------------------------------------------

Engine::Engine(const EngineOptions& opt) : impl_(std::make_unique<Impl>(opt)) {}
Engine::~Engine() = default;
RequestId Engine::add_request(GenerateRequest req) { return impl_->add(std::move(req)); }
std::vector<RequestOutput> Engine::step() { return impl_->step(); }
bool Engine::has_unfinished() const {
  return !impl_->sched->empty() || !impl_->pending.empty() || impl_->inflight.has_value();
}
void Engine::abort(RequestId id) { impl_->abort(id); }
void Engine::set_kernel_options(const KernelOptions& k) {
  impl_->opt.kernels = k;
  impl_->backend->set_options(backend_options(k));
}
std::vector<std::string> Engine::tuning_report() const { return impl_->backend->tuning_report(); }
double Engine::device_copy_bandwidth_gb_s(int64_t bytes) { return impl_->backend->measure_copy_bandwidth(bytes); }
std::vector<std::string> Engine::weight_copy_names() const {
  std::vector<std::string> names;
  for (const WeightCopyInfo& c : impl_->model->weight_copies()) names.push_back(c.name);
  return names;
}
void Engine::pin_weight_copy(int index) {
  const int n = int(impl_->model->weight_copies().size());
  if (index >= n) fail("weight copy {} of {}", index, n);
  impl_->model->set_copy_ranges(index < 0 ? impl_->copy_policy : std::vector<CopyRange>{{.min_tokens = 1, .copy = index}});
}
std::vector<std::string> Engine::weight_copy_report() const {
  return copy_report(*impl_->model, impl_->copy_timings);
}
std::vector<float> Engine::score(const std::vector<int32_t>& ids, bool all_positions) {
  return impl_->score(ids, all_positions);
}
const std::vector<int32_t>& Engine::prompt_ids(RequestId id) const { return impl_->state(id).prompt; }
const std::vector<int32_t>& Engine::output_ids(RequestId id) const { return impl_->state(id).output; }
void Engine::release(RequestId id) {
  if (impl_->requests.count(id) && impl_->state(id).finished) impl_->requests.erase(id);
}
const Tokenizer& Engine::tokenizer() const { return *impl_->tokenizer; }
const ModelConfig& Engine::config() const { return impl_->model->config(); }
Model& Engine::model() { return *impl_->model; }
EngineMetrics Engine::metrics() const {
  const SchedulerStats s = impl_->sched->stats();
  return EngineMetrics{.n_running = s.n_running, .n_waiting = s.n_waiting, .n_preemptions = s.n_preemptions,
                       .kv_blocks_total = s.n_blocks_total, .kv_blocks_used = s.n_blocks_used,
                       .kv_blocks_free = s.n_blocks_free, .kv_blocks_cached = s.n_blocks_cached,
                       .prefix_query_tokens = s.n_prefix_query_tokens,
                       .prefix_hit_tokens = s.n_prefix_hit_tokens,
                       .n_steps = impl_->n_steps,
                       .schedule_s = impl_->schedule_s,
                       .launch_s = impl_->launch_s,
                       .wait_s = impl_->wait_s,
                       .output_s = impl_->output_s,
                       .n_overlapped_steps = impl_->n_overlapped_steps,
                       .spec_drafts = impl_->spec_drafts,
                       .spec_draft_tokens = impl_->spec_draft_tokens,
                       .spec_accepted_tokens = impl_->spec_accepted,
                       .spec_kv_blocks_used = impl_->proposer ? impl_->proposer->kv_blocks_used() : 0,
                       .spec_policy_steps = impl_->spec_policy_steps,
                       .spec_quiet_steps = impl_->spec_quiet_steps};
}
std::string Engine::check_invariants() const {
  if (std::string e = impl_->sched->check_invariants(); !e.empty()) return e;
  return impl_->proposer ? impl_->proposer->check_invariants() : "";
}
const SpecCostModel& Engine::spec_cost_model() const { return impl_->spec_costs; }
SpecCostModel Engine::measure_spec_cost_model(const std::vector<int32_t>& batches, const std::vector<int32_t>& ks) {
  return impl_->measure_spec_costs(CostGrid{.batches = batches, .ks = ks});
}
void Engine::set_spec_cost_model(const SpecCostModel& m) { impl_->set_spec_costs(m); }
void Engine::set_spec_mode(const SpecMode& m) { impl_->set_spec_mode(m); }
int64_t Engine::kv_bytes_per_token() const { return tf::kv_bytes_per_token(impl_->backend->kv_spec()); }
int32_t Engine::kv_block_size() const { return impl_->kv->block_size(); }
// Cached prefix blocks count as free here: nobody uses them and allocation evicts them.
int32_t Engine::n_kv_blocks_free() const { return impl_->kv->pool().n_blocks_available(); }
int32_t Engine::n_kv_blocks_total() const { return impl_->kv->pool().n_blocks_total(); }

RequestStats Engine::stats(RequestId id) const {
  const RequestState& r = impl_->state(id);
  RequestStats s;
  s.n_prompt_tokens = int32_t(r.prompt.size());
  s.n_output_tokens = int32_t(r.output.size());
  s.n_cached_prompt_tokens = std::max(r.n_cached_prompt, 0);
  if (!r.output.empty()) {
    s.ttft_s = std::chrono::duration<double>(r.first_token - r.arrival).count();
    const auto end = r.finished ? r.finish : Clock::now();
    s.total_s = std::chrono::duration<double>(end - r.arrival).count();
    const double decode_s = s.total_s - s.ttft_s;
    s.decode_tokens_per_s = s.n_output_tokens > 1 && decode_s > 0 ? (s.n_output_tokens - 1) / decode_s : 0;
  }
  if (r.spec) {
    s.n_spec_drafts = r.spec->n_drafts;
    s.n_spec_draft_tokens = r.spec->n_draft_tokens;
    s.n_spec_accepted_tokens = r.spec->n_accepted;
  }
  return s;
}

}  // namespace tf

#include "bench/throughput.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "bench/bench_util.h"
#include "model/config.h"

namespace tf::bench {

ThroughputResult run_throughput(Engine& engine, const ThroughputParams& p) {
  using Clock = std::chrono::steady_clock;
  const int64_t n_vocab = engine.config().n_vocab;
  Rng rng(p.seed);
  std::vector<RequestId> ids;
  std::vector<GenerateRequest> reqs;
  for (int32_t b = 0; b < p.batch; ++b) {
    GenerateRequest r;
    r.prompt_ids = p.prompts ? (*p.prompts)[size_t(b) % p.prompts->size()] : random_prompt(rng, n_vocab, p.prompt_len);
    r.sampling = SamplingParams{.temperature = 0, .max_tokens = p.gen_len, .ignore_eos = true};
    reqs.push_back(std::move(r));
  }
  const auto t0 = Clock::now();
  size_t next = 0;
  auto admit = [&] {  // concurrent: all now; sequential: the next one when the engine is idle
    while (next < reqs.size() && (!p.sequential || !engine.has_unfinished()))
      ids.push_back(engine.add_request(reqs[next++]));
  };
  std::map<RequestId, Clock::time_point> last;
  std::vector<double> ttft, itl;
  Clock::time_point all_first{};
  int64_t n_decoded = 0, n_new = 0;
  int32_t peak_blocks = 0;
  EngineMetrics at_decode{};  // metrics when every request had its first token
  admit();
  while (engine.has_unfinished()) {
    const auto outs = engine.step();
    peak_blocks = std::max(peak_blocks, engine.metrics().kv_blocks_used);
    const auto now = Clock::now();
    for (const RequestOutput& o : outs) {
      if (o.new_token_ids.empty()) continue;
      auto it = last.find(o.id);
      if (it == last.end()) {
        ttft.push_back(std::chrono::duration<double>(now - t0).count());
        last[o.id] = now;
        if (int32_t(last.size()) == p.batch) {
          all_first = now;
          at_decode = engine.metrics();
        }
      } else {
        itl.push_back(std::chrono::duration<double>(now - it->second).count());
        it->second = now;
        if (all_first != Clock::time_point{}) n_decoded += int64_t(o.new_token_ids.size());
      }
      n_new += int64_t(o.new_token_ids.size());
    }
    admit();
  }
  const auto t_end = Clock::now();
  const EngineMetrics m = engine.metrics();
  for (RequestId id : ids) engine.release(id);
  ThroughputResult r;
  r.params = p;
  r.prefill_s = std::chrono::duration<double>(all_first - t0).count();
  r.decode_s = std::chrono::duration<double>(t_end - all_first).count();
  r.prefill_tokens_per_s = double(p.batch) * p.prompt_len / r.prefill_s;
  r.decode_tokens_per_s = r.decode_s > 0 ? double(n_decoded) / r.decode_s : 0;
  r.ttft_p50_s = percentile(ttft, 0.5);
  r.ttft_p99_s = percentile(ttft, 0.99);
  r.itl_p50_s = percentile(itl, 0.5);
  r.itl_p99_s = percentile(itl, 0.99);
  r.total_s = std::chrono::duration<double>(t_end - t0).count();
  r.total_tokens_per_s = double(n_new) / r.total_s;
  r.peak_kv_blocks_used = peak_blocks;
  const double steps = double(std::max<int64_t>(1, m.n_steps - at_decode.n_steps));
  r.step_schedule_ms = 1e3 * (m.schedule_s - at_decode.schedule_s) / steps;
  r.step_launch_ms = 1e3 * (m.launch_s - at_decode.launch_s) / steps;
  r.step_wait_ms = 1e3 * (m.wait_s - at_decode.wait_s) / steps;
  r.step_output_ms = 1e3 * (m.output_s - at_decode.output_s) / steps;
  r.decode_steps = m.n_steps - at_decode.n_steps;
  r.overlapped_steps = m.n_overlapped_steps - at_decode.n_overlapped_steps;
  r.decode_tokens = n_decoded;
  r.spec_drafts = m.spec_drafts - at_decode.spec_drafts;
  r.spec_draft_tokens = m.spec_draft_tokens - at_decode.spec_draft_tokens;
  r.spec_accepted_tokens = m.spec_accepted_tokens - at_decode.spec_accepted_tokens;
  r.spec_quiet_steps = m.spec_quiet_steps - at_decode.spec_quiet_steps;
  return r;
}

}  // namespace tf::bench

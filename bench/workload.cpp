#include "bench/workload.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "bench/bench_util.h"
#include "model/config.h"

namespace tf::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Standard normal from two uniforms (Box-Muller); our own Rng keeps it platform-independent.
double normal(Rng& rng) {
  const double u1 = std::max(rng.uniform(), 1e-300), u2 = rng.uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace

std::vector<WorkloadRequest> make_workload(const WorkloadParams& p) {
  Rng rng(p.seed);
  auto draw = [&](double median) {
    const double x = median * std::exp(p.sigma * normal(rng));
    return int32_t(std::clamp(std::lround(x), 8L, long(p.max_len)));
  };
  std::vector<WorkloadRequest> out;
  for (int32_t i = 0; i < p.n_requests; ++i) {
    WorkloadRequest r;
    r.prompt_len = draw(p.prompt_median);
    r.output_len = draw(p.output_median);
    out.push_back(r);
  }
  return out;
}

WorkloadResult run_workload(Engine& engine, const std::vector<WorkloadRequest>& reqs, int32_t max_batch,
                            bool static_batching, uint64_t seed) {
  const int64_t n_vocab = engine.config().n_vocab;
  Rng rng(seed);
  struct Live {
    int32_t want = 0;        // real output tokens
    int32_t got = 0;
    Clock::time_point last;
    size_t index = 0;
  };
  WorkloadResult r;
  std::vector<double> itl, ttft;
  const auto t0 = Clock::now();
  std::map<RequestId, Live> live;
  auto run_until_idle = [&] {
    while (engine.has_unfinished()) {
      const auto outs = engine.step();
      r.peak_kv_blocks_used = std::max(r.peak_kv_blocks_used, engine.metrics().kv_blocks_used);
      const auto now = Clock::now();
      for (const RequestOutput& o : outs) {
        auto it = live.find(o.id);
        if (it == live.end()) continue;
        Live& l = it->second;
        for (size_t k = 0; k < o.new_token_ids.size(); ++k) {
          // Static batching: tokens past a request's real length are padding, not counted.
          if (l.got >= l.want) break;
          if (l.got == 0)
            ttft.push_back(std::chrono::duration<double>(now - t0).count());
          else
            itl.push_back(std::chrono::duration<double>(now - l.last).count());
          ++l.got;
          ++r.useful_tokens;
          l.last = now;
        }
        if (o.finished) {
          engine.release(o.id);
          live.erase(it);
        }
      }
    }
  };
  if (!static_batching) {
    for (size_t i = 0; i < reqs.size(); ++i) {
      GenerateRequest g;
      g.prompt_ids = random_prompt(rng, n_vocab, reqs[i].prompt_len);
      g.sampling = SamplingParams{.temperature = 0, .max_tokens = reqs[i].output_len, .ignore_eos = true};
      live[engine.add_request(std::move(g))] = Live{.want = reqs[i].output_len, .index = i};
    }
    run_until_idle();
  } else {
    for (size_t g0 = 0; g0 < reqs.size(); g0 += size_t(max_batch)) {
      const size_t g1 = std::min(reqs.size(), g0 + size_t(max_batch));
      int32_t pad_prompt = 0, pad_output = 0;
      for (size_t i = g0; i < g1; ++i) {
        pad_prompt = std::max(pad_prompt, reqs[i].prompt_len);
        pad_output = std::max(pad_output, reqs[i].output_len);
      }
      for (size_t i = g0; i < g1; ++i) {
        GenerateRequest g;
        g.prompt_ids = random_prompt(rng, n_vocab, pad_prompt);  // padded to the group's longest prompt
        g.sampling = SamplingParams{.temperature = 0, .max_tokens = pad_output, .ignore_eos = true};
        live[engine.add_request(std::move(g))] = Live{.want = reqs[i].output_len, .index = i};
      }
      run_until_idle();  // the whole group finishes before the next starts
    }
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.tokens_per_s = double(r.useful_tokens) / r.seconds;
  r.itl_p50_s = percentile(itl, 0.5);
  r.itl_p99_s = percentile(itl, 0.99);
  r.ttft_p50_s = percentile(ttft, 0.5);
  r.ttft_p99_s = percentile(ttft, 0.99);
  return r;
}

}  // namespace tf::bench

// Speculation benchmark. Per batch size, `reps` rounds of three runs in turn (plain, fixed k,
// adaptive) on the same engine, so that a shared machine's load hits each mode alike, after
// one short unreported run of each mode (per-shape kernel choices and CUDA Graph recordings
// happen there, not in the runs reported); each run decodes gen_len tokens for every request
// (greedy, EOS ignored), the prompts cycled over the batch. reps 0: the step costs only. Reported per mode: decode tokens/s (after every request's first token) as the
// median and the range over the rounds, acceptance rate and mean accepted length; the
// achieved speedup (median over median) beside the one predicted from the fixed-k runs'
// measured tokens per step and proposals per step and the measured step costs:
//   predicted = tokens per step x T_v(B, 0) / (T_v(B, k') + k' T_d(B)),  k' = proposals per step
// (a draft model runs k' steps per verification; prompt lookup has T_d = 0 and its host time
// is not in the prediction). The step costs are the engine's measurement over the batch sizes
// benched and k in {0, 1, 3, 7, --spec-k} (verifying 1, 2, 4, 8 and k + 1 tokens per
// sequence), printed with the speedup they imply at acceptance rates 0.6 and 0.8; the
// adaptive runs use this cost model.
#include "tools/bench_spec.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench/throughput.h"
#include "core/error.h"
#include "core/json_bounded.h"
#include "model/tokenizer/tokenizer.h"
#include "spec/spec_policy.h"
#include "twofold/engine.h"

namespace tf::cli {
namespace {

std::vector<std::vector<int32_t>> read_prompts(const std::string& path, const Tokenizer& tok) {
  if (path.empty()) fail("bench --spec needs --prompts-file (JSONL, one {{\"prompt\": \"...\"}} per line)");
  std::ifstream in(path);
  if (!in) fail("cannot open prompts file {}", path);
  std::vector<std::vector<int32_t>> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", path, n);
    const nlohmann::json j = parse_json_bounded(line, where);
    if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string())
      fail("{}: expected an object with a string field 'prompt'", where);
    out.push_back(tok.encode(j["prompt"].get<std::string>()));
    if (out.back().empty()) fail("{}: the prompt is empty", where);
  }
  if (out.empty()) fail("prompts file {} has no prompts", path);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Expected tokens per step with k proposals at iid acceptance rate a: 1 + a + ... + a^k.
double expected_tokens(double a, int32_t k) {
  double t = 1, u = 1;
  for (int32_t i = 0; i < k; ++i) t += (u *= a);
  return t;
}

struct ModeRuns {
  std::vector<double> tokens_per_s;
  int64_t steps = 0, tokens = 0, drafts = 0, draft_tokens = 0, accepted = 0, quiet = 0;
  // Milliseconds summed over the decode steps: schedule (proposals included), launch (the
  // forward's host side; all of it on a host backend), wait (the results), output.
  double schedule_ms = 0, launch_ms = 0, wait_ms = 0, output_ms = 0;
  void add(const bench::ThroughputResult& r) {
    tokens_per_s.push_back(r.decode_tokens_per_s);
    schedule_ms += r.step_schedule_ms * double(r.decode_steps);
    launch_ms += r.step_launch_ms * double(r.decode_steps);
    wait_ms += r.step_wait_ms * double(r.decode_steps);
    output_ms += r.step_output_ms * double(r.decode_steps);
    steps += r.decode_steps;
    tokens += r.decode_tokens;
    drafts += r.spec_drafts;
    draft_tokens += r.spec_draft_tokens;
    accepted += r.spec_accepted_tokens;
    quiet += r.spec_quiet_steps;
  }
  std::vector<double> step_ms() const {
    const double n = double(std::max<int64_t>(1, steps));
    return {schedule_ms / n, launch_ms / n, wait_ms / n, output_ms / n};
  }
  std::string step_breakdown() const {
    const std::vector<double> t = step_ms();
    return fmt::format("{:.3f} / {:.3f} / {:.3f} / {:.3f}", t[0], t[1], t[2], t[3]);
  }
  double acceptance() const { return draft_tokens > 0 ? double(accepted) / double(draft_tokens) : 0; }
  double mean_accepted_length() const { return drafts > 0 ? 1.0 + double(accepted) / double(drafts) : 0; }
  nlohmann::json to_json() const {
    return {{"decode_tokens_per_s", tokens_per_s}, {"median", median(tokens_per_s)},
            {"acceptance_rate", acceptance()}, {"mean_accepted_length", mean_accepted_length()},
            {"decode_steps", steps}, {"decode_tokens", tokens}, {"drafts", drafts}, {"draft_tokens", draft_tokens},
            {"accepted_tokens", accepted}, {"quiet_steps", quiet}, {"step_ms_schedule_launch_wait_output", step_ms()}};
  }
  std::string range() const {
    const auto [lo, hi] = std::minmax_element(tokens_per_s.begin(), tokens_per_s.end());
    return fmt::format("{:.1f} ({:.1f}-{:.1f})", median(tokens_per_s), *lo, *hi);
  }
};

}  // namespace

int run_spec_bench(const SpecBenchArgs& a) {
  apply_threads(a.model.threads);
  EngineOptions eo = engine_options(a.model);
  eo.kv_memory_mb = a.kv_memory_mb;
  eo.max_batch_tokens = a.max_batch_tokens;
  eo.spec = spec_options(a.spec);
  if (eo.spec.method.empty()) fail("bench --spec: no speculation method given");
  eo.spec.adaptive = false;  // the cost model is measured below, over the benched batch sizes
  std::vector<int32_t> batches(a.batches.begin(), a.batches.end());
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  eo.max_seqs = batches.back();
  if (a.reps < 0) fail("--spec-reps must be at least 0, got {}", a.reps);
  Engine engine(eo);
  const std::vector<std::vector<int32_t>> prompts = read_prompts(a.prompts_file, engine.tokenizer());
  const int32_t k = eo.spec.k;

  std::vector<int32_t> ks = {0, 1, 3, 7, k};
  std::sort(ks.begin(), ks.end());
  ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
  const SpecCostModel costs = engine.measure_spec_cost_model(batches, ks);
  engine.set_spec_cost_model(costs);

  nlohmann::json out{{"model", a.model.dir}, {"backend", a.model.backend},
                     {"spec", {{"method", a.spec.spec}, {"k", k}, {"prompts_file", a.prompts_file},
                               {"prompts", prompts.size()}, {"gen_len", a.gen_len}, {"reps", a.reps}}},
                     {"spec_cost_model", costs.to_json()}};
  if (!a.json) {
    std::printf("speculation %s, k %d; %zu prompts from %s cycled over the batch; %d new tokens each, greedy; "
                "%d rounds of plain / fixed / adaptive, interleaved\n",
                a.spec.spec.c_str(), k, prompts.size(), a.prompts_file.c_str(), a.gen_len, a.reps);
    std::printf("\nstep time in ms (a target step where each sequence verifies k proposals, k = 0: plain; draft: one "
                "proposal step)\n%6s", "batch");
    for (int32_t kk : ks) std::printf("  %8s", fmt::format("k={}", kk).c_str());
    std::printf("  %8s\n", "draft");
    for (int32_t b : batches) {
      std::printf("%6d", b);
      for (int32_t kk : ks) std::printf("  %8.3f", 1e3 * costs.verify(b, kk));
      std::printf("  %8.3f\n", 1e3 * costs.draft(b));
    }
    std::printf("\nspeedup these costs imply at acceptance rate 0.6 / 0.8 (iid acceptance)\n%6s", "batch");
    for (int32_t kk : ks)
      if (kk > 0) std::printf("  %12s", fmt::format("k={}", kk).c_str());
    std::printf("\n");
  }
  for (int32_t b : batches) {
    nlohmann::json row{{"batch", b}};
    if (!a.json) std::printf("%6d", b);
    for (int32_t kk : ks) {
      if (kk == 0) continue;
      const double base = costs.verify(b, 0), step = costs.verify(b, kk) + kk * costs.draft(b);
      const double s6 = expected_tokens(0.6, kk) * base / step, s8 = expected_tokens(0.8, kk) * base / step;
      row["k" + std::to_string(kk)] = {s6, s8};
      if (!a.json) std::printf("  %5.2f / %4.2f", s6, s8);
    }
    out["implied_speedup"].push_back(row);
    if (!a.json) std::printf("\n");
  }
  if (a.reps == 0) {
    if (a.json) std::printf("%s\n", json_dump(out).c_str());
    return 0;
  }
  if (!a.json) {
    std::printf("\ndecode tokens/s: median (min-max) over %d rounds\n%6s  %-24s  %-24s %6s %6s %8s %9s %6s  %-24s %6s %8s\n",
                a.reps, "batch", "plain", fmt::format("fixed k={}", k).c_str(), "accept", "length", "speedup",
                "predicted", "ratio", "adaptive", "accept", "speedup");
    std::fflush(stdout);
  }
  uint64_t seed = 1;
  for (int32_t b : batches) {
    ModeRuns plain, fixed, adaptive;
    const bench::ThroughputParams tp{.batch = b, .gen_len = a.gen_len, .prompts = &prompts};
    for (int rep = 0; rep < a.reps; ++rep) {
      for (int mode = 0; mode < 3; ++mode) {
        engine.set_spec_mode(SpecMode{.enabled = mode > 0, .k = k, .adaptive = mode == 2});
        bench::ThroughputParams p = tp;
        p.seed = seed++;
        if (rep == 0) {  // warm-up: per-shape kernel choices, recordings
          p.gen_len = std::min(a.gen_len, 16);
          bench::run_throughput(engine, p);
          p.gen_len = a.gen_len;
        }
        (mode == 0 ? plain : mode == 1 ? fixed : adaptive).add(bench::run_throughput(engine, p));
      }
    }
    const double speedup = median(fixed.tokens_per_s) / median(plain.tokens_per_s);
    const double speedup_adaptive = median(adaptive.tokens_per_s) / median(plain.tokens_per_s);
    // Per sequence and step of the fixed-k runs: tokens emitted and proposals verified.
    const double seq_steps = double(std::max<int64_t>(1, fixed.steps)) * b;
    const double tokens_per_step = double(fixed.tokens) / seq_steps, k_mean = double(fixed.draft_tokens) / seq_steps;
    const double k_floor = std::floor(k_mean);  // the cost model interpolates in whole proposals
    const double t_k = costs.verify(b, int32_t(k_floor)) +
                       (k_mean - k_floor) * (costs.verify(b, int32_t(k_floor) + 1) - costs.verify(b, int32_t(k_floor)));
    const double predicted = tokens_per_step * costs.verify(b, 0) / (t_k + k_mean * costs.draft(b));
    out["spec_runs"].push_back({{"batch", b}, {"plain", plain.to_json()}, {"fixed", fixed.to_json()},
                                {"adaptive", adaptive.to_json()}, {"speedup_fixed", speedup},
                                {"speedup_adaptive", speedup_adaptive}, {"tokens_per_step_fixed", tokens_per_step},
                                {"proposals_per_step_fixed", k_mean}, {"predicted_speedup_fixed", predicted}});
    if (a.json) continue;
    std::printf("%6d  %-24s  %-24s %6.3f %6.2f %7.2fx %8.2fx %5.0f%%  %-24s %6.3f %7.2fx\n", b, plain.range().c_str(),
                fixed.range().c_str(), fixed.acceptance(), fixed.mean_accepted_length(), speedup, predicted,
                100.0 * speedup / predicted, adaptive.range().c_str(), adaptive.acceptance(), speedup_adaptive);
    std::printf("%6s  ms per step (schedule+propose / launch / wait / output): plain %s, fixed %s, adaptive %s; "
                "steps %lld / %lld / %lld (adaptive: %lld quiet)\n", "", plain.step_breakdown().c_str(),
                fixed.step_breakdown().c_str(), adaptive.step_breakdown().c_str(), (long long)plain.steps,
                (long long)fixed.steps, (long long)adaptive.steps, (long long)adaptive.quiet);
    std::fflush(stdout);
  }
  if (a.json) std::printf("%s\n", json_dump(out).c_str());
  return 0;
}

}  // namespace tf::cli

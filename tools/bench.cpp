// `twofold bench`: prefill/decode throughput over batch sizes, next to the bandwidth
// roofline (weight bytes a decode step reads / measured copy bandwidth; the embedding table,
// of which a step gathers a row a token, is not counted unless it is the tied LM head; a
// mixture of experts reads only the experts its tokens chose: bench/active_weights.h). Prints a table, or JSON.
// Per decode step: the bytes it reads (the weights it reads, plus each sequence's K/V at the
// run's mean context) per step time is the achieved bandwidth ("GB/s"); "roofline" is the
// share of the copy bandwidth the weight reads alone achieve (decode tok/s over the bound).
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "bench/active_weights.h"
#include "backend/cpu/isa.h"
#include "bench/membw.h"
#include "bench/throughput.h"
#include "bench/workload.h"
#include "tools/bench_spec.h"
#include "core/error.h"
#include "core/host_threads.h"
#include "core/huge_pages.h"
#include "core/split.h"
#include "model/arch/model.h"
#include "model/config.h"
#include "tools/commands.h"

namespace tf::cli {
namespace {

struct Args {
  ModelArgs model;
  std::string batches = "1";
  std::string prompt_lens = "128";  // comma-separated
  int gen_len = 128;
  int max_batch_tokens = 512;
  int64_t kv_memory_mb = 2048;
  bool membw = true;
  bool sequential = false;
  bool json = false;
  std::string plot;  // SVG of decode tokens/s vs batch
  std::string variants = "default";
  int workload = 0;          // requests of the static-vs-continuous workload (0: skip)
  double kv_budget_gb = 40;  // KV memory for the "max concurrent sequences" figure
  SpecArgs spec;             // --spec: the speculation benchmark instead (bench_spec.h)
  std::string prompts_file;
  int spec_reps = 3;
};

// N of a variant named "splits-N" (1 to 999), else 0.
int decode_splits_of(const std::string& name) {
  if (name.rfind("splits-", 0) != 0 || name.size() <= 7 || name.size() > 10 ||
      name.find_first_not_of("0123456789", 7) != std::string::npos)
    return 0;
  return std::stoi(name.substr(7));
}

// A precision variant: the copy of the linear weights every step uses (--weights-per-batch
// loads them), or "auto": each step the copy for its number of tokens.
bool is_precision_variant(const std::string& name) {
  return name == "stored" || name == "bf16" || name == "int8" || name == "int4" || name == "fp8" || name == "auto";
}

// Pins the copy a precision variant names (-1 for auto, and for kernel variants).
void pin_precision(Engine& engine, const std::string& variant) {
  if (!is_precision_variant(variant) || variant == "auto") return engine.pin_weight_copy(-1);
  const std::vector<std::string> names = engine.weight_copy_names();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i].substr(0, names[i].find(' ')) == variant || (variant == "stored" && names[i] == "as stored"))
      return engine.pin_weight_copy(int(i));
  fail("--variants: no '{}' copy of the weights is loaded (load it with --weights-per-batch, e.g. {}:1)", variant,
       variant);
}

// A kernel configuration by name: "default" (everything on) or one optimisation turned off;
// precision variants run with the defaults. `base`: the command's own options (--int8-activations).
KernelOptions variant_options(const std::string& name, const KernelOptions& base = {}) {
  KernelOptions k = base;
  if (name == "default" || is_precision_variant(name)) return k;
  if (name == "no-graphs") k.cuda_graphs = false;
  else if (name == "no-fusion") k.fusion = false;
  else if (name == "no-fp8-fusion") k.fp8_fusion = false;
  else if (name == "no-fp8-handoff") k.fp8_handoff = false;
  else if (name == "fp8-sums-f32") k.fp8_sums_f32 = true;
  else if (name == "no-pdl") k.pdl = false;
  else if (name == "no-pdl-timed") k.pdl_timed = false;
  else if (name == "no-gemv-timed") k.gemv_timed = false;
  // The fixed PDL orders below are measured as they are, without the timed trial of PDL
  // everywhere (pdl-all is that order already).
  else if (name == "pdl-resident") k.pdl_resident = true, k.pdl_timed = false;
  else if (name == "pdl-decode") k.pdl_decode = true, k.pdl_decode_resident = k.pdl_timed = false;
  else if (name == "no-pdl-decode-resident") k.pdl_decode_resident = k.pdl_timed = false;
  else if (name == "pdl-all") k.pdl_decode = k.pdl_resident = true;
  else if (name == "no-cublaslt") k.cublaslt = false;
  else if (name == "no-lt-split-k") k.lt_split_k = false;
  else if (name == "no-decode-mma") k.decode_mma = false;
  else if (name == "no-decode-cluster") k.decode_cluster = false;
  else if (name == "no-decode-early-keys") k.decode_early_keys = false;
  else if (name == "no-split-gemv") k.split_gemv = false;
  else if (name == "no-overlap") k.overlap_steps = 0;
  else if (name == "overlap") k.overlap_steps = -1;
  else if (name == "moe-simt") k.moe_mma = false;
  else if (const int n = decode_splits_of(name); n > 0) k.decode_splits = n;
  else if (name == "cublas") k.gemv = "cublas";
  else if (name == "gemv") k.gemv = "custom";
  else if (name == "plain-attention") k.attention_kernel = "plain";
  else if (name == "flash-attention") k.attention_kernel = "flash";
  else if (name == "profile") k.profile = true;
  else if (name == "int8-acts") k.int8_activations = true;
  else if (name == "bf16-acts") k.bf16_activations = true;
  else
    fail("--variants: unknown variant '{}' (expected default, no-graphs, no-fusion, no-fp8-fusion, no-fp8-handoff, fp8-sums-f32, no-pdl, no-pdl-timed, no-gemv-timed, pdl-resident, pdl-decode, no-pdl-decode-resident, pdl-all, no-cublaslt, no-lt-split-k, no-decode-mma, "
         "no-decode-cluster, no-decode-early-keys, no-split-gemv, no-overlap, overlap, moe-simt, splits-N, cublas, gemv, plain-attention, flash-attention, profile, int8-acts, bf16-acts; or a precision: stored, bf16, int8, int4, "
         "fp8, auto)", name);
  return k;
}

std::vector<int> parse_list(const std::string& s, const char* flag) {
  const std::vector<int64_t> v = parse_int_list(s, flag, 1, INT32_MAX);
  return {v.begin(), v.end()};
}

// Static against continuous batching on one long-tailed workload, the KV memory each needs,
// and how many sequences of the workload's mean length fit a KV budget in BF16 and INT8.
void run_workload_comparison(const Args& a, Engine& engine, int max_batch, nlohmann::json& out) {
  engine.set_kernel_options(variant_options(split_list(a.variants).front(), a.model.kernels));
  // Lengths clamped to half the context so that prompt + output always fit.
  const bench::WorkloadParams wp{.n_requests = a.workload, .max_batch = max_batch,
                                 .max_len = int32_t(std::min<int64_t>(2048, engine.config().max_position / 2))};
  const std::vector<bench::WorkloadRequest> reqs = bench::make_workload(wp);
  double mean_len = 0;
  for (const auto& r : reqs) mean_len += r.prompt_len + r.output_len;
  mean_len /= double(reqs.size());
  const ModelConfig& cfg = engine.config();
  auto bytes_per_token = [&](int elem, int scale) {
    double kv_heads = 0;  // summed over layers (a pruned model's differ)
    for (int64_t il = 0; il < cfg.n_layers; ++il) kv_heads += double(cfg.kv_heads_of(il));
    return 2.0 * kv_heads * (double(cfg.head_dim) * elem + scale);
  };
  const double budget = a.kv_budget_gb * 1e9;
  const double token_bytes = double(engine.kv_bytes_per_token());
  if (!a.json)
    std::printf("\nworkload: %d requests, log-normal lengths (prompt median %.0f, output median %.0f, sigma %.1f), "
                "mean prompt+output %.0f tokens, batch %d\n",
                a.workload, wp.prompt_median, wp.output_median, wp.sigma, mean_len, max_batch);
  nlohmann::json w{{"requests", a.workload}, {"batch", max_batch}, {"mean_len", mean_len}};
  for (bool is_static : {true, false}) {
    const bench::WorkloadResult r = bench::run_workload(engine, reqs, max_batch, is_static, 1000 + is_static);
    const double kv_mb = double(r.peak_kv_blocks_used) * engine.kv_block_size() * token_bytes / 1e6;
    const char* name = is_static ? "static" : "continuous";
    w[name] = {{"seconds", r.seconds}, {"tokens_per_s", r.tokens_per_s}, {"itl_p50_s", r.itl_p50_s},
               {"itl_p99_s", r.itl_p99_s}, {"ttft_p50_s", r.ttft_p50_s}, {"ttft_p99_s", r.ttft_p99_s},
               {"kv_peak_bytes", kv_mb * 1e6}};
    if (!a.json)
      std::printf("  %-10s %9.1f tok/s  ITL p50 %.2f ms p99 %.2f ms  TTFT p50 %.2f s p99 %.2f s  KV peak %.1f MB\n",
                  name, r.tokens_per_s, r.itl_p50_s * 1e3, r.itl_p99_s * 1e3, r.ttft_p50_s, r.ttft_p99_s, kv_mb);
  }
  const double reserved_mb = double(max_batch) * double(cfg.max_position) * token_bytes / 1e6;
  const double bf16_seqs = budget / (bytes_per_token(2, 0) * mean_len);
  const double int8_seqs = budget / (bytes_per_token(1, 4) * mean_len);
  w["kv_reserved_bytes"] = reserved_mb * 1e6;
  w["max_concurrent_bf16"] = int64_t(bf16_seqs);
  w["max_concurrent_int8"] = int64_t(int8_seqs);
  out["workload"] = w;
  if (!a.json)
    std::printf("  KV reserved at full context for %d sequences: %.1f MB; a %.0f GB KV budget holds %lld sequences "
                "of the mean length in BF16, %lld in INT8\n",
                max_batch, reserved_mb, a.kv_budget_gb, (long long)bf16_seqs, (long long)int8_seqs);
}

int run_bench(const Args& a) {
  if (!a.spec.spec.empty())
    return run_spec_bench(SpecBenchArgs{.model = a.model, .spec = a.spec, .batches = parse_list(a.batches, "--batch"),
                                        .gen_len = a.gen_len, .max_batch_tokens = a.max_batch_tokens,
                                        .kv_memory_mb = a.kv_memory_mb, .prompts_file = a.prompts_file,
                                        .reps = a.spec_reps, .json = a.json});
  apply_threads(a.model.threads);
  const std::vector<int> batches = parse_list(a.batches, "--batch");
  const std::vector<int> prompt_lens = parse_list(a.prompt_lens, "--prompt-len");
  const std::vector<std::string> variants = split_list(a.variants);
  for (const std::string& v : variants) variant_options(v);  // unknown names fail before the load
  int max_batch = 1;
  for (int b : batches) max_batch = std::max(max_batch, b);
  const auto load_t0 = std::chrono::steady_clock::now();
  EngineOptions eo = engine_options(a.model);
  eo.kv_memory_mb = a.kv_memory_mb;
  eo.max_batch_tokens = a.max_batch_tokens;
  eo.max_seqs = max_batch;
  Engine engine(eo);
  // Bytes of the weights a one-token step uses: with several weight copies (--weights-per-batch)
  // only the copy it uses. Each run's bound and achieved GB/s use the bytes of its own steps.
  const double weight_gb = double(engine.model().step_weight_bytes(1)) / 1e9;
  const ModelConfig& cfg = engine.config();
  const bench::ActiveWeights active = bench::active_weights(cfg);
  // GB one decode step of b sequences reads: the weight copy b tokens use (model.h copy
  // ranges), all of it for a dense model, the experts b tokens are expected to choose for MoE
  auto step_gb = [&](int b) {
    return bench::step_weight_bytes(cfg, double(engine.model().step_weight_bytes(b)), double(engine.model().n_params()), b) /
           1e9;
  };
  // Tokenizer, config, weights (mapping, dequantizing or repacking, uploading) and KV pool.
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_t0).count();
  if (!a.json) std::printf("loaded in %.3f s\n", load_s);
  nlohmann::json out{{"model", a.model.dir}, {"backend", a.model.backend}, {"load_s", load_s},
                     {"weight_bytes", engine.model().weight_bytes()},
                     {"n_params", engine.model().n_params()}, {"active_params_per_token", active.params_per_token},
                     {"gen_len", a.gen_len}};
  if (!a.json && active.n_moe_layers > 0)
    std::printf("mixture of experts: %lld of %lld layers, top %lld of %lld experts; %.3g B of %.3g B parameters "
                "active per token; a batch-1 decode step reads %.3g of %.3g GB\n",
                (long long)active.n_moe_layers, (long long)cfg.n_layers, (long long)cfg.n_experts_per_tok,
                (long long)cfg.n_experts, active.params_per_token / 1e9, double(engine.model().n_params()) / 1e9,
                step_gb(1), weight_gb);
  if (a.model.backend == "cpu") {
    const std::string isa = cpu::isa_report();
    out["cpu_isa"] = isa;
    out["threads"] = host_threads();
    bool huge = false;
    const std::string pages = weight_pages_report(a.model.kernels.huge_pages, &huge);
    out["huge_pages"] = huge;
    if (!a.json)
      std::printf("cpu backend: %d threads, kernels %s; weights on %s\n", host_threads(), isa.c_str(), pages.c_str());
  }
  double bw = 0;
  if (a.membw) {
    // The memory the weights live in: the device's own copy test, else the host's.
    bw = engine.device_copy_bandwidth_gb_s();
    std::string where = "device";
    if (bw <= 0) {
      const bench::MemBwResult m = bench::measure_copy_bandwidth();
      bw = m.copy_gb_s;
      where = fmt::format("host, {} threads; read-only {:.1f} GB/s", m.threads, m.read_gb_s);
      out["read_gb_s"] = m.read_gb_s;
    }
    out["copy_gb_s"] = bw;
    out["roofline_decode_tokens_per_s_batch1"] = bw / step_gb(1);
    if (!a.json)
      std::printf("copy bandwidth %.1f GB/s (%s); weights %.1f MB, %.1f MB read per batch-1 step -> batch-1 decode "
                  "roofline %.0f tokens/s\n",
                  bw, where.c_str(), weight_gb * 1e3, step_gb(1) * 1e3, bw / step_gb(1));
  }
  // Prefill FLOPs per prompt token: 2 per active weight of the layers' matmuls (experts: the
  // top-k of each MoE layer and the router), plus causal attention's QK^T and PV (2 * head_dim
  // each per query-key pair and head; a prompt of L tokens averages (L + 1) / 2 keys per
  // query). The LM head runs for one row per request, so it is left out.
  const double layer_params = active.params_per_token - double(cfg.d_model) * double(cfg.n_vocab);
  double q_heads = 0;  // summed over layers (a pruned model's differ)
  for (int64_t il = 0; il < cfg.n_layers; ++il) q_heads += double(cfg.heads_of(il));
  auto flops_per_token = [&](int prompt_len) {
    return 2.0 * layer_params + 2.0 * q_heads * double(cfg.head_dim) * (prompt_len + 1);
  };
  if (!a.json)
    std::printf("%-16s %6s %6s %14s %9s %14s %12s %12s %9s %9s %12s %14s %14s%s\n", "variant", "prompt", "batch",
                "prefill tok/s", "TFLOP/s", "decode tok/s", "ITL p50 ms", "ITL p99 ms", "GB/s", "roofline",
                "total tok/s", "KV paged MB", "KV reserved MB", a.sequential ? "  sequential tok/s  speedup" : "");
  const double token_bytes = double(engine.kv_bytes_per_token());
  const int64_t max_len = engine.config().max_position;
  uint64_t seed = 1;  // a new one per run: repeated prompts would be served by the prefix cache
  for (const std::string& variant : variants) {
    const KernelOptions kernels = variant_options(variant, a.model.kernels);
    engine.set_kernel_options(kernels);
    pin_precision(engine, variant);
    // The CUDA backend records a step shape the second time it meets it, so a shape met once
    // per run (a batch's one-step tail) needs two warm-ups to be recorded before the measured run.
    const int warm_ups = a.model.backend == "cuda" && kernels.cuda_graphs ? 2 : 1;
    for (int prompt_len : prompt_lens) {
      for (int b : batches) {
        // Warm-up (not reported): per-shape kernel choices, recordings of decode steps. It runs
        // the measured run's lengths, so it meets every step shape the run will (the batch's
        // tail, where the sequences admitted first finish first, passes through the smaller
        // decode buckets); an 8-token warm-up left those to the first variant's measured run
        // (FP8 at batch 256 on the H200: 28,459 against 30,729-30,808 tokens/s, docs/PERF.md).
        for (int w = 0; w < warm_ups; ++w)
          bench::run_throughput(engine,
                                {.batch = b, .prompt_len = prompt_len, .gen_len = a.gen_len, .seed = seed++});
        const bench::ThroughputResult r = bench::run_throughput(
            engine, {.batch = b, .prompt_len = prompt_len, .gen_len = a.gen_len, .seed = seed++});
        // At batch b each decode step reads the weights its copy uses (for MoE the experts its
        // b tokens chose) once for b tokens.
        const double roof = bw > 0 ? bw / step_gb(b) * b : 0;
        // Paged: the blocks actually held at the busiest step; reserved: every sequence given
        // the model's full context up front, as a plain engine does.
        const double paged_mb = double(r.peak_kv_blocks_used) * engine.kv_block_size() * token_bytes / 1e6;
        const double reserved_mb = double(b) * double(max_len) * token_bytes / 1e6;
        const double prefill_tflops = r.prefill_tokens_per_s * flops_per_token(prompt_len) / 1e12;
        // Bytes of one decode step: the weights, and each sequence's K/V at the mean context.
        const double step_bytes = step_gb(b) * 1e9 + double(b) * (prompt_len + a.gen_len / 2.0) * token_bytes;
        const double decode_gb_s = r.decode_tokens_per_s / double(b) * step_bytes / 1e9;
        nlohmann::json run{{"variant", variant}, {"prompt_len", prompt_len}, {"batch", b},
                           {"prefill_tokens_per_s", r.prefill_tokens_per_s}, {"prefill_tflop_s", prefill_tflops},
                           {"decode_tokens_per_s", r.decode_tokens_per_s}, {"decode_gb_s", decode_gb_s},
                           {"ttft_p50_s", r.ttft_p50_s},
                           {"ttft_p99_s", r.ttft_p99_s}, {"itl_p50_s", r.itl_p50_s}, {"itl_p99_s", r.itl_p99_s},
                           {"total_tokens_per_s", r.total_tokens_per_s}, {"weight_roofline_tokens_per_s", roof},
                           {"kv_paged_peak_bytes", paged_mb * 1e6}, {"kv_reserved_bytes", reserved_mb * 1e6},
                           {"step_ms", {{"schedule", r.step_schedule_ms}, {"launch", r.step_launch_ms},
                                        {"wait", r.step_wait_ms}, {"output", r.step_output_ms}}},
                           {"decode_steps", r.decode_steps}, {"overlapped_steps", r.overlapped_steps}};
        double seq_tps = 0;
        if (a.sequential) {
          const bench::ThroughputResult sq = bench::run_throughput(
              engine, {.batch = b, .prompt_len = prompt_len, .gen_len = a.gen_len, .seed = seed++, .sequential = true});
          seq_tps = sq.total_tokens_per_s;
          run["sequential_total_tokens_per_s"] = seq_tps;
        }
        out["runs"].push_back(run);
        if (a.json) continue;
        std::printf("%-16s %6d %6d %14.1f %9.2f %14.1f %12.2f %12.2f %9.1f %8.0f%% %12.1f %14.2f %14.2f",
                    variant.c_str(), prompt_len, b, r.prefill_tokens_per_s, prefill_tflops, r.decode_tokens_per_s,
                    r.itl_p50_s * 1e3, r.itl_p99_s * 1e3, decode_gb_s,
                    roof > 0 ? 100.0 * r.decode_tokens_per_s / roof : 0.0, r.total_tokens_per_s, paged_mb, reserved_mb);
        if (a.sequential) std::printf(" %17.1f %8.2fx", seq_tps, r.total_tokens_per_s / seq_tps);
        std::printf("\n%30sdecode step: schedule %.3f ms, launch %.3f ms, wait %.3f ms, output %.3f ms; %lld of %lld "
                    "steps launched before the previous step's ids were read\n",
                    "", r.step_schedule_ms, r.step_launch_ms, r.step_wait_ms, r.step_output_ms,
                    static_cast<long long>(r.overlapped_steps), static_cast<long long>(r.decode_steps));
        std::fflush(stdout);
      }
    }
  }
  pin_precision(engine, "auto");
  if (!a.json && engine.weight_copy_names().size() > 1)
    for (const std::string& line : engine.weight_copy_report()) std::printf("%s\n", line.c_str());
  if (a.workload > 0) run_workload_comparison(a, engine, max_batch, out);
  const std::vector<std::string> tuning = engine.tuning_report();
  for (const std::string& line : tuning) out["tuning"].push_back(line);
  if (!a.json)
    for (const std::string& line : tuning) std::printf("tuning: %s\n", line.c_str());
  if (a.json) std::printf("%s\n", json_dump(out).c_str());
  if (!a.plot.empty()) write_decode_curve(out, a.plot);
  return 0;
}

}  // namespace

void add_bench(CLI::App& app, Runner& run) {
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("bench", "Prefill and decode throughput over batch sizes, beside the roofline");
  add_model_args(c, a->model);
  c->add_option("--batch", a->batches, "Comma-separated batch sizes, e.g. 1,4,16,64")->capture_default_str();
  c->add_option("--prompt-len", a->prompt_lens, "Prompt tokens per request (comma-separated: one run each)")
      ->capture_default_str();
  c->add_option("--gen", a->gen_len, "New tokens per request")->capture_default_str()->check(positive_number());
  c->add_option("--max-batch-tokens", a->max_batch_tokens, "Tokens per engine step")->capture_default_str();
  c->add_option("--kv-memory-mb", a->kv_memory_mb, "Cap on the KV pool (MiB); large batches of long sequences need more")
      ->capture_default_str();
  c->add_flag("!--no-membw", a->membw, "Skip the memory-bandwidth copy test");
  c->add_flag("--sequential", a->sequential, "Also run each batch's requests one after another, for the speedup");
  c->add_flag("--json", a->json, "Print one JSON object");
  c->add_option("--plot", a->plot, "Also write the decode tokens/s vs batch curve (one line per variant) to this SVG file");
  c->add_option("--workload", a->workload,
                "Also run N requests with log-normal lengths under static and under continuous batching "
                "(batch: the largest --batch)")
      ->capture_default_str();
  c->add_option("--kv-budget-gb", a->kv_budget_gb, "KV memory for the max-concurrent-sequences figure")
      ->capture_default_str();
  c->add_option("--variants", a->variants,
                "Comma-separated kernel configurations to measure in turn: default, no-graphs, no-fusion, no-fp8-fusion, no-fp8-handoff (FP8 epilogues do not quantize for the next matmul), fp8-sums-f32 (cuBLASLt's unit-scale FP8 sums as F32, not BF16), no-pdl, no-pdl-timed (a recorded step replayed often is not also recorded with PDL for every kernel and timed against it), no-gemv-timed (a recorded step is not recorded again with the near-tie kernels of its quantized GEMVs), pdl-resident (PDL also for the persistent and k-split GEMVs), pdl-decode (PDL also in decode steps, not for the grid-sized GEMVs), no-pdl-decode-resident (decode steps in plain stream order, also the grid-sized GEMVs), pdl-all (PDL for every kernel of every step; pdl-resident, pdl-decode and no-pdl-decode-resident run without the timed trial), "
                "no-cublaslt, no-lt-split-k (cuBLASLt's heuristic algorithms only, no split-K copies), no-decode-mma, no-decode-cluster (decode attention's key splits merged by a second kernel, not in a thread block cluster), no-decode-early-keys (decode attention reads its metadata and older keys only after waiting for the previous kernel), no-split-gemv (W4/W8 one-row GEMVs without the k-split kernels), no-overlap (each decode step launched only after the previous step's ids reached the host: the default), overlap (on the GPU, the next decode step launched before this one's ids reach the host), "
                "moe-simt (mixture-of-experts GEMMs on CUDA cores), splits-N (N key splits per decoded sequence), cublas, gemv, "
                "plain-attention, flash-attention (CUDA; each turns one optimisation off or forces a kernel), "
                "profile (per-op GPU times, eager), int8-acts (CPU integer kernels with 8-bit activations); or precisions of the linear weights loaded by "
                "--weights-per-batch: stored, bf16, int8, int4, fp8 (every step that copy), auto (each step the copy "
                "for its size)")
      ->capture_default_str();
  add_spec_args(c, a->spec);
  c->add_option("--prompts-file", a->prompts_file,
                "With --spec: JSONL prompts ({\"prompt\": ...} per line) cycled over the batch (bench/spec_prompts/: "
                "prose.jsonl for a draft model, quote.jsonl for prompt lookup)");
  c->add_option("--spec-reps", a->spec_reps,
                "With --spec: rounds of plain / fixed / adaptive runs per batch size (0: the step cost table only)")
      ->capture_default_str();
  c->callback([a, &run] { run = [a] { return run_bench(*a); }; });
}

}  // namespace tf::cli

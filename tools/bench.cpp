// `twofold bench`: prefill/decode throughput over batch sizes, next to the bandwidth
// roofline (weight bytes per decode step / measured copy bandwidth). Prints a table, or JSON.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/membw.h"
#include "bench/throughput.h"
#include "core/error.h"
#include "model/arch/model.h"
#include "model/config.h"
#include "tools/commands.h"

namespace tf::cli {
namespace {

struct Args {
  ModelArgs model;
  std::string batches = "1";
  int prompt_len = 128;
  int gen_len = 128;
  int max_batch_tokens = 512;
  bool membw = true;
  bool sequential = false;
  bool json = false;
};

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    try {
      v.push_back(std::stoi(item));
    } catch (const std::exception&) {
      fail("--batch: '{}' is not an integer", item);
    }
    if (v.back() <= 0) fail("--batch: {} must be positive", v.back());
  }
  return v;
}

int run_bench(const Args& a) {
  apply_threads(a.model.threads);
  const std::vector<int> batches = parse_list(a.batches);
  int max_batch = 1;
  for (int b : batches) max_batch = std::max(max_batch, b);
  Engine engine(EngineOptions{.model_dir = a.model.dir, .backend = a.model.backend, .load_format = a.model.load_format,
                              .kv_dtype = a.model.kv_dtype, .max_batch_tokens = a.max_batch_tokens,
                              .max_seqs = max_batch});
  const double weight_gb = double(engine.model().weight_bytes()) / 1e9;
  nlohmann::json out{{"model", a.model.dir}, {"backend", a.model.backend}, {"weight_bytes", engine.model().weight_bytes()},
                     {"prompt_len", a.prompt_len}, {"gen_len", a.gen_len}};
  double bw = 0;
  if (a.membw) {
    const bench::MemBwResult m = bench::measure_copy_bandwidth();
    bw = m.copy_gb_s;
    out["copy_gb_s"] = bw;
    out["roofline_decode_tokens_per_s_batch1"] = bw / weight_gb;
    if (!a.json)
      std::printf("copy bandwidth %.1f GB/s (%d threads); weights %.1f MB -> batch-1 decode roofline %.0f tokens/s\n",
                  bw, m.threads, weight_gb * 1e3, bw / weight_gb);
  }
  if (!a.json)
    std::printf("%6s %14s %14s %12s %12s %9s %12s %14s %14s%s\n", "batch", "prefill tok/s", "decode tok/s",
                "ITL p50 ms", "ITL p99 ms", "roofline", "total tok/s", "KV paged MB", "KV reserved MB",
                a.sequential ? "  sequential tok/s  speedup" : "");
  const double token_bytes = double(engine.kv_bytes_per_token());
  const int64_t max_len = engine.config().max_position;
  for (int b : batches) {
    const bench::ThroughputResult r = bench::run_throughput(
        engine, {.batch = b, .prompt_len = a.prompt_len, .gen_len = a.gen_len});
    // At batch b each decode step reads the weights once for b tokens.
    const double roof = bw > 0 ? bw / weight_gb * b : 0;
    // Paged: the blocks actually held at the busiest step; reserved: every sequence given the
    // model's full context up front, as a plain engine does.
    const double paged_mb = double(r.peak_kv_blocks_used) * engine.kv_block_size() * token_bytes / 1e6;
    const double reserved_mb = double(b) * double(max_len) * token_bytes / 1e6;
    nlohmann::json run{{"batch", b}, {"prefill_tokens_per_s", r.prefill_tokens_per_s},
                       {"decode_tokens_per_s", r.decode_tokens_per_s}, {"ttft_p50_s", r.ttft_p50_s},
                       {"ttft_p99_s", r.ttft_p99_s}, {"itl_p50_s", r.itl_p50_s}, {"itl_p99_s", r.itl_p99_s},
                       {"total_tokens_per_s", r.total_tokens_per_s}, {"weight_roofline_tokens_per_s", roof},
                       {"kv_paged_peak_bytes", paged_mb * 1e6}, {"kv_reserved_bytes", reserved_mb * 1e6}};
    double seq_tps = 0;
    if (a.sequential) {
      const bench::ThroughputResult s = bench::run_throughput(
          engine, {.batch = b, .prompt_len = a.prompt_len, .gen_len = a.gen_len, .sequential = true});
      seq_tps = s.total_tokens_per_s;
      run["sequential_total_tokens_per_s"] = seq_tps;
    }
    out["runs"].push_back(run);
    if (!a.json) {
      std::printf("%6d %14.1f %14.1f %12.2f %12.2f %8.0f%% %12.1f %14.2f %14.2f", b, r.prefill_tokens_per_s,
                  r.decode_tokens_per_s, r.itl_p50_s * 1e3, r.itl_p99_s * 1e3,
                  roof > 0 ? 100.0 * r.decode_tokens_per_s / roof : 0.0, r.total_tokens_per_s, paged_mb, reserved_mb);
      if (a.sequential) std::printf(" %17.1f %8.2fx", seq_tps, r.total_tokens_per_s / seq_tps);
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  if (a.json) std::printf("%s\n", json_dump(out).c_str());
  return 0;
}

}  // namespace

void add_bench(CLI::App& app, Runner& run) {
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("bench", "Prefill and decode throughput over batch sizes, beside the roofline");
  add_model_args(c, a->model);
  c->add_option("--batch", a->batches, "Comma-separated batch sizes, e.g. 1,4,16,64")->capture_default_str();
  c->add_option("--prompt-len", a->prompt_len, "Prompt tokens per request")->capture_default_str();
  c->add_option("--gen", a->gen_len, "New tokens per request")->capture_default_str();
  c->add_option("--max-batch-tokens", a->max_batch_tokens, "Tokens per engine step")->capture_default_str();
  c->add_flag("!--no-membw", a->membw, "Skip the memory-bandwidth copy test");
  c->add_flag("--sequential", a->sequential, "Also run each batch's requests one after another, for the speedup");
  c->add_flag("--json", a->json, "Print one JSON object");
  c->callback([a, &run] { run = [a] { return run_bench(*a); }; });
}

}  // namespace tf::cli

// `twofold prune`: writes a copy of a model folder with fewer query heads and FFN channels
// (src/prune/prune_model.h, docs/PRUNE.md), prints the per-layer table and, with evaluation
// tokens, the perplexity before and after; refuses to write a cut past --max-ppl-increase.
// --sweep measures several cuts for every score and recovery and writes their curve as SVG.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>

#include "bench/svg_chart.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "core/split.h"
#include "model/tokenizer/tokenizer.h"
#include "prune/prune_search.h"
#include "tools/commands.h"
#include "tools/staged_progress.h"

namespace tf::cli {
namespace {

struct Args {
  std::string in, out, calib, eval, eval_format = "auto", score = "auto", recover = "lsq", sweep, plot,
      allocate = "global", allocate_text;
  double heads = 0, ffn = 0, target_params = 0, max_ppl_increase = -1, min_keep = 10, damp = 0.3,
         greedy_step = 1.5;
  int64_t channel_multiple = 8;
  int64_t calib_tokens = 8192, calib_rows = 8192, select_tokens = 1024, allocate_tokens = 2048;
  int window = 256;
  int max_windows = 0;
  int threads = 0;
};

std::vector<PruneScore> scores_of(const std::string& s) {
  if (s == "auto") return {PruneScore::Wanda, PruneScore::Flap};
  std::vector<PruneScore> out;
  for (const std::string& x : split_list(s)) out.push_back(parse_prune_score(x, "--score"));
  return out;
}

void write_plot(const std::vector<SweepPoint>& pts, double ppl_before, const std::string& path) {
  bench::LineChart c{.title = "Perplexity vs parameters removed (twofold prune --sweep)",
                     .x_label = "parameters of the layers removed (%)", .y_label = "perplexity"};
  for (const SweepPoint& p : pts) {
    const std::string name = fmt::format("{} + {}", prune_score_name(p.score), recovery_name(p.recovery));
    auto it = std::find_if(c.series.begin(), c.series.end(), [&](const bench::ChartSeries& s) { return s.name == name; });
    if (it == c.series.end()) {
      c.series.push_back({.name = name, .points = {{0, ppl_before}}});
      it = c.series.end() - 1;
    }
    it->points.emplace_back(p.removed_layer_pct, p.ppl);
  }
  double x_max = 0;
  for (const SweepPoint& p : pts) x_max = std::max(x_max, p.removed_layer_pct);
  c.series.push_back({.name = "unpruned", .points = {{0, ppl_before}, {x_max, ppl_before}}, .dashed = true});
  std::ofstream f(path, std::ios::binary);
  if (!f) fail("--plot: cannot open '{}' for writing", path);
  f << bench::render_svg(c);
  f.close();
  if (!f) fail("--plot: writing '{}' failed", path);
  std::fprintf(stderr, "wrote %s\n", path.c_str());
}

int run_sweep(const Args& a, const Pruner& pruner, const std::vector<int32_t>& select,
              const std::vector<int32_t>& eval_ids, StagedProgress& bar) {
  std::vector<double> pcts;
  for (const std::string& x : split_list(a.sweep)) {
    try {
      pcts.push_back(std::stod(x));
    } catch (const std::exception&) {
      fail("--sweep: '{}' is not a number (expected percentages such as 5,10,20,30)", x);
    }
  }
  if (pcts.empty()) fail("--sweep: no percentages given");
  std::vector<Recovery> recs;
  for (const std::string& x : split_list(a.recover)) recs.push_back(parse_recovery(x, "--recover"));
  const PlanTarget base{.min_keep_pct = a.min_keep, .channel_multiple = a.channel_multiple};
  const double before = pruner.perplexity(pruner.build(keep_all(pruner.shapes()), Recovery::None), eval_ids,
                                          "perplexity unpruned");
  const std::vector<SweepPoint> pts =
      prune_sweep(pruner, pcts, scores_of(a.score), recs, base, eval_ids,
                  SweepAllocation{.allocation = parse_allocation(a.allocate, "--allocate"),
                                  .greedy_step_pct = a.greedy_step, .select_ids = select,
                                  .log = [](const std::string& l) { std::fprintf(stderr, "%s\n", l.c_str()); }});
  bar.finish();
  std::printf("allocation %s\n", a.allocate.c_str());
  std::printf("%-6s %-5s %9s %13s %13s %10s %8s %10s\n", "score", "recov", "target %", "layers cut %", "model cut %",
              "perplexity", "change", "plan s");
  std::printf("%-6s %-5s %9s %13s %13s %10.4f %8s\n", "-", "-", "0", "0.00", "0.00", before, "");
  for (const SweepPoint& p : pts)
    std::printf("%-6s %-5s %9.1f %13.2f %13.2f %10.4f %+7.2f%% %10.1f\n", std::string(prune_score_name(p.score)).c_str(),
                std::string(recovery_name(p.recovery)).c_str(), p.params_pct, p.removed_layer_pct, p.removed_model_pct,
                p.ppl, 100 * (p.ppl / before - 1), p.cost.seconds);
  if (!a.plot.empty()) write_plot(pts, before, a.plot);
  return 0;
}

int run_prune(const Args& a) {
  apply_threads(a.threads);
  if (a.sweep.empty() && a.out.empty()) fail("prune: -o OUT is required (unless --sweep)");
  if (!a.plot.empty() && a.sweep.empty()) fail("--plot draws the --sweep curve: give --sweep too");
  // What can be refused before the calibration forward is refused first.
  check_plan_target(PlanTarget{.heads_pct = a.heads, .ffn_pct = a.ffn, .params_pct = a.target_params,
                               .min_keep_pct = a.min_keep, .channel_multiple = a.channel_multiple});
  const Allocation allocation = parse_allocation(a.allocate, "--allocate");
  if (allocation == Allocation::Greedy && (a.heads > 0 || a.ffn > 0))
    fail("--allocate greedy splits a parameter cut (--target-params, the search or --sweep), not --heads or --ffn");
  if (a.sweep.empty()) {
    parse_recovery(a.recover, "--recover");
    if (a.heads <= 0 && a.ffn <= 0 && a.target_params <= 0 && a.max_ppl_increase < 0)
      fail("prune: give a cut (--heads, --ffn or --target-params) or --max-ppl-increase to search for the largest one");
  }
  if ((a.max_ppl_increase >= 0 || !a.sweep.empty()) && a.eval.empty())
    fail("prune: --max-ppl-increase and --sweep measure perplexity: give the evaluation tokens (--eval FILE)");
  const auto tok = Tokenizer::from_model(a.in);
  std::vector<int32_t> calib = tok->encode(read_text_file(a.calib), /*add_special=*/false);
  const std::vector<PruneScore> scores = scores_of(a.score);
  for (const std::string& x : split_list(a.sweep))
    if (x.find_first_not_of("0123456789.") != std::string::npos)
      fail("--sweep: '{}' is not a number (expected percentages such as 5,10,20,30)", x);
  // The held-out tail of the calibration text, for choosing a score and the greedy allocation's loss.
  std::vector<int32_t> select;
  if (!a.allocate_text.empty()) {
    select = tok->encode(read_text_file(a.allocate_text), /*add_special=*/false);
    if (int64_t(select.size()) > a.allocate_tokens) select.resize(size_t(a.allocate_tokens));
    if (select.size() < 2) fail("--allocate-text: fewer than 2 tokens in {}", a.allocate_text);
    std::fprintf(stderr, "held-out text for the score choice and the allocation: %zu tokens of %s\n", select.size(),
                 a.allocate_text.c_str());
  } else if ((scores.size() > 1 && a.sweep.empty()) || allocation == Allocation::Greedy) {
    const size_t n = std::min<size_t>(size_t(a.select_tokens), calib.size() / 4);
    select.assign(calib.end() - long(n), calib.end());
    calib.resize(calib.size() - n);
  }
  if (int64_t(calib.size()) > a.calib_tokens) calib.resize(size_t(a.calib_tokens));
  if (calib.size() < 2) fail("{}: fewer than 2 tokens of calibration text", a.calib);
  std::fprintf(stderr, "calibration: %zu tokens of %s (%zu more held out to choose the score or allocate)\n", calib.size(),
               a.calib.c_str(), a.allocate_text.empty() ? select.size() : size_t(0));
  std::vector<int32_t> eval_ids;
  if (!a.eval.empty()) {
    eval_ids = read_token_file(a.eval, a.eval_format, *tok);
    if (a.max_windows > 0 && int64_t(eval_ids.size()) > int64_t(a.max_windows) * a.window)
      eval_ids.resize(size_t(a.max_windows) * size_t(a.window));
  }
  StagedProgress bar;
  const Pruner pruner(PruneParams{
      .in_dir = a.in, .calib_ids = calib, .calib_rows = a.calib_rows, .window = a.window,
      .damp = a.damp,
      .progress = [&](const std::string& what, int64_t done, int64_t total) { bar.update(what, done, total); }});
  if (!a.sweep.empty()) return run_sweep(a, pruner, select, eval_ids, bar);

  const PruneRequest req{.target = {.heads_pct = a.heads, .ffn_pct = a.ffn, .params_pct = a.target_params,
                                    .min_keep_pct = a.min_keep, .channel_multiple = a.channel_multiple},
                         .scores = scores, .recovery = parse_recovery(a.recover, "--recover"),
                         .allocation = allocation, .greedy_step_pct = a.greedy_step,
                         .log = [](const std::string& l) { std::fprintf(stderr, "%s\n", l.c_str()); },
                         .select_ids = select, .eval_ids = eval_ids, .max_ppl_increase = a.max_ppl_increase};
  const PruneOutcome o = prune_with(pruner, req);
  bar.finish();
  if (!o.within_limit) {
    const bool searched = a.heads <= 0 && a.ffn <= 0 && a.target_params <= 0;
    fail("{}: perplexity on {} would go from {:.4f} to {:.4f} ({:+.2f}%) {}, over --max-ppl-increase {}%; "
         "nothing written",
         a.in, a.eval, o.ppl_before, o.ppl_after, 100 * (o.ppl_after / o.ppl_before - 1),
         searched ? fmt::format("with the smallest cut ({}% of the layers' parameters)", o.params_pct)
                  : std::string("with this cut"),
         a.max_ppl_increase);
  }
  for (const std::string& line : format_prune_report(pruner.shapes(), o.model, pruner.n_params()))
    std::printf("%s\n", line.c_str());
  std::printf("score %s, recovery %s%s\n", std::string(prune_score_name(o.score)).c_str(),
              std::string(recovery_name(req.recovery)).c_str(),
              a.heads <= 0 && a.ffn <= 0 && a.target_params <= 0
                  ? fmt::format(", largest cut within the limit: --target-params {}", o.params_pct).c_str()
                  : "");
  if (allocation == Allocation::Greedy)
    std::printf("allocation greedy: %lld loss evaluations, %.1f s\n", (long long)o.cost.evaluations, o.cost.seconds);
  if (o.ppl_before > 0)
    std::printf("perplexity on %s: %.4f -> %.4f (%+.2f%%)\n", a.eval.c_str(), o.ppl_before, o.ppl_after,
                100 * (o.ppl_after / o.ppl_before - 1));
  pruner.write(o.model, a.out);
  std::printf("wrote %s\n", a.out.c_str());
  return 0;
}

}  // namespace

void add_prune(CLI::App& app, Runner& run) {
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand(
      "prune", "Write a copy of a model folder with fewer attention heads and FFN channels (docs/PRUNE.md)");
  c->add_option("-m,--model", a->in, "16-bit model folder (llama, mistral, qwen2, qwen3)")
      ->required()
      ->check(CLI::ExistingDirectory);
  c->add_option("-o,--output", a->out, "Folder to write (created; not with --sweep)");
  c->add_option("--calib", a->calib, "Calibration text (e.g. models/calib/train-sample.txt; never the evaluation tokens)")
      ->required()
      ->check(CLI::ExistingFile);
  c->add_option("--heads", a->heads, "Percent of query heads to remove (within KV groups; ranked across layers)");
  c->add_option("--ffn", a->ffn, "Percent of FFN channels to remove (ranked across layers)");
  c->add_option("--target-params", a->target_params,
                "Percent of the layers' parameters to remove, split between heads and channels by importance");
  c->add_option("--max-ppl-increase", a->max_ppl_increase,
                "Percent: refuse (nothing written) when perplexity on --eval rises more; alone, search the largest "
                "cut within it");
  c->add_option("--recover", a->recover, "none, bias (mean compensation) or lsq (least-squares refit with bias); "
                                         "with --sweep a comma-separated list")
      ->capture_default_str();
  c->add_option("--score", a->score, "wanda, flap, or auto (both, the better on held-out calibration text; with "
                                     "--sweep: both curves)")
      ->capture_default_str();
  c->add_option("--eval", a->eval, "Evaluation tokens (e.g. tests/data/valid_tokens_65536.bin) or text")
      ->check(CLI::ExistingFile);
  c->add_option("--eval-format", a->eval_format, "auto (by extension: .bin = u16), text, u16")->capture_default_str();
  c->add_option("--window", a->window, "Tokens per perplexity window")->capture_default_str();
  c->add_option("--max-windows", a->max_windows, "Evaluate on the first N windows only (0 = all)")->capture_default_str();
  c->add_option("--sweep", a->sweep, "Comma-separated --target-params percentages to measure (5,10,20,30); writes nothing");
  c->add_option("--plot", a->plot, "SVG file for the --sweep curve");
  c->add_option("--allocate", a->allocate,
                "How a parameter cut is split between layers: global (one ranking of every unit) or greedy (step by "
                "step where the loss on held-out calibration text rises least)")
      ->capture_default_str();
  c->add_option("--allocate-text", a->allocate_text,
                "Held-out text whose perplexity the greedy allocation (and --score auto) reads, instead of the last "
                "tokens of --calib (e.g. models/calib/man-pages.txt; never the evaluation tokens)")
      ->check(CLI::ExistingFile);
  c->add_option("--allocate-tokens", a->allocate_tokens, "--allocate-text: tokens read from its start")
      ->capture_default_str();
  c->add_option("--greedy-step", a->greedy_step,
                "--allocate greedy: channels per candidate step, percent of the layers' parameters")
      ->capture_default_str()
      ->check(positive_number());
  c->add_option("--min-keep", a->min_keep, "Percent of each layer's heads and channels always kept")->capture_default_str();
  c->add_option("--channel-multiple", a->channel_multiple, "Each layer keeps a multiple of this many channels")
      ->capture_default_str();
  c->add_option("--calib-tokens", a->calib_tokens, "Calibration tokens used (the first N of the file)")->capture_default_str();
  c->add_option("--calib-rows", a->calib_rows, "Input rows per projection kept for scores and recovery")
      ->capture_default_str();
  c->add_option("--damp", a->damp,
                 "lsq recovery: ridge toward the original columns, as a multiple of the kept inputs' mean variance")
      ->capture_default_str()
      ->check(positive_number());
  c->add_option("-t,--threads", a->threads, "CPU threads (0 = all cores)")->capture_default_str()->check(thread_count());
  c->callback([a, &run] { run = [a] { return run_prune(*a); }; });
}

}  // namespace tf::cli

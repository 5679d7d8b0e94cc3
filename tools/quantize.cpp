// `twofold quantize`: writes a quantized copy of a 16-bit model folder (src/convert/quantize_model.h)
// and prints the per-weight table: how each linear weight is stored, its output error on the
// calibration rows and the calibration perplexity with it quantized alone.
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "convert/quantize_model.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "core/split.h"
#include "model/tokenizer/tokenizer.h"
#include "quant/quantized_weight.h"
#include "tools/commands.h"
#include "tools/staged_progress.h"

namespace tf::cli {
namespace {

struct Args {
  std::string in, out, format, method = "rtn", keep = "";
  std::vector<std::string> calib;  // files, their texts joined by a blank line
  int group_size = 128;
  int64_t calib_tokens = 4096;
  int64_t calib_rows = 512;
  int64_t calib_skip_first = 0;
  double max_ppl_increase = 1.0;
  bool quantize_lm_head = false, no_sensitivity = false;
  bool symmetric = false, act_order = false, static_groups = false, sequential = false;
  double damp = 0.01;
  int gptq_clip = 1;
  int gptq_refit = 0;
  int gptq_cd = 0;
  double gptq_cd_damp = 0.0;
  int threads = 0;
};

int run_quantize(const Args& a) {
  apply_threads(a.threads);
  QuantizeParams p{.in_dir = a.in, .out_dir = a.out, .format = parse_quant_format(a.format, "--format"),
                   .group_size = a.group_size, .method = a.method, .symmetric = a.symmetric, .gptq_damp = a.damp,
                   .act_order = a.act_order, .static_groups = a.static_groups, .gptq_clip = a.gptq_clip,
                   .gptq_refit = a.gptq_refit, .gptq_cd = a.gptq_cd, .gptq_cd_damp = a.gptq_cd_damp,
                   .sequential = a.sequential, .calib_rows = a.calib_rows,
                   .calib_skip_first = a.calib_skip_first,
                   .quantize_lm_head = a.quantize_lm_head, .max_ppl_increase = a.max_ppl_increase,
                   .sensitivity = !a.no_sensitivity};
  if (a.keep == "auto") {
    p.keep_16bit_auto = true;
  } else if (!a.keep.empty()) {
    p.keep_16bit = split_list(a.keep);
  }
  if (!a.calib.empty()) {
    const auto tok = Tokenizer::from_model(a.in);
    std::string text;
    for (const std::string& f : a.calib) text += (text.empty() ? "" : "\n\n") + read_text_file(f);
    const std::string files = fmt::format("{}", fmt::join(a.calib, ", "));
    p.calib_ids = tok->encode(text, /*add_special=*/false);
    if (int64_t(p.calib_ids.size()) > a.calib_tokens) p.calib_ids.resize(size_t(a.calib_tokens));
    if (p.calib_ids.size() < 2) fail("{}: fewer than 2 tokens of calibration text", files);
    std::fprintf(stderr, "calibration: %zu tokens of %s\n", p.calib_ids.size(), files.c_str());
  }
  StagedProgress bar;
  p.progress = [&](const std::string& what, int64_t done, int64_t total) { bar.update(what, done, total); };
  const QuantizeReport r = quantize_model(p);
  bar.finish();
  for (const std::string& line : format_report(r)) std::printf("%s\n", line.c_str());
  std::printf("wrote %s\n", a.out.c_str());
  return 0;
}

}  // namespace

void add_quantize(CLI::App& app, Runner& run) {
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("quantize", "Write a quantized copy of a 16-bit model folder (docs/QUANT.md)");
  c->add_option("-m,--model", a->in, "16-bit model folder (config.json, safetensors, tokenizer)")
      ->required()
      ->check(CLI::ExistingDirectory);
  c->add_option("-o,--output", a->out, "Folder to write (created)")->required();
  c->add_option("--format", a->format, "int8 (per-row), int4 (groups along the input), fp8 (E4M3, per-row)")
      ->required()
      ->check(CLI::IsMember({"int8", "int4", "fp8"}));
  c->add_option("--group-size", a->group_size, "int4 group size (a multiple of 32; lowered for a weight it does not divide)")
      ->capture_default_str();
  c->add_option("--method", a->method,
                "rtn (round to nearest), awq, gptq, or awq-gptq (AWQ's input scales, then GPTQ); all but rtn need --calib")
      ->capture_default_str()
      ->check(CLI::IsMember({"rtn", "awq", "gptq", "awq-gptq"}));
  c->add_flag("--symmetric", a->symmetric, "int4: symmetric groups (every zero point 8)");
  c->add_flag("--act-order", a->act_order, "GPTQ: columns by decreasing input energy (implies --static-groups)");
  c->add_flag("--static-groups", a->static_groups, "GPTQ: int4 group parameters from the weights before any update");
  c->add_option("--gptq-clip", a->gptq_clip,
                "GPTQ static groups: clip ratios tried (1, 0.95, ...; 1 = none), the least H-weighted error wins")
      ->capture_default_str()
      ->check(CLI::Range(1, 10));
  c->add_option("--gptq-refit", a->gptq_refit,
                "GPTQ int4: rounds of the scale and zero-point refit on GPTQ's codes (least H-weighted error per "
                "row; a further round reruns GPTQ with the refitted groups); 0 = none")
      ->capture_default_str()
      ->check(CLI::Range(0, 8));
  c->add_option("--gptq-cd", a->gptq_cd,
                "GPTQ int4: rounds of coordinate descent on the codes after GPTQ (and the refit), each code moved to "
                "the one of least H-weighted row error given the others, each round followed by a scale and zero-point "
                "refit; 0 = none")
      ->capture_default_str()
      ->check(CLI::Range(0, 8));
  c->add_option("--gptq-cd-damp", a->gptq_cd_damp,
                "GPTQ int4: damping of the Hessian the coordinate descent and its refits minimise on, a fraction of "
                "its mean diagonal")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10.0));
  c->add_option("--damp", a->damp, "GPTQ: damping, a fraction of the Hessian's mean diagonal")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10.0));
  c->add_flag("--sequential", a->sequential,
              "Calibrate each layer on the model whose earlier layers are already quantized (one calibration forward "
              "per layer)");
  c->add_option("--calib", a->calib,
                "Calibration text file (e.g. models/calib/train-sample.txt; never the held-out perplexity tokens); repeat it "
                "for several, joined in order by a blank line")
      ->check(CLI::ExistingFile);
  c->add_option("--calib-tokens", a->calib_tokens, "Calibration tokens used (the first N of the file)")->capture_default_str();
  c->add_option("--calib-rows", a->calib_rows, "Input rows per layer the quantizers see")->capture_default_str();
  c->add_option("--calib-skip-first", a->calib_skip_first,
                "Positions left out of the quantizers' rows at the start of each calibration window (the attention "
                "sink's)")
      ->capture_default_str()
      ->check(CLI::Range(0, 255));
  c->add_option("--keep-16bit", a->keep,
                "Modules stored 16-bit: comma-separated names (model.layers.0.mlp.down_proj), or auto: the most "
                "sensitive weights until --max-ppl-increase holds on the calibration text");
  c->add_option("--max-ppl-increase", a->max_ppl_increase, "Percent, for --keep-16bit auto")->capture_default_str();
  c->add_flag("--quantize-lm-head", a->quantize_lm_head, "Quantize an untied LM head too");
  c->add_flag("--no-sensitivity", a->no_sensitivity, "Skip the per-weight perplexity column (faster)");
  c->add_option("-t,--threads", a->threads, "CPU threads (0 = all cores)")->capture_default_str();
  c->callback([a, &run] { run = [a] { return run_quantize(*a); }; });
}

}  // namespace tf::cli

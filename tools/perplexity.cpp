// `twofold perplexity`: mean negative log-likelihood over non-overlapping windows.
//
// The token stream is cut into windows of --window tokens; each window runs on its own from
// position 0, and tokens 1..w-1 of it are predicted from the tokens before them (the method
// of models/README.md, "Perplexity"). A last window shorter than 2 tokens predicts nothing.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/progress.h"
#include "model/config.h"
#include "model/tokenizer/tokenizer.h"
#include "sample/sampler.h"
#include "tools/commands.h"
#include "twofold/engine.h"

namespace tf::cli {
namespace {

struct Args {
  ModelArgs model;
  std::string file;
  std::string format = "auto";
  int window = 256;
  int max_windows = 0;
  bool json = false;
};

int run_perplexity(const Args& a) {
  apply_threads(a.model.threads);
  if (a.window < 2) fail("--window must be at least 2, got {}", a.window);
  EngineOptions eo = engine_options(a.model);
  eo.max_seqs = 1;
  Engine engine(eo);
  const std::vector<int32_t> ids = read_token_file(a.file, a.format, engine.tokenizer());
  const int64_t n_vocab = engine.config().n_vocab;
  int64_t n_windows = (int64_t(ids.size()) + a.window - 1) / a.window;
  if (a.max_windows > 0) n_windows = std::min<int64_t>(n_windows, a.max_windows);
  double nll = 0;
  int64_t n_pred = 0;
  ProgressBar bar("perplexity", n_windows);
  for (int64_t w = 0; w < n_windows; ++w) {
    const auto begin = ids.begin() + w * a.window;
    const auto end = ids.begin() + std::min<int64_t>(int64_t(ids.size()), (w + 1) * a.window);
    const std::vector<int32_t> win(begin, end);
    if (win.size() < 2) break;
    const std::vector<float> logits = engine.score(win, /*all_positions=*/true);
    for (size_t i = 0; i + 1 < win.size(); ++i) {
      std::span<const float> row(logits.data() + int64_t(i) * n_vocab, size_t(n_vocab));
      nll -= log_softmax_at(row, win[i + 1]);
      ++n_pred;
    }
    bar.update(w + 1, n_pred ? "ppl " + std::to_string(std::exp(nll / double(n_pred))) : "");
  }
  bar.finish();
  if (n_pred == 0) fail("{}: fewer than 2 tokens, nothing to predict", a.file);
  const double ppl = std::exp(nll / double(n_pred));
  if (a.json) {
    std::printf("%s\n", json_dump(nlohmann::json{{"ppl", ppl}, {"tokens", n_pred}, {"mean_nll", nll / double(n_pred)}}).c_str());
  } else {
    std::printf("perplexity %.4f over %lld predicted tokens (mean NLL %.6f)\n", ppl, (long long)n_pred, nll / double(n_pred));
  }
  return 0;
}

}  // namespace

std::vector<int32_t> read_token_file(const std::string& file, const std::string& format, const Tokenizer& tok) {
  const bool u16 = format == "u16" || (format == "auto" && file.ends_with(".bin"));
  if (!u16) {
    if (format != "auto" && format != "text") fail("--format must be auto, text or u16, got '{}'", format);
    return tok.encode(read_text_file(file));
  }
  const MappedFile f(file);
  if (f.size() % 2 != 0) fail("{}: {} bytes is not a whole number of uint16 token ids", file, f.size());
  std::vector<int32_t> ids(f.size() / 2);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(f.data()[2 * i] | (f.data()[2 * i + 1] << 8));
  return ids;
}

void add_perplexity(CLI::App& app, Runner& run) {
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("perplexity", "Perplexity over a text file or a file of uint16 token ids");
  add_model_args(c, a->model);
  c->add_option("-f,--file", a->file, "Text file, or .bin of little-endian uint16 token ids")
      ->required()->check(CLI::ExistingFile);
  c->add_option("--format", a->format, "auto (by extension: .bin = u16), text, u16")->capture_default_str();
  c->add_option("--window", a->window, "Tokens per window")->capture_default_str();
  c->add_option("--max-windows", a->max_windows, "Stop after this many windows (0 = all)");
  c->add_flag("--json", a->json, "Print {\"ppl\": X, \"tokens\": N}");
  c->callback([a, &run] { run = [a] { return run_perplexity(*a); }; });
}

}  // namespace tf::cli

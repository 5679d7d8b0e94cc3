// The `twofold` verbs. Each file registers one subcommand on the CLI11 app; main.cpp only
// collects them.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <string>

namespace tf::cli {

// Options every verb that loads a model shares.
struct ModelArgs {
  std::string dir;
  std::string backend = "cpu";
  int threads = 0;  // 0 = default_host_threads() (core/host_threads.h)
  std::string kv_dtype = "f32";
  std::string load_format = "auto";
};
void add_model_args(CLI::App* app, ModelArgs& args);
// --tp N: shard the model over N ranks (tensor parallelism; on the CPU, N threads of this
// process sharing the cores). For the verbs that run through the engine.
void add_tp_arg(CLI::App* app, int& tp);
void apply_threads(int threads);

// Each adds its subcommand; the callback sets the process exit code through `run`.
using Runner = std::function<int()>;
void add_generate(CLI::App& app, Runner& run);
void add_logits(CLI::App& app, Runner& run);
void add_tokenize(CLI::App& app, Runner& run);
void add_detokenize(CLI::App& app, Runner& run);
void add_perplexity(CLI::App& app, Runner& run);
void add_info(CLI::App& app, Runner& run);
void add_bench(CLI::App& app, Runner& run);
void add_kv_plan(CLI::App& app, Runner& run);
void add_serve(CLI::App& app, Runner& run);
void add_plot(CLI::App& app, Runner& run);

// The decode tokens/s vs batch chart of a bench result (bench --json's object) to an SVG file.
void write_decode_curve(const nlohmann::json& bench_output, const std::string& path);

// JSON text of a string that may hold invalid UTF-8 (replaced, never thrown on).
std::string json_dump(const nlohmann::json& j);

}  // namespace tf::cli

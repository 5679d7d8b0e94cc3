// The `twofold` verbs. Each file registers one subcommand on the CLI11 app; main.cpp only
// collects them.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "twofold/engine.h"
#include "twofold/sampling.h"

namespace tf {
class ChatTemplate;
class Tokenizer;
}

namespace tf::cli {

// Options every verb that loads a model shares.
struct ModelArgs {
  std::string dir;
  std::string backend = "cpu";
  int threads = 0;  // 0 = default_host_threads() (core/host_threads.h)
  std::string kv_dtype = "f32";
  std::string load_format = "auto";
  WeightOptions weights;  // --quantization, --group-size, --quantize-lm-head, --weights-per-batch
  KernelOptions kernels;  // --int8-activations, --bf16-activations, --no-huge-pages
};
void add_model_args(CLI::App* app, ModelArgs& args);
// The engine options the model flags give (folder, backend, load format, weights, KV dtype,
// kernels), the rest at their defaults: each verb then sets its own (batch, KV pool, ranks).
EngineOptions engine_options(const ModelArgs& args);
// --tp N: shard the model over N ranks (tensor parallelism; on the CPU, N threads of this
// process sharing the cores). For the verbs that run through the engine.
void add_tp_arg(CLI::App* app, int& tp);
void apply_threads(int threads);
// -t/--threads N on a verb: 0 (the default count) up to kMaxHostThreads.
CLI::Validator thread_count();

// Option checks whose messages read "--opt: must be a positive number, got 0" (CLI11's own
// PositiveNumber prints its range as 0.000000 to the largest double).
CLI::Validator positive_number();
CLI::Validator non_negative_number();

// The sampling flags generate and chat share: -n, --temp, --top-p, --top-k, --min-p,
// --repeat-penalty, --presence-penalty, --frequency-penalty, --seed, --stop, --ignore-eos.
// Defaults are the struct's initial values.
struct SamplingArgs {
  int max_tokens = 64;
  float temp = 0.8f;
  float top_p = 0.95f;
  int top_k = 40;
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::vector<std::string> logit_bias;  // "ID=BIAS", checked by sampling_params
  int64_t seed = -1;  // -1: a random seed
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool json = false;  // the output is one JSON object (constrained decoding)
  std::string json_schema, json_schema_file;  // ... or one value this schema allows
};
void add_sampling_args(CLI::App* app, SamplingArgs& args);
// Throws tf::Error naming --logit-bias when one of its values is malformed or out of range, and
// --json-schema / --json-schema-file when the schema cannot be read or is outside the subset.
SamplingParams sampling_params(const SamplingArgs& args, uint64_t seed);
// --seed when given, else a random one.
uint64_t seed_of(const SamplingArgs& args);

// Speculative decoding flags (generate, bench, serve): --spec draft:DIR | ngram, --spec-k N,
// --spec-adaptive on|off, --spec-costs FILE.
struct SpecArgs {
  std::string spec;  // "" = off
  int k = 4;
  std::string adaptive = "on";
  std::string costs;
};
void add_spec_args(CLI::App* app, SpecArgs& args);
// The engine's options for the flags; throws tf::Error naming the flag at fault.
SpecOptions spec_options(const SpecArgs& args);

// -p TEXT, where "-" means: read the text from standard input (all of it, byte for byte).
CLI::Option* add_prompt_arg(CLI::App* app, std::string& prompt, const std::string& what = "Prompt text");
// The prompt itself: `arg`, or standard input's bytes when `arg` is "-".
std::string prompt_text(const std::string& arg);

// --chat-template FILE (chat, serve): renders messages instead of the model's own template.
void add_chat_template_arg(CLI::App* app, std::string& path);
// The template in `file` when it is given, else the model's own; nullopt when neither exists.
std::optional<ChatTemplate> load_chat_template(const std::string& model, const std::string& file);
// --chat-template-kwargs JSON (chat, serve): more variables for the template, a JSON object
// (e.g. {"enable_thinking": false} for Qwen3), checked when the flags are read.
void add_chat_template_kwargs_arg(CLI::App* app, std::string& text);
// The object of that flag's text (empty text: an empty object), keys in the order written.
nlohmann::ordered_json chat_template_kwargs(const std::string& text);

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
void add_chat(CLI::App& app, Runner& run);
void add_plot(CLI::App& app, Runner& run);
void add_quantize(CLI::App& app, Runner& run);
void add_prune(CLI::App& app, Runner& run);

// The decode tokens/s vs batch chart of a bench result (bench --json's object) to an SVG file.
void write_decode_curve(const nlohmann::json& bench_output, const std::string& path);

// The token ids of `file`: little-endian uint16 ids (format "u16", or "auto" and a .bin
// name), else its text encoded by `tok` ("text"). Throws tf::Error naming the file or format.
std::vector<int32_t> read_token_file(const std::string& file, const std::string& format, const Tokenizer& tok);

// JSON text of a string that may hold invalid UTF-8 (replaced, never thrown on).
std::string json_dump(const nlohmann::json& j);

}  // namespace tf::cli

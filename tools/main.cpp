// twofold: run and serve Transformer language models. `twofold --help` lists the verbs.
#include <cstdio>
#include <exception>

#include "core/error.h"
#include "core/host_threads.h"
#include "tools/commands.h"

namespace tf::cli {

void add_model_args(CLI::App* app, ModelArgs& args) {
  app->add_option("-m,--model", args.dir,
                  "Model: a folder (config.json, *.safetensors, tokenizer.json) or a GGUF file (or a folder holding one)")
      ->required()
      ->check(CLI::ExistingPath);
  app->add_option("--backend", args.backend, "Backend: cpu (fast), ref (scalar reference), cuda")
      ->capture_default_str();
  app->add_option("-t,--threads", args.threads, "CPU threads (0 = physical cores, at most 16)")
      ->capture_default_str()
      ->check(thread_count());
  app->add_option("--load-format", args.load_format,
                  "auto (the safetensors or GGUF weights) or dummy (random weights of the configured shapes, for speed work)")
      ->capture_default_str();
  app->add_option("--quantization", args.weights.quantization,
                  "Quantize the linear weights at load by round-to-nearest: int8, int4 or fp8 (docs/QUANT.md); "
                  "a quantized folder needs none")
      ->check(CLI::IsMember({"int8", "int4", "fp8"}));
  app->add_option("--group-size", args.weights.group_size, "int4 at load: elements per group (a multiple of 32)")
      ->capture_default_str();
  app->add_flag("--quantize-lm-head", args.weights.quantize_lm_head, "Quantization at load includes an untied LM head");
  app->add_flag("--dequantize", args.weights.dequantize_gguf,
                "GGUF: dequantize every quantized matrix to F32 at load, also the types the backend runs in their "
                "blocks (README, GGUF types), for comparison");
  app->add_flag("--int8-activations", args.kernels.int8_activations,
                "CPU integer kernels (quantized weights): round activations to 8 bits per block of 32, as llama.cpp "
                "does (faster, coarser), instead of 16 (README, GGUF files)");
  app->add_flag("--bf16-activations", args.kernels.bf16_activations,
                "CPU BF16 weights: round the activations of prefill GEMMs to BF16 and run them on AMX tiles where "
                "the CPU has them (several times faster, coarser; README, CPU backend)");
  app->add_flag_callback("--no-huge-pages", [&args] { args.kernels.huge_pages = false; },
                "CPU: leave the weights read in place on the checkpoint's pages instead of copying them onto huge "
                "pages at load (less resident memory, slower decode; README, CPU backend)");
  app->add_option("--weights-per-batch", args.weights.per_batch,
                  "Copies of the linear weights, each step using one by its number of tokens: names (stored, bf16, "
                  "int8, int4, fp8) with the fewest tokens each serves (int4:1,fp8:64), or without numbers to "
                  "measure the crossovers at load (int4,bf16). Memory: every copy is resident");
  app->add_option("--kv-dtype", args.kv_dtype, "KV cache element type: f32, bf16, f16, int8, fp8 (E4M3)")->capture_default_str();
}

EngineOptions engine_options(const ModelArgs& a) {
  return EngineOptions{.model_dir = a.dir, .backend = a.backend, .load_format = a.load_format, .weights = a.weights,
                       .kv_dtype = a.kv_dtype, .kernels = a.kernels};
}

namespace {

CLI::Validator number_check(const std::string& name, bool (*ok)(double), const std::string& what) {
  return CLI::Validator(
      [ok, what](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v) || !ok(v)) return "must be " + what + ", got " + text;
        return {};
      },
      name);
}

}  // namespace

CLI::Validator positive_number() {
  return number_check("POSITIVE", [](double v) { return v > 0; }, "a positive number");
}
CLI::Validator non_negative_number() {
  return number_check("NONNEGATIVE", [](double v) { return v >= 0; }, "a number >= 0");
}
CLI::Validator thread_count() { return CLI::Range(0, kMaxHostThreads); }

void add_tp_arg(CLI::App* app, int& tp) {
  app->add_option("--tp", tp, "Tensor parallel ranks (the model's heads, MLP and vocabulary split over them)")
      ->capture_default_str()
      ->check(positive_number());
}

void apply_threads(int threads) { set_default_host_threads(threads); }

}  // namespace tf::cli

int main(int argc, char** argv) {
  CLI::App app{"twofold: run and serve Transformer language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "twofold 0.1.0");
  tf::cli::Runner run;
  tf::cli::add_generate(app, run);
  tf::cli::add_logits(app, run);
  tf::cli::add_tokenize(app, run);
  tf::cli::add_detokenize(app, run);
  tf::cli::add_perplexity(app, run);
  tf::cli::add_info(app, run);
  tf::cli::add_bench(app, run);
  tf::cli::add_kv_plan(app, run);
  tf::cli::add_serve(app, run);
  tf::cli::add_chat(app, run);
  tf::cli::add_plot(app, run);
  tf::cli::add_quantize(app, run);
  tf::cli::add_prune(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return run ? run() : 0;
  } catch (const tf::Error& e) {
    std::fprintf(stderr, "twofold: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "twofold: error: %s\n", e.what());
    return 1;
  }
}

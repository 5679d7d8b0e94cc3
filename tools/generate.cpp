// `twofold generate`: one prompt (-p) streamed to stdout, or many (--prompts-file) run
// concurrently through the batching engine. Both go through the same Engine.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_bounded.h"
#include "core/split.h"
#include "model/tokenizer/tokenizer.h"
#include "tools/commands.h"
#include "twofold/engine.h"

namespace tf::cli {
namespace {

struct GenerateArgs {
  ModelArgs model;
  std::string prompt;
  std::string prompts_file;
  SamplingArgs sampling;
  bool json = false;
  int max_batch_tokens = 512;
  int max_seqs = 64;
  int block_size = 16;
  int tp = 1;
  SpecArgs spec;
};

EngineOptions engine_options(const GenerateArgs& a) {
  EngineOptions eo = engine_options(a.model);
  eo.block_size = a.block_size;
  eo.max_batch_tokens = a.max_batch_tokens;
  eo.max_seqs = a.max_seqs;
  eo.tensor_parallel = a.tp;
  eo.spec = spec_options(a.spec);
  return eo;
}

// " | spec: ..." for the stats line when speculation ran: acceptance rate and mean accepted
// length (tokens per verification, EngineMetrics).
std::string spec_stats(int64_t n_drafts, int64_t n_draft_tokens, int64_t n_accepted) {
  if (n_drafts == 0) return "";
  return fmt::format(" | spec: {} proposed, acceptance {:.1f}%, mean accepted length {:.2f}", n_draft_tokens,
                     100.0 * double(n_accepted) / double(n_draft_tokens), 1.0 + double(n_accepted) / double(n_drafts));
}

nlohmann::json result_json(Engine& engine, RequestId id, const std::string& text) {
  return nlohmann::json{{"prompt_ids", engine.prompt_ids(id)},
                        {"output_ids", engine.output_ids(id)},
                        {"text", text}};
}

int run_single(const GenerateArgs& a) {
  Engine engine(engine_options(a));
  const RequestId id =
      engine.add_request({.prompt = prompt_text(a.prompt), .sampling = sampling_params(a.sampling, seed_of(a.sampling))});
  std::string text;
  FinishReason why = FinishReason::None;
  while (engine.has_unfinished()) {
    for (const RequestOutput& o : engine.step()) {
      text += o.text;
      if (!a.json && !o.text.empty()) {
        std::fwrite(o.text.data(), 1, o.text.size(), stdout);
        std::fflush(stdout);
      }
      if (o.finished) why = o.finish_reason;
    }
  }
  const RequestStats st = engine.stats(id);
  if (a.json) {
    nlohmann::json j = result_json(engine, id, text);
    j["finish_reason"] = finish_reason_name(why);
    std::printf("%s\n", json_dump(j).c_str());
  } else {
    std::printf("\n");
  }
  std::fflush(stdout);  // the text's last line before the stats line on stderr
  std::fprintf(stderr, "prefill: %d tokens, %.1f tokens/s | decode: %d tokens, %.1f tokens/s | finish: %s%s\n",
               st.n_prompt_tokens, st.ttft_s > 0 ? st.n_prompt_tokens / st.ttft_s : 0.0,
               st.n_output_tokens, st.decode_tokens_per_s, finish_reason_name(why),
               spec_stats(st.n_spec_drafts, st.n_spec_draft_tokens, st.n_spec_accepted_tokens).c_str());
  return 0;
}

// One JSON object per line: {"prompt": "...", "max_tokens": N, "temperature": T, "top_p": P,
// "top_k": K, "min_p": M, "repetition_penalty": R, "presence_penalty": PP, "frequency_penalty": FP,
// "logit_bias": {"ID": BIAS}, "seed": S, "stop": [...], "priority": P};
// missing fields take the command-line values.
GenerateRequest request_from_line(const nlohmann::json& j, const GenerateArgs& a, uint64_t seed,
                                  const std::string& where) {
  if (!j.is_object()) fail("{}: expected a JSON object", where);
  if (!j.contains("prompt") || !j["prompt"].is_string()) fail("{}: field 'prompt' must be a string", where);
  GenerateRequest r{.prompt = j["prompt"].get<std::string>(), .sampling = sampling_params(a.sampling, seed)};
  auto num = [&](const char* k, auto& dst) {
    if (!j.contains(k)) return;
    if (!j[k].is_number()) fail("{}: field '{}' must be a number", where, k);
    dst = j[k].get<std::decay_t<decltype(dst)>>();
  };
  num("max_tokens", r.sampling.max_tokens);
  num("temperature", r.sampling.temperature);
  num("top_p", r.sampling.top_p);
  num("top_k", r.sampling.top_k);
  num("min_p", r.sampling.min_p);
  num("repetition_penalty", r.sampling.repetition_penalty);
  num("presence_penalty", r.sampling.presence_penalty);
  num("frequency_penalty", r.sampling.frequency_penalty);
  if (j.contains("logit_bias")) {
    const nlohmann::json& lb = j["logit_bias"];
    if (!lb.is_object()) fail("{}: field 'logit_bias' must be an object of token id -> bias", where);
    r.sampling.logit_bias.clear();
    for (const auto& [key, value] : lb.items()) {
      const auto id = parse_int(key, 0, INT32_MAX);
      if (!id) fail("{}: 'logit_bias' keys must be token ids, got '{}'", where, key);
      if (!value.is_number() || !(value.get<double>() >= -100 && value.get<double>() <= 100))
        fail("{}: 'logit_bias' values must be numbers in [-100, 100] (token {})", where, key);
      r.sampling.logit_bias.emplace_back(int32_t(*id), value.get<float>());
    }
  }
  num("seed", r.sampling.seed);
  num("priority", r.priority);
  if (j.contains("stop")) {
    if (j["stop"].is_string()) r.sampling.stop = {j["stop"].get<std::string>()};
    else if (j["stop"].is_array()) r.sampling.stop = j["stop"].get<std::vector<std::string>>();
    else fail("{}: field 'stop' must be a string or a list of strings", where);
  }
  return r;
}

int run_batch(const GenerateArgs& a) {
  std::ifstream in(a.prompts_file);
  if (!in) fail("cannot open prompts file {}", a.prompts_file);
  std::vector<nlohmann::json> lines;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    lines.push_back(parse_json_bounded(line, fmt::format("{}:{}", a.prompts_file, n)));
  }
  Engine engine(engine_options(a));
  const uint64_t seed = seed_of(a.sampling);
  std::vector<RequestId> ids;
  for (size_t i = 0; i < lines.size(); ++i)
    ids.push_back(engine.add_request(
        request_from_line(lines[i], a, seed, a.prompts_file + " line " + std::to_string(i + 1))));
  std::map<RequestId, std::string> texts;
  std::map<RequestId, FinishReason> why;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t n_out = 0;
  while (engine.has_unfinished()) {
    for (const RequestOutput& o : engine.step()) {
      texts[o.id] += o.text;
      n_out += int64_t(o.new_token_ids.size());
      if (o.finished) why[o.id] = o.finish_reason;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (RequestId id : ids) {
    const RequestStats st = engine.stats(id);
    nlohmann::json j = result_json(engine, id, texts[id]);
    j["finish_reason"] = finish_reason_name(why[id]);
    j["ttft_s"] = st.ttft_s;
    j["tokens_per_s"] = st.decode_tokens_per_s;
    std::printf("%s\n", json_dump(j).c_str());
  }
  const EngineMetrics m = engine.metrics();
  const std::string spec = spec_stats(m.spec_drafts, m.spec_draft_tokens, m.spec_accepted_tokens);
  std::fprintf(stderr, "%zu requests, %lld new tokens in %.2f s: %.1f tokens/s%s\n", ids.size(),
               (long long)n_out, secs, secs > 0 ? double(n_out) / secs : 0.0, spec.c_str());
  return 0;
}

}  // namespace

void add_generate(CLI::App& app, Runner& run) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* c = app.add_subcommand("generate", "Generate text from a prompt (or a JSONL file of prompts)");
  add_model_args(c, a->model);
  add_tp_arg(c, a->tp);
  auto* p = add_prompt_arg(c, a->prompt);
  auto* f = c->add_option("--prompts-file", a->prompts_file,
                          "JSONL file, one {\"prompt\": ..., \"max_tokens\": ...} per line, run concurrently");
  p->excludes(f);
  add_sampling_args(c, a->sampling);
  c->add_flag("--json", a->json, "Print one JSON object {prompt_ids, output_ids, text} per prompt");
  c->add_option("--max-batch-tokens", a->max_batch_tokens, "Tokens per engine step")->capture_default_str();
  c->add_option("--max-seqs", a->max_seqs, "Sequences running at once")->capture_default_str();
  c->add_option("--block-size", a->block_size, "Tokens per KV block")->capture_default_str();
  add_spec_args(c, a->spec);
  c->callback([a, &run, p, f] {
    if (p->count() == 0 && f->count() == 0) throw CLI::RequiredError("--prompt or --prompts-file");
    run = [a] {
      apply_threads(a->model.threads);
      return a->prompts_file.empty() ? run_single(*a) : run_batch(*a);
    };
  });
}

}  // namespace tf::cli

// End to end through the Engine with backend "cuda" on models/tiny-main, against the golden
// file from Hugging Face transformers (float32), as tests/engine/test_golden.cpp does for the
// CPU backends but with tolerances for BF16 activations.
//
// Error budget: the weights are BF16 in the checkpoint (identical on both sides), so the
// difference comes from rounding activations to BF16 (<= 2^-8 relative per rounding) about
// ten times per layer over 6 layers, partly averaging out, and from the BF16 KV cache. That
// gives logits about 1e-2 off in relative L2 (golden logits have an RMS of ~4.4, so ~0.05
// per logit); kLogitTol = 3e-2 leaves a factor 3. A wrong op gives O(1).
//
// Greedy ids are compared over the whole continuation; where they first differ from the
// golden ids, the golden top-1/top-2 margin at that step must be below kTieTol: the
// difference of two logits each ~0.05 off has a standard deviation of ~0.07, and 0.25 is
// ~3.5 of those. Past that near-tie the continuations rightly differ. Each divergence is
// printed (which prompt, which step, which margin).
// Prompt positions: the argmax at each position must equal the golden one wherever the CPU
// backend's F32 logits have a top-1/top-2 margin >= kTieTol there.
//
// The greedy requests of all prompts run at once (max_seqs 4), so the CUDA backend sees
// batches mixing prefills and decodes of several sequences.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <regex>

#include "batched_vs_alone.h"
#include "op_test_util.h"
#include "param_name.h"
#include "cuda_test_report.h"
#include "engine/golden_util.h"
#include "model/config.h"
#include "model/tokenizer/tokenizer.h"
#include "sample/sampler.h"
#include "twofold/engine.h"

namespace tf {
namespace {

constexpr double kLogitTol = 3e-2;
constexpr double kTieTol = 0.25;

// Parameter: the KV dtype, with "-eager" for a run without CUDA Graphs (the default records
// decode steps, so the other cases test the recorded path).
class CudaEngine : public ::testing::TestWithParam<std::string> {
 protected:
  EngineOptions options(const std::string& dir) const {
    const std::string p = GetParam();
    const size_t dash = p.find('-');
    return EngineOptions{.model_dir = dir, .backend = "cuda", .kv_dtype = p.substr(0, dash),
                         .kernels = {.cuda_graphs = dash == std::string::npos}};
  }
};

TEST_P(CudaEngine, TinyMainMatchesGolden) {
  TF_REQUIRE_CUDA_DEVICE();
  const std::string dir = test::golden_model_dir("tiny-main");
  EngineOptions opt = options(dir);
  opt.max_seqs = 4;
  Engine engine(opt);
  Engine cpu(EngineOptions{.model_dir = dir, .backend = "cpu", .max_seqs = 4});
  const int64_t n_vocab = engine.config().n_vocab;
  const std::vector<test::GoldenPrompt> golden = test::load_golden("tiny-main");

  // ---- logits of every prompt position
  for (const test::GoldenPrompt& g : golden) {
    SCOPED_TRACE(g.name);
    const std::vector<float> all = engine.score(g.input_ids, /*all_positions=*/true);
    ASSERT_EQ(all.size(), g.input_ids.size() * size_t(n_vocab));
    const float* last = all.data() + (g.input_ids.size() - 1) * size_t(n_vocab);
    const double err = test::rel_l2(last, g.last_logits.data(), size_t(n_vocab));
    EXPECT_LE(err, kLogitTol) << "last-position logits";
    test::record("engine: last logits", "rel L2", err, kLogitTol, err <= kLogitTol);

    const std::vector<float> ref = cpu.score(g.input_ids, /*all_positions=*/true);
    int n_checked = 0, n_wrong = 0;
    for (size_t i = 0; i < g.input_ids.size(); ++i) {
      if (test::top2_margin(ref.data() + i * size_t(n_vocab), n_vocab) < kTieTol) continue;
      ++n_checked;
      const int32_t got = argmax({all.data() + i * size_t(n_vocab), size_t(n_vocab)});
      n_wrong += got != g.argmax_per_position[i];
      EXPECT_EQ(got, g.argmax_per_position[i]) << "position " << i;
    }
    test::record("engine: prompt argmax", "mismatches", n_wrong, 0, n_wrong == 0);
    std::printf("[ note ] %s: last logits rel L2 %.3g; argmax checked at %d of %zu positions\n", g.name.c_str(),
                err, n_checked, g.input_ids.size());
  }

  // ---- greedy continuations, all prompts at once
  std::map<RequestId, const test::GoldenPrompt*> ids;
  for (const test::GoldenPrompt& g : golden) {
    const RequestId id = engine.add_request(
        {.prompt_ids = g.input_ids,
         .sampling = {.temperature = 0, .max_tokens = int32_t(g.greedy_ids.size()), .ignore_eos = true}});
    ids[id] = &g;
  }
  while (engine.has_unfinished()) engine.step();
  for (const auto& [id, gp] : ids) {
    const test::GoldenPrompt& g = *gp;
    SCOPED_TRACE(g.name);
    const std::vector<int32_t>& out = engine.output_ids(id);
    ASSERT_EQ(out.size(), g.greedy_ids.size());
    // The whole continuation is compared. Where it first differs from the golden ids, the
    // golden top-1/top-2 margin at that step must be within BF16 noise (< kTieTol): a
    // near-tie that rounding may flip, after which the two continuations rightly differ.
    size_t first_diff = 0;
    while (first_diff < out.size() && out[first_diff] == g.greedy_ids[first_diff]) ++first_diff;
    const bool all_equal = first_diff == out.size();
    const bool ok = all_equal || g.greedy_margins[first_diff] < kTieTol;
    EXPECT_TRUE(ok) << "greedy step " << first_diff << " differs (got " << out[first_diff] << ", golden "
                    << g.greedy_ids[first_diff] << ") where the golden margin " << g.greedy_margins[first_diff]
                    << " is not a near-tie";
    test::record("engine: greedy ids", "wrong prompts", !ok, 0, ok);
    if (all_equal)
      std::printf("[ note ] %s: greedy ids equal golden for all %zu steps\n", g.name.c_str(), out.size());
    else
      std::printf("[ note ] %s: greedy ids equal golden for %zu of %zu steps; first divergence at step %zu, "
                  "golden margin %.3g (near-tie)\n", g.name.c_str(), first_diff, out.size(), first_diff,
                  g.greedy_margins[first_diff]);
    engine.release(id);
  }
  EXPECT_EQ(engine.n_kv_blocks_free(), engine.n_kv_blocks_total());
}

// The batching engine on CUDA: every request's greedy ids through a batch equal its ids run
// alone up to BF16 near-ties (batched_vs_alone.h).
TEST_P(CudaEngine, BatchedEqualsAloneUpToNearTies) {
  TF_REQUIRE_CUDA_DEVICE();
  test::expect_batched_equals_alone(options(test::golden_model_dir("tiny-main")), test::load_golden("tiny-main"),
                                    "engine: batched vs alone (" + GetParam() + " KV)", /*require_preemption=*/true);
}

// Sampled requests (temperature, top-p, top-k) take the GPU sampler: the uniform comes from
// each request's seeded RNG on the host, so running the same requests again gives the same
// tokens, and every token is in the vocabulary.
TEST_P(CudaEngine, SampledOnGpuIsReproducible) {
  TF_REQUIRE_CUDA_DEVICE();
  const std::string dir = test::golden_model_dir("tiny-main");
  const auto golden = test::load_golden("tiny-main");
  std::vector<std::vector<int32_t>> runs[2];
  for (auto& out : runs) {
    EngineOptions opt = options(dir);
    opt.max_seqs = 8;
    // Each engine times cuBLAS against its own kernels per shape; near-equal timings may pick
    // differently in the two engines and round differently. Pinned here: this test is about
    // the sampler's RNG, not the kernel choice.
    opt.kernels.gemv = "custom";
    Engine e(opt);
    std::vector<RequestId> ids;
    for (size_t i = 0; i < golden.size(); ++i)
      ids.push_back(e.add_request({.prompt_ids = golden[i].input_ids,
                                   .sampling = {.temperature = 0.8f, .top_k = int32_t(i % 2 ? 40 : 0),
                                                .top_p = i % 3 ? 0.9f : 1.0f, .seed = 1234 + i, .max_tokens = 24,
                                                .ignore_eos = true}}));
    while (e.has_unfinished()) e.step();
    for (RequestId id : ids) {
      out.push_back(e.output_ids(id));
      for (int32_t t : out.back()) EXPECT_TRUE(t >= 0 && t < e.config().n_vocab);
      EXPECT_EQ(out.back().size(), 24u);
    }
  }
  EXPECT_EQ(runs[0], runs[1]) << "same seeds, same requests, different tokens";
  test::record("engine: GPU sampling reproducible", "differing runs", runs[0] != runs[1], 0, runs[0] == runs[1]);
}

// Overlapped steps (KernelOptions::overlap_steps -1: on where launches are asynchronous, as
// here): a decode step is
// launched before the previous step's ids reach the host, taking them from the device
// (CudaBackend::take_token_ids), and sampled rows stage their parameters in pinned memory
// instead of waiting for the stream. One engine (the same recordings and kernel choices; the
// timed trials off, so nothing changes its kernels between the runs), greedy and sampled
// requests in one batch, then the same requests again: the ids with overlap equal those
// without, token for token, and the overlap happened.
TEST(CudaEngineOverlap, OverlappedStepsGiveTheSameIds) {
  TF_REQUIRE_CUDA_DEVICE();
  const std::vector<test::GoldenPrompt> golden = test::load_golden("tiny-main");
  Engine engine(EngineOptions{.model_dir = test::golden_model_dir("tiny-main"), .backend = "cuda", .kv_dtype = "bf16",
                              .max_seqs = 8, .enable_prefix_caching = false});
  auto run = [&](int overlap) {
    engine.set_kernel_options({.gemv = "custom", .pdl_timed = false, .gemv_timed = false, .overlap_steps = overlap});
    const int64_t before = engine.metrics().n_overlapped_steps;
    std::vector<RequestId> ids;
    for (size_t i = 0; i < golden.size(); ++i) {
      const bool sampled = i % 2 == 1;
      ids.push_back(engine.add_request(
          {.prompt_ids = golden[i].input_ids,
           .sampling = {.temperature = sampled ? 0.8f : 0.0f, .top_p = sampled ? 0.9f : 1.0f, .seed = 77 + i,
                        .max_tokens = int32_t(20 + 3 * i), .ignore_eos = true}}));
    }
    while (engine.has_unfinished()) engine.step();
    std::vector<std::vector<int32_t>> out;
    for (RequestId id : ids) {
      out.push_back(engine.output_ids(id));
      engine.release(id);
    }
    return std::pair{out, engine.metrics().n_overlapped_steps - before};
  };
  const auto [plain, plain_overlapped] = run(0);
  const auto [overlapped, n_overlapped] = run(-1);
  const auto [plain_again, unused] = run(0);
  (void)unused;
  EXPECT_EQ(plain_overlapped, 0);
  EXPECT_GT(n_overlapped, 0) << "no step was launched before the previous one's ids were read";
  ASSERT_EQ(plain.size(), golden.size());
  EXPECT_EQ(plain_again, plain) << "the engine's own runs differ: the comparison below means nothing";
  bool same = true;
  for (size_t i = 0; i < golden.size(); ++i) {
    SCOPED_TRACE(golden[i].name);
    EXPECT_EQ(plain[i].size(), size_t(20 + 3 * i));
    EXPECT_EQ(overlapped[i], plain[i]) << "ids with overlapped steps";
    same = same && overlapped[i] == plain[i];
  }
  test::record("engine: overlapped steps, greedy and sampled", "requests differing", same ? 0 : 1, 0, same);
}

// `twofold bench --variants profile,default`: profiled steps run eagerly with an event pair
// around every op; once the options drop `profile`, recorded steps must record no events (an
// event synchronized inside a capture is an error, and the profiler synchronizes when 4,096
// are pending: 200 steps of tiny-main's six layers pass that). The report's op totals stay
// those of the profiled steps, and the greedy ids are the same both ways (kernels held: the
// timed trials off).
TEST(CudaEngineProfile, ProfiledStepsThenRecordedOnes) {
  TF_REQUIRE_CUDA_DEVICE();
  const std::vector<test::GoldenPrompt> golden = test::load_golden("tiny-main");
  Engine engine(EngineOptions{.model_dir = test::golden_model_dir("tiny-main"), .backend = "cuda", .kv_dtype = "bf16"});
  auto run = [&](bool profile) {
    engine.set_kernel_options({.pdl_timed = false, .gemv_timed = false, .profile = profile});
    const RequestId id = engine.add_request(
        {.prompt_ids = golden[0].input_ids, .sampling = {.temperature = 0.0f, .max_tokens = 200, .ignore_eos = true}});
    while (engine.has_unfinished()) engine.step();
    std::vector<int32_t> out = engine.output_ids(id);
    engine.release(id);
    return out;
  };
  auto op_lines = [&] {
    std::vector<std::string> ops;
    for (const std::string& line : engine.tuning_report())
      if (line.rfind("op ", 0) == 0) ops.push_back(line);
    return ops;
  };
  const std::vector<int32_t> profiled = run(true);
  const std::vector<std::string> ops = op_lines();
  ASSERT_FALSE(ops.empty()) << "the profiled steps timed no op";
  const std::vector<int32_t> recorded = run(false);
  EXPECT_EQ(op_lines(), ops) << "ops were timed after profiling was turned off";
  EXPECT_EQ(recorded.size(), 200u);
  EXPECT_EQ(recorded, profiled);
  test::record("engine: profiled, then recorded steps", "ids differing", recorded == profiled ? 0 : 1, 0,
               recorded == profiled);
}

// SamplingParams::prompt_logprobs on the CUDA backend: the prompt's chunks computed with
// logits at every position (small chunks: max_batch_tokens 16), beside a plain request, give
// each prompt token's logprob as the same engine's score() of the prompt does (the same
// forward outside the scheduler; BF16 activations in batches of other shapes, hence 0.05 on a
// logprob), and the request's output is unchanged.
TEST(CudaEnginePromptLogprobs, MatchScoreBesideAnotherRequest) {
  TF_REQUIRE_CUDA_DEVICE();
  Engine e(EngineOptions{.model_dir = test::golden_model_dir("tiny-main"), .backend = "cuda", .kv_dtype = "bf16",
                         .max_batch_tokens = 16, .max_seqs = 4});
  const std::string prompt =
      "In the beginning God created the heaven and the earth. And the earth was without form, and void.";
  const RequestId scored = e.add_request(
      {.prompt = prompt, .sampling = {.temperature = 0, .max_tokens = 4, .ignore_eos = true, .prompt_logprobs = 2}});
  const RequestId other = e.add_request({.prompt = "The LORD is my shepherd;",
                                         .sampling = {.temperature = 0, .max_tokens = 8, .ignore_eos = true}});
  std::vector<SampledLogprobs> lps;
  while (e.has_unfinished())
    for (const RequestOutput& o : e.step())
      if (o.id == scored && !o.prompt_logprobs.empty()) lps = o.prompt_logprobs;
  const std::vector<int32_t> ids = e.prompt_ids(scored);
  ASSERT_EQ(lps.size(), ids.size() - 1);
  const std::vector<float> all = e.score(ids, /*all_positions=*/true);
  const size_t n_vocab = size_t(e.config().n_vocab);
  double worst = 0;
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    const float* row = all.data() + i * n_vocab;
    double m = row[0], sum = 0;
    for (size_t k = 0; k < n_vocab; ++k) m = std::max(m, double(row[k]));
    for (size_t k = 0; k < n_vocab; ++k) sum += std::exp(double(row[k]) - m);
    const double want = double(row[ids[i + 1]]) - m - std::log(sum);
    EXPECT_EQ(lps[i].sampled.id, ids[i + 1]);
    EXPECT_EQ(lps[i].top.size(), 2u);
    worst = std::max(worst, std::fabs(lps[i].sampled.logprob - want));
  }
  EXPECT_LE(worst, 0.05);
  test::record("engine: prompt logprobs against score()", "max |difference|", worst, 0.05, worst <= 0.05);
  EXPECT_EQ(e.output_ids(other).size(), 8u);
  EXPECT_EQ(e.output_ids(scored).size(), 4u);
}

// Constrained decoding on the CUDA backend: json_object, json_schema (greedy and sampled, the
// schema with optional properties, integer bounds, string lengths and a date format) and
// regex requests batched with a plain request on tiny-main, which never saw JSON, without
// speculation and with prompt lookup (the verified rows masked). Every constrained output that
// ends (the closing bytes favoured by logit_bias, as the CPU tests do) parses and follows its
// format, checked on the parsed value; the plain request runs its max_tokens. Without the
// masks reaching the GPU's draws, tiny-main's sampled text is not JSON.
TEST(CudaEngineJson, ConstrainedOutputsBesideAPlainRequest) {
  TF_REQUIRE_CUDA_DEVICE();
  for (const std::string method : {"", "ngram"}) {  // without speculation, then with prompt lookup
    SCOPED_TRACE(method);
    Engine e(EngineOptions{.model_dir = test::golden_model_dir("tiny-main"), .backend = "cuda", .kv_dtype = "bf16",
                           .max_seqs = 8, .spec = {.method = method, .adaptive = false}});
    const char* schema = R"({"type": "object", "properties": {
        "name": {"type": "string", "minLength": 2, "maxLength": 6}, "age": {"type": "integer", "minimum": 18, "maximum": 99},
        "born": {"type": "string", "format": "date"}, "city": {"enum": ["Oslo", "Rome"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2}},
      "required": ["name", "age", "born"]})";
    auto bias = [&](GenerateRequest& r, float b) {
      for (const char* closer : {"}", "\"", "\",", "\"}"})
        for (int32_t id : e.tokenizer().encode(closer, /*add_special=*/false)) r.sampling.logit_bias.emplace_back(id, b);
    };
    std::vector<GenerateRequest> reqs;
    for (uint64_t seed = 0; seed < 4; ++seed) {
      GenerateRequest r{.prompt = "Describe the king as a JSON object:",
                        .sampling = {.temperature = seed == 0 ? 0.0f : 1.0f, .seed = seed, .max_tokens = 300,
                                     .output_format = OutputFormat::JsonSchema, .json_schema = schema}};
      bias(r, 4.0f);
      reqs.push_back(r);
    }
    for (uint64_t seed = 4; seed < 7; ++seed) {
      GenerateRequest r{.prompt = "Describe the king as a JSON object:",
                        .sampling = {.temperature = 1.0f, .seed = seed, .max_tokens = 400,
                                     .output_format = OutputFormat::JsonObject}};
      bias(r, 6.0f);
      reqs.push_back(r);
    }
    const std::string pattern = "[A-Z][a-z]{2,5}( [0-9]{1,3})?";
    for (uint64_t seed = 7; seed < 9; ++seed)
      reqs.push_back({.prompt = "Name:", .sampling = {.temperature = 1.0f, .seed = seed, .max_tokens = 20,
                                                      .output_format = OutputFormat::Regex, .regex = pattern}});
    reqs.push_back({.prompt = "The LORD is my shepherd;", .sampling = {.temperature = 1.0f, .seed = 9, .max_tokens = 24,
                                                                      .ignore_eos = true}});
    std::vector<RequestId> ids;
    for (const GenerateRequest& r : reqs) ids.push_back(e.add_request(r));
    std::vector<std::string> text(reqs.size());
    std::vector<FinishReason> why(reqs.size(), FinishReason::None);
    while (e.has_unfinished())
      for (const RequestOutput& o : e.step())
        for (size_t i = 0; i < ids.size(); ++i)
          if (o.id == ids[i]) {
            text[i] += o.text;
            if (o.finished) why[i] = o.finish_reason;
          }
    int n_checked = 0;
    for (size_t i = 0; i + 1 < reqs.size(); ++i) {
      SCOPED_TRACE(text[i]);
      ASSERT_EQ(why[i], FinishReason::Stop);
      if (reqs[i].sampling.output_format == OutputFormat::Regex) {
        EXPECT_TRUE(std::regex_match(text[i], std::regex(pattern)));
        ++n_checked;
        continue;
      }
      ASSERT_TRUE(nlohmann::json::accept(text[i]));
      const nlohmann::ordered_json v = nlohmann::ordered_json::parse(text[i]);
      ASSERT_TRUE(v.is_object());
      ++n_checked;
      if (reqs[i].sampling.output_format != OutputFormat::JsonSchema) continue;
      std::vector<std::string> keys;
      for (const auto& [k, x] : v.items()) keys.push_back(k);
      ASSERT_GE(keys.size(), 2u);
      EXPECT_EQ(keys[0], "name");
      EXPECT_EQ(keys[1], "age");
      ASSERT_GE(keys.size(), 3u);
      EXPECT_EQ(keys[2], "born");
      EXPECT_TRUE(std::regex_match(v["born"].get<std::string>(), std::regex("\\d{4}-\\d{2}-\\d{2}"))) << v["born"];
      const std::string name = v["name"];
      EXPECT_GE(name.size(), 2u);  // tiny-main's bytes here are ASCII or multi-byte: at least 2 bytes
      ASSERT_TRUE(v["age"].is_number_integer());
      EXPECT_GE(v["age"].get<int>(), 18);
      EXPECT_LE(v["age"].get<int>(), 99);
      for (size_t k = 3; k < keys.size(); ++k) EXPECT_TRUE(keys[k] == "city" || keys[k] == "tags") << keys[k];
      if (v.contains("city")) {
        EXPECT_TRUE(v["city"] == "Oslo" || v["city"] == "Rome");
      }
      if (v.contains("tags")) {
        ASSERT_TRUE(v["tags"].is_array());
        EXPECT_LE(v["tags"].size(), 2u);
      }
    }
    EXPECT_EQ(n_checked, 9);
    EXPECT_EQ(why.back(), FinishReason::Length);
    EXPECT_EQ(e.output_ids(ids.back()).size(), 24u);
    std::printf("cuda json: greedy schema output %s\n", text[0].c_str());
    if (!method.empty()) {
      EXPECT_GT(e.metrics().spec_accepted_tokens, 0);
      std::printf("cuda json, ngram: %lld proposals, %lld accepted\n", (long long)e.metrics().spec_draft_tokens,
                  (long long)e.metrics().spec_accepted_tokens);
    }
  }
}

// models/gguf/tiny-main-q4_0.gguf on the CUDA backend as loaded by default: its Q4_0 matrices
// and embedding kept (CudaBackend::reads_gguf_block) and held as W4 with groups of 32 (the same
// values exactly), the Q6_K LM head dequantized at load. Against the CPU backend running the
// same file dequantized to F32 (the same weights in float32): BF16 activations and the W4 g32
// tensor-core path's BF16 rounding of each weight, within kLogitTol as the BF16 checkpoint
// above. A wrong repack or embedding gather gives O(1).
TEST(CudaEngineGguf, Q4_0HeldAsW4MatchesTheCpuDequantized) {
  TF_REQUIRE_CUDA_DEVICE();
  const std::string file = test::source_path("models/gguf/tiny-main-q4_0.gguf");
  Engine engine(EngineOptions{.model_dir = file, .backend = "cuda", .kv_dtype = "bf16", .max_seqs = 4});
  Engine cpu(EngineOptions{.model_dir = file, .backend = "cpu", .weights = {.dequantize_gguf = true}, .max_seqs = 4});
  const size_t n_vocab = size_t(engine.config().n_vocab);
  for (const test::GoldenPrompt& g : test::load_golden("tiny-main")) {
    SCOPED_TRACE(g.name);
    const std::vector<float> got = engine.score(g.input_ids, /*all_positions=*/false);
    const std::vector<float> want = cpu.score(g.input_ids, /*all_positions=*/false);
    ASSERT_EQ(got.size(), n_vocab);
    ASSERT_EQ(want.size(), n_vocab);
    const double err = test::rel_l2(got.data(), want.data(), n_vocab);
    EXPECT_LE(err, kLogitTol) << "last-position logits";
    test::record("engine: gguf Q4_0 as W4, last logits", "rel L2", err, kLogitTol, err <= kLogitTol);
  }
}

// tiny-main with FP8 weights (round-to-nearest at load) scoring the golden prompts joined into
// one prompt, so that the prefill runs the W8A8 path (per-token FP8 activations, cuBLASLt):
// every position's logits with the epilogues quantizing for the next product (the default)
// equal those of the engine that quantizes each product's input itself, bit for bit.
TEST(CudaEngineFp8, HandoffLeavesTheLogitsUnchanged) {
  TF_REQUIRE_CUDA_DEVICE();
  const std::string dir = test::golden_model_dir("tiny-main");
  std::vector<int32_t> prompt;
  for (const test::GoldenPrompt& g : test::load_golden("tiny-main"))
    prompt.insert(prompt.end(), g.input_ids.begin(), g.input_ids.end());
  ASSERT_GT(prompt.size(), 64u);
  std::vector<std::vector<float>> logits;
  for (const bool handoff : {true, false}) {
    Engine engine(EngineOptions{.model_dir = dir, .backend = "cuda", .weights = {.quantization = "fp8"},
                                .kv_dtype = "bf16", .max_seqs = 4,
                                .kernels = {.fp8_handoff = handoff}});
    engine.score(prompt, /*all_positions=*/true);  // the FP8 GEMMs' choices are timed on first sight
    logits.push_back(engine.score(prompt, /*all_positions=*/true));
  }
  ASSERT_EQ(logits[0].size(), prompt.size() * size_t(8192));
  const auto ok = test::bitwise_equal(logits[0], logits[1]);
  EXPECT_TRUE(ok);
  test::record("engine: fp8 weights, handoff vs none", "bit-exact", ok ? 0 : 1, 0, bool(ok));
}

// tiny-main with FP8 weights, the GEMMs' unit-scale sums kept in BF16 (the default) and in F32,
// beside the 16-bit model, over the first 4,096 held-out validation tokens (16 windows of 256,
// so every product runs the W8A8 path): the BF16 sums may not raise the perplexity by more
// than 0.1% (a tenth of issue 14's FP8 budget) nor move the first window's logits further
// from the 16-bit model's than 1.1 times the F32 sums' distance. The logits of the two differ
// (the sums' type was exercised).
TEST(CudaEngineFp8, Bf16SumsKeepThePerplexity) {
  TF_REQUIRE_CUDA_DEVICE();
  const std::string dir = test::golden_model_dir("tiny-main");
  std::vector<int32_t> ids;
  {
    std::ifstream f(test::data_path("valid_tokens_65536.bin"), std::ios::binary);
    std::vector<uint16_t> u(4096);
    ASSERT_TRUE(f.read(reinterpret_cast<char*>(u.data()), std::streamsize(u.size() * 2)));
    ids.assign(u.begin(), u.end());
  }
  constexpr size_t kWindow = 256, kVocab = 8192;
  struct Scored {
    double nll = 0;               // mean over every predicted token
    std::vector<float> first;     // the first window's logits
  };
  auto score = [&](const std::string& quantization, bool sums_f32) {
    Engine engine(EngineOptions{.model_dir = dir, .backend = "cuda", .weights = {.quantization = quantization},
                                .kv_dtype = "bf16", .max_seqs = 4, .kernels = {.fp8_sums_f32 = sums_f32}});
    Scored out;
    size_t n = 0;
    for (size_t w = 0; w + kWindow <= ids.size(); w += kWindow) {
      const std::vector<int32_t> win(ids.begin() + std::ptrdiff_t(w), ids.begin() + std::ptrdiff_t(w + kWindow));
      const std::vector<float> logits = engine.score(win, /*all_positions=*/true);
      EXPECT_EQ(logits.size(), kWindow * kVocab);
      if (logits.size() != kWindow * kVocab) return out;
      if (w == 0) out.first = logits;
      for (size_t i = 0; i + 1 < kWindow; ++i, ++n) {
        const float* row = logits.data() + i * kVocab;
        const double mx = *std::max_element(row, row + kVocab);
        double z = 0;
        for (size_t v = 0; v < kVocab; ++v) z += std::exp(double(row[v]) - mx);
        out.nll += mx + std::log(z) - double(row[size_t(win[i + 1])]);
      }
    }
    out.nll /= double(n);
    return out;
  };
  const Scored full = score("", false), f32 = score("fp8", true), bf16 = score("fp8", false);
  ASSERT_EQ(full.first.size(), kWindow * kVocab);
  ASSERT_EQ(bf16.first.size(), kWindow * kVocab);
  ASSERT_EQ(f32.first.size(), kWindow * kVocab);
  auto ppl = [](const Scored& s) { return std::exp(s.nll); };
  auto dist = [&](const Scored& a, const Scored& b) {
    return test::rel_l2(a.first.data(), b.first.data(), a.first.size());
  };
  const double fp8_cost = ppl(f32) / ppl(full) - 1, sums_cost = ppl(bf16) / ppl(f32) - 1;
  std::printf("  perplexity: 16-bit %.4f, FP8 F32 sums %.4f (%+.2f%%), FP8 BF16 sums %.4f (%+.2f%% over F32 sums)\n",
              ppl(full), ppl(f32), 100 * fp8_cost, ppl(bf16), 100 * sums_cost);
  std::printf("  rel L2 of the first window's logits: to the 16-bit model's, F32 sums %.4g, BF16 sums %.4g; "
              "between them %.4g\n",
              dist(f32, full), dist(bf16, full), dist(bf16, f32));
  EXPECT_LT(fp8_cost, 0.01);
  EXPECT_LT(sums_cost, 0.001);
  EXPECT_LE(dist(bf16, full), 1.1 * dist(f32, full));
  EXPECT_NE(dist(bf16, f32), 0.0) << "no product took the epilogue scaling, so the sums' type was not exercised";
  test::record("engine: fp8 weights, BF16 vs F32 sums", "perplexity change", sums_cost, 0.001, sums_cost < 0.001);
}

// The launch orders of decode steps (PDL: a kernel launches as the previous one drains and
// copies its first weights before waiting for it) against plain stream order, on tiny-main with
// INT8 and INT4 weights, one request at a time so every decode step is a one-row GEMV step:
// plain order, PDL for the grid-sized GEMVs only, PDL for every kernel, and the default,
// pdl_timed (a step replayed often recorded again with PDL for every kernel, the faster
// recording kept, which tuning_report lists) must give the same greedy ids for every golden
// prompt, as must plain order again after them. gemv_timed is off throughout: its trials change
// the GEMV kernels (GemvTrialsRunAndKeepTheIds below), which may move a near tie. A kernel that read its input before the
// previous kernel finished would not. Prefix caching is off: a prompt met before would run its
// last token as a one-row step rather than inside the prefill GEMM, which may move a near tie.
TEST(CudaEngineQuant, DecodeLaunchOrdersGiveTheSameIds) {
  TF_REQUIRE_CUDA_DEVICE();
  const std::string dir = test::golden_model_dir("tiny-main");
  const std::vector<test::GoldenPrompt> golden = test::load_golden("tiny-main");
  const std::pair<const char*, KernelOptions> orders[] = {
      {"plain order", {.pdl_decode_resident = false, .pdl_timed = false, .gemv_timed = false}},
      {"pdl for the grid-sized kernels", {.pdl_timed = false, .gemv_timed = false}},
      {"pdl for every kernel", {.pdl_resident = true, .pdl_decode = true, .gemv_timed = false}},
      {"timed (the default)", {.gemv_timed = false}},
      {"plain order again", {.pdl_decode_resident = false, .pdl_timed = false, .gemv_timed = false}},
  };
  for (const std::string quantization : {"int8", "int4"}) {
    SCOPED_TRACE(quantization);
    Engine engine(EngineOptions{.model_dir = dir, .backend = "cuda", .weights = {.quantization = quantization},
                                .kv_dtype = "bf16", .max_seqs = 1, .enable_prefix_caching = false});
    auto run = [&](const KernelOptions& k) {
      engine.set_kernel_options(k);
      std::vector<std::vector<int32_t>> out;
      for (const test::GoldenPrompt& g : golden) {
        const RequestId id = engine.add_request(
            {.prompt_ids = g.input_ids, .sampling = {.temperature = 0, .max_tokens = 40, .ignore_eos = true}});
        while (engine.has_unfinished()) engine.step();
        out.push_back(engine.output_ids(id));
        engine.release(id);
      }
      return out;
    };
    const std::vector<std::vector<int32_t>> plain = run(orders[0].second);
    ASSERT_EQ(plain.size(), golden.size());
    for (const std::vector<int32_t>& ids : plain) ASSERT_EQ(ids.size(), 40u);
    bool ok = true;
    for (size_t o = 1; o < std::size(orders); ++o) {
      SCOPED_TRACE(orders[o].first);
      const std::vector<std::vector<int32_t>> got = run(orders[o].second);
      for (size_t i = 0; i < golden.size(); ++i) {
        SCOPED_TRACE(golden[i].name);
        EXPECT_EQ(got[i], plain[i]) << "greedy ids against plain stream order";
        ok = ok && got[i] == plain[i];
      }
    }
    test::record("engine: decode launch orders, " + quantization, "prompts differing", ok ? 0 : 1, 0, ok);
    int timed = 0;
    for (const std::string& line : engine.tuning_report()) {
      const bool trial = line.starts_with("recorded step ");
      timed += trial;
      if (trial || line.find("rows=1 ") != std::string::npos)
        std::printf("  [%s] %s\n", quantization.c_str(), line.c_str());
    }
    EXPECT_GT(timed, 0) << "the pdl_timed run recorded no step both ways";
  }
}

// gemv_timed (the default): a recorded step replayed often is recorded again once for each
// kernel whose cold time for one of its quantized GEMV shapes was near that shape's pick, and
// the faster recording kept. On tiny-main with INT8 and INT4 weights, one request at a time
// (one-row GEMVs), the trials must run (tuning_report lists them) and every id generated while
// they run must be the model's choice: another kernel sums in another order, which moves near
// ties (tiny-main's INT8 python_def prompt has one at its 5th generated token), so ids are
// not compared with the cold picks' run; instead each generation is scored as one sequence
// (Engine::score, the prefill path) and every generated id's logit must be within
// max(0.1, twice the cold run's largest such gap) of its position's largest. A trial recording
// that computed anything but the step would put ids far below the largest logit.
TEST(CudaEngineQuant, GemvTrialsRunAndKeepTheIds) {
  TF_REQUIRE_CUDA_DEVICE();
  const std::string dir = test::golden_model_dir("tiny-main");
  const std::vector<test::GoldenPrompt> golden = test::load_golden("tiny-main");
  constexpr size_t kGen = 40;
  for (const std::string quantization : {"int8", "int4"}) {
    SCOPED_TRACE(quantization);
    Engine engine(EngineOptions{.model_dir = dir, .backend = "cuda", .weights = {.quantization = quantization},
                                .kv_dtype = "bf16", .max_seqs = 1, .enable_prefix_caching = false});
    const size_t vocab = size_t(engine.config().n_vocab);
    // The largest gap between a generated id's logit and its position's largest, over every
    // generation of two passes over the prompts (enough replays of the step for every trial).
    auto run = [&](const KernelOptions& k) {
      engine.set_kernel_options(k);
      double worst = 0;
      for (int rep = 0; rep < 2; ++rep)
        for (const test::GoldenPrompt& g : golden) {
          const RequestId id = engine.add_request(
              {.prompt_ids = g.input_ids, .sampling = {.temperature = 0, .max_tokens = int(kGen), .ignore_eos = true}});
          while (engine.has_unfinished()) engine.step();
          const std::vector<int32_t> out = engine.output_ids(id);
          engine.release(id);
          EXPECT_EQ(out.size(), kGen);
          std::vector<int32_t> seq = g.input_ids;
          seq.insert(seq.end(), out.begin(), out.end());
          const std::vector<float> logits = engine.score(seq, /*all_positions=*/true);
          EXPECT_EQ(logits.size(), seq.size() * vocab);
          if (logits.size() != seq.size() * vocab) return 1e30;
          for (size_t j = 0; j < out.size(); ++j) {
            const float* row = logits.data() + (g.input_ids.size() + j - 1) * vocab;
            worst = std::max(worst, double(*std::max_element(row, row + vocab) - row[size_t(out[j])]));
          }
        }
      return worst;
    };
    const double cold = run({.gemv_timed = false}), timed = run({});
    const double bound = std::max(0.1, 2 * cold);
    std::printf("  [%s] largest gap of a generated id's logit below its position's largest: cold picks %.4f, "
                "with the trials %.4f (bound %.4f)\n",
                quantization.c_str(), cold, timed, bound);
    EXPECT_LE(timed, bound);
    int trials = 0;
    for (const std::string& line : engine.tuning_report())
      if (line.starts_with("recorded step ") && line.find(" rows=") != std::string::npos) {
        ++trials;
        std::printf("  [%s] %s\n", quantization.c_str(), line.substr(0, 240).c_str());
      }
    EXPECT_GT(trials, 0) << "no recorded step was recorded again with another GEMV kernel";
    test::record("engine: gemv trials, " + quantization, "largest logit gap of an id", timed, bound,
                 timed <= bound && trials > 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Kv, CudaEngine, ::testing::Values("bf16", "f16", "int8", "fp8", "bf16-eager"),
                         test::ParamName());

}  // namespace
}  // namespace tf
